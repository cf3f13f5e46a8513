"""MLflow: a logger callback for the driver and ``setup_mlflow`` for the training function."""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from typing import Any

from lockstep._core import flags
from lockstep._core.callback import Trial
from lockstep._core.mappings import flatten_dict
from lockstep.train.callbacks._logger import LoggerCallback, scalar


class MLflowLoggerCallback(LoggerCallback):
    """Logs each trial as an MLflow run: config as params, results as metrics (step
    ``training_iteration``), status FINISHED or FAILED at the end; as Ray's
    ``MLflowLoggerCallback``.

    Args:
        tracking_uri: Where runs are stored: ``sqlite:///mlflow.db``, ``http://host:5000``,
            ... Default: MLflow's own default (``MLFLOW_TRACKING_URI``, else ``mlflow.db``
            in the working directory).
        registry_uri: The model registry's URI.
        experiment_name: The MLflow experiment; created if missing.
        run_name: The MLflow run's name. Default: the trial's name (a Train run's name).
        tags: Tags set on every run (``trial_name`` is added).
        tracking_token: A token for a tracking server (sets ``MLFLOW_TRACKING_TOKEN``).
        save_artifact: Upload each committed checkpoint, and the trial's directory at its
            end, as artifacts of the run.
        log_params_on_trial_end: Log the config when the trial ends rather than when it starts.

    Example:
        >>> from lockstep.train import RunConfig
        >>> run_config = RunConfig(callbacks=[
        ...     MLflowLoggerCallback(tracking_uri="sqlite:///mlflow.db", experiment_name="exp")])
    """

    def __init__(
        self,
        tracking_uri: str | None = None,
        *,
        registry_uri: str | None = None,
        experiment_name: str | None = None,
        run_name: str | None = None,
        tags: dict[str, Any] | None = None,
        tracking_token: str | None = None,
        save_artifact: bool = False,
        log_params_on_trial_end: bool = False,
    ) -> None:
        self.tracking_uri = tracking_uri
        self.registry_uri = registry_uri
        self.experiment_name = experiment_name
        self.run_name = run_name
        self.tags = dict(tags or {})
        self.tracking_token = tracking_token
        self.should_save_artifact = save_artifact
        self.log_params_on_trial_end = log_params_on_trial_end
        self._client: Any = None
        self._experiment_id: str | None = None
        self._runs: dict[Trial, str] = {}

    def setup(self, **info: Any) -> None:
        from mlflow.tracking import MlflowClient

        if self.tracking_token is not None:
            os.environ["MLFLOW_TRACKING_TOKEN"] = self.tracking_token
        with _file_store_allowed(self.tracking_uri):
            self._client = MlflowClient(
                tracking_uri=self.tracking_uri, registry_uri=self.registry_uri
            )
            self._experiment_id = _experiment_id(self._client, self.experiment_name)

    def log_trial_start(self, trial: Trial) -> None:
        if self._client is None:
            self.setup()
        if trial not in self._runs:
            tags = {**self.tags, "trial_name": str(trial)}
            run = self._client.create_run(
                self._experiment_id, run_name=self.run_name or str(trial), tags=tags
            )
            self._runs[trial] = run.info.run_id
        if not self.log_params_on_trial_end:
            self._log_params(trial)

    def log_trial_result(self, iteration: int, trial: Trial, result: dict[str, Any]) -> None:
        if trial not in self._runs:
            self.log_trial_start(trial)
        from mlflow.entities import Metric

        step = int(result.get("timesteps_total") or result["training_iteration"])
        timestamp = int(float(result.get("timestamp", 0)) * 1000)
        metrics = [
            Metric(key=_key(name), value=number, timestamp=timestamp, step=step)
            for name, value in flatten_dict(result).items()
            if not name.startswith("config/") and (number := scalar(value)) is not None
        ]
        self._client.log_batch(self._runs[trial], metrics=metrics)

    def log_trial_save(self, trial: Trial) -> None:
        if not self.should_save_artifact or trial not in self._runs:
            return
        latest = trial.last_result.get("checkpoint_dir_name")
        if latest and not _is_remote(trial.path):
            path = os.path.join(trial.path, latest)
            self._client.log_artifacts(self._runs[trial], path, artifact_path=latest)

    def log_trial_end(self, trial: Trial, failed: bool = False) -> None:
        if trial not in self._runs:
            return
        run_id = self._runs.pop(trial)
        if self.should_save_artifact and not _is_remote(trial.path):
            self._client.log_artifacts(run_id, trial.path)
        if self.log_params_on_trial_end:
            self._runs[trial] = run_id
            self._log_params(trial)
            del self._runs[trial]
        self._client.set_terminated(run_id, status="FAILED" if failed else "FINISHED")

    def _log_params(self, trial: Trial) -> None:
        from mlflow.entities import Param

        params = [Param(_key(k), str(v)) for k, v in flatten_dict(trial.config).items()]
        if params:
            self._client.log_batch(self._runs[trial], params=params)


@contextlib.contextmanager
def _file_store_allowed(tracking_uri: str | None) -> Iterator[None]:
    """Let MLflow open the file store an explicit ``tracking_uri`` names (``file:///path``,
    as Ray's examples write it), with a warning.

    MLflow 3 refuses a file store unless ``MLFLOW_ALLOW_FILE_STORE=true``, and would stop the
    run at its first report: the user asked for that store, so it is opened (MLflow keeps
    the store it opened for the process) with the variable set while it opens, then unset.
    """
    if not _is_file_store(tracking_uri) or flags.MLFLOW_ALLOW_FILE_STORE.get():
        yield
        return
    warnings.warn(
        f"MLflow deprecates its file store (tracking_uri={tracking_uri!r}) and refuses it "
        "unless MLFLOW_ALLOW_FILE_STORE=true; lockstep opens it, since you asked for it. "
        "HINT: tracking_uri='sqlite:///mlflow.db' (`mlflow migrate-filestore` moves old runs)",
        FutureWarning,
        stacklevel=4,
    )
    os.environ[flags.MLFLOW_ALLOW_FILE_STORE.name] = "true"
    try:
        yield
    finally:
        del os.environ[flags.MLFLOW_ALLOW_FILE_STORE.name]


def _is_file_store(tracking_uri: str | None) -> bool:
    """Whether ``tracking_uri`` names a directory: ``file:///path`` or a plain path."""
    if tracking_uri is None:
        return False
    plain_path = "://" not in tracking_uri and ":" not in tracking_uri
    return tracking_uri.startswith("file:") or plain_path


def _experiment_id(client: Any, name: str | None) -> str:
    """The id of the experiment named ``name`` (created if missing), or MLflow's default."""
    if name is None:
        return "0"
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return str(experiment.experiment_id)
    try:
        return str(client.create_experiment(name))
    except Exception:
        # Another process created it between the lookup and the creation.
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            raise
        return str(experiment.experiment_id)


def _key(name: str) -> str:
    """MLflow keys allow letters, digits and ``_-./ ``; anything else becomes ``_``."""
    return "".join(c if c.isalnum() or c in "_-./ " else "_" for c in name)


def _is_remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def setup_mlflow(
    config: dict[str, Any] | None = None,
    tracking_uri: str | None = None,
    registry_uri: str | None = None,
    experiment_id: str | None = None,
    experiment_name: str | None = None,
    tracking_token: str | None = None,
    artifact_location: str | None = None,
    run_name: str | None = None,
    create_experiment_if_not_exists: bool = False,
    tags: dict[str, Any] | None = None,
    rank_zero_only: bool = True,
) -> Any:
    """Start an MLflow run inside the training function and return the ``mlflow`` module.

    Only rank 0 logs (unless ``rank_zero_only=False``): the other ranks get an object whose
    every method does nothing, so the same code runs on every worker. ``config`` is logged
    as the run's params. As Ray's ``setup_mlflow``.

    Example:
        >>> def train_func(config):
        ...     mlflow = setup_mlflow(config, tracking_uri="sqlite:///mlflow.db",
        ...                           experiment_name="exp", create_experiment_if_not_exists=True)
        ...     mlflow.log_metric("loss", 0.1, step=1)
    """
    import mlflow

    rank, default_name = _rank_and_name()
    if rank_zero_only and rank != 0:
        return _NoopModule()
    if tracking_token is not None:
        os.environ["MLFLOW_TRACKING_TOKEN"] = tracking_token
    if tracking_uri is not None:
        mlflow.set_tracking_uri(tracking_uri)
        with _file_store_allowed(tracking_uri):
            mlflow.search_experiments(max_results=1)  # opens the store, which MLflow keeps
    if registry_uri is not None:
        mlflow.set_registry_uri(registry_uri)
    name = experiment_name or default_name
    if experiment_id is not None:
        mlflow.set_experiment(experiment_id=experiment_id)
    elif name is not None:
        if mlflow.get_experiment_by_name(name) is None:
            if not create_experiment_if_not_exists and experiment_name is not None:
                raise ValueError(
                    f"MLflow experiment {name!r} does not exist. HINT: create it, or pass "
                    "create_experiment_if_not_exists=True"
                )
            mlflow.create_experiment(name, artifact_location=artifact_location)
        mlflow.set_experiment(experiment_name=name)
    mlflow.start_run(run_name=run_name or name, tags=tags)
    if config:
        mlflow.log_params({_key(k): v for k, v in flatten_dict(config).items()})
    return mlflow


def _rank_and_name() -> tuple[int, str | None]:
    """This worker's rank and the run's name; rank 0 and no name outside a run."""
    from lockstep.train._session import get_context

    try:
        context = get_context()
    except RuntimeError:
        return 0, None
    return context.get_world_rank(), context.get_experiment_name()


class _NoopModule:
    """What ranks other than 0 get: any attribute is a function that does nothing."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None

    def __bool__(self) -> bool:
        return False
