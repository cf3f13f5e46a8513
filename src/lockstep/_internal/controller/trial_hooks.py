"""Ray Tune's callback hooks for a Train run: the run is the experiment's only trial.

The logger callbacks (JSON, CSV, TensorBoard, MLflow, W&B) are written once against
:class:`~lockstep._core.callback.Callback`; Tune calls the hooks for each of its trials,
and a Train run calls them through this class, with a result dict that carries the keys
Ray Tune adds to every report (``training_iteration``, ``time_this_iter_s``, ``trial_id``,
``config``, ...).
"""

from __future__ import annotations

import datetime
import os
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from lockstep._core.callback import Callback, Trial
from lockstep._core.checkpoint import Checkpoint


class TrialHooks:
    """Calls each :class:`Callback` as a run starts, reports, checkpoints and ends."""

    def __init__(
        self, callbacks: Sequence[Callback], trial: Trial, *, time_offset: float = 0.0
    ) -> None:
        self._callbacks = list(callbacks)
        self.trial = trial
        self._iterations_since_restore = 0
        # A resumed run's clock starts where the interrupted one stopped.
        self._time_at_restore = time_offset
        self._last_time_total = time_offset
        self._started = False

    @property
    def active(self) -> bool:
        """Whether there is any callback to call (a run without Tune's callbacks skips
        building their results)."""
        return bool(self._callbacks)

    def start(self) -> None:
        """``setup`` then ``on_trial_start``, once per run."""
        if not self._callbacks or self._started:
            return
        self._started = True
        for callback in self._callbacks:
            callback.setup(stop=None, num_samples=1, total_num_samples=1)
        self.trial.status = "RUNNING"
        for callback in self._callbacks:
            callback.on_trial_start(0, [self.trial], self.trial)

    def result(
        self,
        row: Mapping[str, Any],
        worker_results: list[dict[str, Any]],
        checkpoint: Checkpoint | None,
    ) -> None:
        """``on_trial_result`` (and ``on_checkpoint``) for one committed step."""
        if not self._callbacks:
            return
        result = self._tune_result(row)
        self.trial.last_result = result
        iteration = int(result["training_iteration"])
        trials = [self.trial]
        for callback in self._callbacks:
            callback.on_trial_result(
                iteration, trials, self.trial, result, worker_results=worker_results
            )
        if checkpoint is not None:
            for callback in self._callbacks:
                callback.on_checkpoint(iteration, trials, self.trial, checkpoint)

    def end(self, error: BaseException | None) -> None:
        """``on_trial_complete`` or ``on_trial_error``, then ``on_experiment_end``."""
        if not self._started:
            return
        self._started = False
        trials = [self.trial]
        iteration = int(self.trial.last_result.get("training_iteration", 0))
        self.trial.error = error
        self.trial.status = "TERMINATED" if error is None else "ERROR"
        for callback in self._callbacks:
            if error is None:
                callback.on_trial_complete(iteration, trials, self.trial)
            else:
                callback.on_trial_error(iteration, trials, self.trial)
        for callback in self._callbacks:
            callback.on_experiment_end(trials)

    def _tune_result(self, row: Mapping[str, Any]) -> dict[str, Any]:
        self._iterations_since_restore += 1
        total = float(row.get("time_total_s", 0.0))
        this_iter = total - self._last_time_total
        self._last_time_total = total
        result = dict(row)
        result.update(
            {
                "done": False,
                "trial_id": self.trial.trial_id,
                "date": datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S"),
                "time_this_iter_s": this_iter,
                "time_since_restore": total - self._time_at_restore,
                "iterations_since_restore": self._iterations_since_restore,
                "pid": os.getpid(),
                "hostname": socket.gethostname(),
                "node_ip": _node_ip(),
                "config": dict(self.trial.config),
            }
        )
        return result


def _node_ip() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"
