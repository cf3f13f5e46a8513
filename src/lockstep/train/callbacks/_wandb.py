"""Weights & Biases: a logger callback for the driver and ``setup_wandb`` for the training
function."""

from __future__ import annotations

import os
from typing import Any

from lockstep._core.callback import Trial
from lockstep._core.mappings import flatten_dict
from lockstep.train.callbacks._logger import LoggerCallback

# Keys Ray's W&B logger leaves out of each logged result.
_EXCLUDED = ("config", "date", "done", "hostname", "node_ip", "pid", "trial_id")


class WandbLoggerCallback(LoggerCallback):
    """Logs each trial as a W&B run: config, and each result at step ``training_iteration``;
    as Ray's ``WandbLoggerCallback``.

    The run is written under the trial's directory (``<dir>/wandb``). Offline mode
    (``WANDB_MODE=offline`` or ``mode="offline"``) needs no account; ``wandb sync`` uploads
    such runs later.

    Args:
        project: The W&B project. Default: the trial's experiment (a Train run's name).
        group: Groups the trials of one experiment.
        api_key_file: A file holding the API key.
        api_key: The API key.
        excludes: Result keys not to log.
        log_config: Also log the config inside each result, as ``config/...``.
        upload_checkpoints: Log each committed checkpoint as a ``model`` artifact.
        **kwargs: Passed to ``wandb.init`` (``entity``, ``mode``, ``tags``, ...).

    Example:
        >>> from lockstep.train import RunConfig
        >>> run_config = RunConfig(callbacks=[
        ...     WandbLoggerCallback(project="digits", group="baseline", mode="offline")])
    """

    def __init__(
        self,
        project: str | None = None,
        group: str | None = None,
        api_key_file: str | None = None,
        api_key: str | None = None,
        excludes: list[str] | None = None,
        log_config: bool = False,
        upload_checkpoints: bool = False,
        save_checkpoints: bool = False,
        upload_timeout: int = 1800,
        **kwargs: Any,
    ) -> None:
        self.project = project
        self.group = group
        self.api_key = _api_key(api_key, api_key_file)
        self.excludes = list(excludes or [])
        self.log_config = log_config
        self.upload_checkpoints = upload_checkpoints or save_checkpoints
        self.upload_timeout = upload_timeout
        self.kwargs = kwargs
        self._runs: dict[Trial, Any] = {}

    def log_trial_start(self, trial: Trial) -> None:
        import wandb

        self._finish(trial, exit_code=0)
        local = trial.path if "://" not in trial.path else None
        if local is not None:
            os.makedirs(local, exist_ok=True)
        settings = wandb.Settings(api_key=self.api_key) if self.api_key else None
        init: dict[str, Any] = {
            "project": self.project or _project(trial),
            "group": self.group,
            "name": str(trial),
            "config": trial.config,
            "dir": local,
            "reinit": "create_new",
            "settings": settings,
            **self.kwargs,
        }
        self._runs[trial] = wandb.init(**init)

    def log_trial_result(self, iteration: int, trial: Trial, result: dict[str, Any]) -> None:
        if trial not in self._runs:
            self.log_trial_start(trial)
        excluded = set(_EXCLUDED) | set(self.excludes)
        if self.log_config:
            excluded.discard("config")
        metrics = flatten_dict({k: v for k, v in result.items() if k not in excluded})
        step = int(result.get("timesteps_total") or result["training_iteration"])
        self._runs[trial].log(metrics, step=step)

    def log_trial_save(self, trial: Trial) -> None:
        latest = trial.last_result.get("checkpoint_dir_name")
        if not self.upload_checkpoints or trial not in self._runs or not latest:
            return
        import wandb

        artifact = wandb.Artifact(name=f"checkpoint_{_safe(str(trial))}", type="model")
        artifact.add_dir(os.path.join(trial.path, latest))
        self._runs[trial].log_artifact(artifact)

    def log_trial_end(self, trial: Trial, failed: bool = False) -> None:
        self._finish(trial, exit_code=1 if failed else 0)

    def _finish(self, trial: Trial, exit_code: int) -> None:
        run = self._runs.pop(trial, None)
        if run is not None:
            run.finish(exit_code=exit_code)


def _api_key(api_key: str | None, api_key_file: str | None) -> str | None:
    if api_key_file is None:
        return api_key
    with open(os.path.expanduser(api_key_file), encoding="utf-8") as f:
        return f.readline().strip()


def _project(trial: Trial) -> str:
    """A Train run's name; a Tune trial's experiment (its parent directory's name)."""
    if trial.results_logged:
        return trial.trial_id
    return os.path.basename(os.path.dirname(trial.path.rstrip("/"))) or str(trial)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def setup_wandb(
    config: dict[str, Any] | None = None,
    api_key: str | None = None,
    api_key_file: str | None = None,
    rank_zero_only: bool = True,
    **kwargs: Any,
) -> Any:
    """Start a W&B run inside the training function and return it; as Ray's ``setup_wandb``.

    Only rank 0 logs (unless ``rank_zero_only=False``): the other ranks get a disabled run
    whose methods do nothing. The project defaults to the run's name; ``kwargs`` go to
    ``wandb.init``.

    Example:
        >>> def train_func(config):
        ...     wandb = setup_wandb(config, project="digits", mode="offline")
        ...     wandb.log({"loss": 0.1})
    """
    import wandb

    from lockstep.train.callbacks._mlflow import _rank_and_name

    rank, name = _rank_and_name()
    if rank_zero_only and rank != 0:
        return wandb.init(mode="disabled")
    key = _api_key(api_key, api_key_file)
    init: dict[str, Any] = {
        "project": name,
        "config": config,
        "reinit": "create_new",
        "settings": wandb.Settings(api_key=key) if key else None,
        **kwargs,
    }
    return wandb.init(**init)
