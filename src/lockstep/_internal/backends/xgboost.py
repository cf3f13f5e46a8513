"""The XGBoost backend: every worker joins one xgboost collective (Rabit).

Rank 0 starts the collective's tracker on its own node, on a port its host picks (port 0,
so that no other process can take it between choosing and binding), and tells the others
its address through the driver. Every worker then joins with ``xgboost.collective.init``,
named by its rank so that xgboost's ranks are lockstep's ranks. ``xgboost.train`` in the
training function then trains one model over every worker's shard: histograms and
evaluation metrics are summed across the workers each round.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from typing import Any, ClassVar

from lockstep._core.context import Collective, TrainContext
from lockstep._internal.backends._threads import ThreadsConfig
from lockstep._internal.backends.base import Backend, BackendConfig

COMMUNICATORS = ("rabit",)
# How long rank 0 waits, at shutdown, for the other workers to leave the collective before
# it stops the tracker anyway (they have finished, failed, or are being stopped).
TRACKER_SHUTDOWN_S = 30


class XGBoostBackend(Backend):
    """Joins each worker to the xgboost collective and leaves it after training."""

    config: XGBoostConfig

    def __init__(self, config: BackendConfig) -> None:
        super().__init__(config)
        self._tracker: Any = None
        self._joined = False

    def on_worker_start(self, context: TrainContext, collective: Collective) -> None:
        import xgboost

        if self.config.num_threads:
            # A worker forked from the driver inherits an OpenMP runtime sized for the
            # driver's machine, not for the CPUs the worker was given.
            xgboost.set_config(nthread=self.config.num_threads)
        if context.world_size == 1:
            return  # a single worker trains alone: no collective to join, as in Ray
        args = None
        if context.world_rank == 0:
            self._tracker = xgboost.tracker.RabitTracker(
                n_workers=context.world_size, host_ip=context.node_ip, port=0, sortby="task"
            )
            self._tracker.start()
            args = self._tracker.worker_args()
        args = collective.broadcast_from_rank_zero(args)
        # sortby="task": the tracker ranks workers by this name, so it must sort as the rank.
        task_id = f"lockstep-rank-{context.world_rank:08d}"
        # xgboost prints "Task ... got rank n" from every worker as it joins: keep it quiet.
        joining = io.StringIO()
        with contextlib.redirect_stdout(joining):
            xgboost.collective.init(**args, dmlc_task_id=task_id)
        self._joined = True
        for line in joining.getvalue().splitlines():
            if not line.endswith(f"Task {task_id} got rank {context.world_rank}"):
                print(line)

    def on_worker_shutdown(self, context: TrainContext) -> None:
        import xgboost

        try:
            if self._joined:
                self._joined = False
                xgboost.collective.finalize()
        finally:
            tracker, self._tracker = self._tracker, None
            if tracker is not None:
                _stop_tracker(tracker)


@dataclass(frozen=True, kw_only=True)
class XGBoostConfig(ThreadsConfig):
    """How the workers' xgboost collective is set up.

    Args:
        xgboost_communicator: The collective's implementation; only ``"rabit"`` (which
            also carries GPU training: xgboost uses NCCL between GPUs within it).
        num_threads: xgboost's default number of threads in each worker (``nthread``
            given to xgboost wins). XGBoostTrainer sets it to the worker's CPUs.

    Example:
        >>> XGBoostConfig().xgboost_communicator
        'rabit'
    """

    xgboost_communicator: str = "rabit"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.xgboost_communicator not in COMMUNICATORS:
            raise ValueError(
                f"unknown xgboost_communicator {self.xgboost_communicator!r}. "
                "HINT: use xgboost_communicator='rabit'"
            )

    backend_cls: ClassVar[type[Backend]] = XGBoostBackend


def _stop_tracker(tracker: Any) -> None:
    """Wait for the workers to leave, then free the tracker (its thread and its port)."""
    try:
        tracker.wait_for(TRACKER_SHUTDOWN_S)
    except Exception:
        pass  # a worker failed or never joined: stop the tracker regardless
    try:
        tracker.free()
    except Exception:
        pass  # freeing a tracker whose workers never all joined reports that; it is freed
