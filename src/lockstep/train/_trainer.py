"""DataParallelTrainer: run one training function on N workers and return a Result."""

from __future__ import annotations

import datetime
import functools
import inspect
import json
import os
import secrets
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import MISSING, asdict, dataclass, fields, replace
from typing import Any, ClassVar, TypeVar

from lockstep._core import flags, pickling, pyarrow_fs, storage
from lockstep._core.checkpoint import PREPROCESSOR_KEY, Checkpoint, preprocessor_metadata
from lockstep._core.config import DataConfig, RunConfig, ScalingConfig, is_ray_dataset
from lockstep._core.context import TrainContext
from lockstep._core.errors import RunNotFoundError, TrainingInterrupted, UsageKeyError
from lockstep._core.result import Result
from lockstep._core.trial import TrialOutcome, TrialRun
from lockstep._internal.backends.base import BackendConfig
from lockstep._internal.controller.controller import TrainController
from lockstep._internal.controller.failure_policy import FailurePolicy
from lockstep._internal.controller.function_trial import FunctionTrialRun
from lockstep._internal.controller.progress import Progress
from lockstep._internal.controller.run_record import RunRecord
from lockstep._internal.controller.scaling_policy import ElasticRun, create_scaling_policy
from lockstep._internal.execution import run
from lockstep._internal.execution.environments.base import Launch
from lockstep._internal.execution.messages import LocalFunction
from lockstep._internal.execution.plan import ExecutionPlan
from lockstep._internal.execution.resolve import (
    capacity_probe,
    default_storage_path,
    is_cluster_member,
    make_worker_group,
    resolve_plan,
    start_early,
)
from lockstep._internal.execution.worker import session as _session
from lockstep._internal.execution.worker_group.base import WorkerGroupSpec
from lockstep._internal.execution.worker_group.cluster.driver import DriverSession

_S = TypeVar("_S", bound="TrainerSpec")
_T = TypeVar("_T", bound="DataParallelTrainer")

_NO_WORKERS = ScalingConfig(num_workers=0)  # a Tune function trial's run


@dataclass(frozen=True)
class WorkerSetup:
    """What every worker runs: the function, its config, and the framework's backend."""

    train_loop: Callable[..., Any]
    config: Mapping[str, Any] | None
    backend_config: BackendConfig | None


@dataclass(frozen=True, kw_only=True)
class TrainerSpec:
    """A trainer's arguments as given, checked: what ``restore()`` reads back.

    Each trainer has its spec (a subclass adding the framework's arguments); calling the
    trainer builds its spec, then the trainer from it. ``not_taken`` names the fields of a
    parent a trainer does not accept; ``extra`` the field that takes unnamed keywords.
    """

    train_loop_per_worker: Callable[..., Any] | None = None
    train_loop_config: Mapping[str, Any] | None = None
    backend_config: BackendConfig | None = None
    scaling_config: ScalingConfig | Mapping[str, Any] | None = None
    run_config: RunConfig | None = None
    datasets: Mapping[str, Any] | None = None
    dataset_config: DataConfig | None = None
    resume_from_checkpoint: Checkpoint | None = None
    metadata: Mapping[str, Any] | None = None
    preprocessor: Any = None
    # Names of datasets left out of the saved spec (in memory, or Ray's): restore needs them.
    unsaved_datasets: tuple[str, ...] = ()

    not_taken: ClassVar[tuple[str, ...]] = ()
    extra: ClassVar[str | None] = None
    function_required: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.function_required or self.train_loop_per_worker is not None:
            _check_train_function(self.train_loop_per_worker, self.train_loop_config)
        _check_type(self.run_config, RunConfig, "run_config")
        _check_type(self.backend_config, BackendConfig, "backend_config")
        _check_type(self.dataset_config, DataConfig, "dataset_config")
        _check_type(self.resume_from_checkpoint, Checkpoint, "resume_from_checkpoint")

    def backend(self, scaling: ScalingConfig) -> BackendConfig | None:
        """The framework's backend config for workers of ``scaling``."""
        return self.backend_config

    @classmethod
    def of(cls: type[_S], **arguments: Any) -> _S:
        """The spec of ``arguments`` as a user passes them to the trainer."""
        refused = sorted(k for k in cls.not_taken if arguments.get(k) is not None)
        if refused:
            raise TypeError(f"unexpected keyword argument(s) {refused}")
        names = [f.name for f in fields(cls) if f.name not in cls.not_taken]
        unknown = sorted(k for k, v in arguments.items() if k not in names and v is not None)
        if unknown and cls.extra is None:
            raise TypeError(f"unexpected keyword argument(s) {unknown}")
        given = {k: v for k, v in arguments.items() if k in names}
        if cls.extra is not None:
            given[cls.extra] = {k: arguments[k] for k in unknown}
        return cls(**given)

    def arguments(self) -> dict[str, Any]:
        """The keyword arguments that give this spec again (``of(**spec.arguments())``)."""
        taken = [f.name for f in fields(self) if f.name not in (*self.not_taken, self.extra)]
        arguments = {name: getattr(self, name) for name in taken if name != "unsaved_datasets"}
        if self.extra is not None:
            arguments.update(getattr(self, self.extra))
        return arguments

    @classmethod
    def signature(cls) -> inspect.Signature:
        """The trainer's call signature: the spec's fields, keyword-only but the function."""
        hidden = (*cls.not_taken, cls.extra, "unsaved_datasets")
        parameters = [
            inspect.Parameter(
                f.name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD
                if f.name == "train_loop_per_worker"
                else inspect.Parameter.KEYWORD_ONLY,
                default=None if f.default is MISSING else f.default,
                annotation=f.type,
            )
            for f in fields(cls)
            if f.name not in hidden
        ]
        if cls.extra is not None:
            parameters.append(inspect.Parameter(cls.extra, inspect.Parameter.VAR_KEYWORD))
        return inspect.Signature(parameters)


@dataclass(frozen=True, kw_only=True)
class FrameworkTrainerSpec(TrainerSpec):
    """A framework trainer's arguments: its framework's config (the field named
    ``config_field``, of class ``config_type``, its default when not given) takes the place
    of ``backend_config``."""

    not_taken: ClassVar[tuple[str, ...]] = ("backend_config",)
    config_field: ClassVar[str]
    config_type: ClassVar[type[BackendConfig]]

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_type(getattr(self, self.config_field), self.config_type, self.config_field)

    def backend(self, scaling: ScalingConfig) -> Any:
        return getattr(self, self.config_field) or self.config_type()


class DataParallelTrainer:
    """Runs ``train_loop_per_worker`` on every worker and collects what they report.

    Every argument is checked here, so that a mistake fails now rather than after the
    workers have started.

    Args:
        train_loop_per_worker: The training function: no argument, or one (the config).
        train_loop_config: Passed to the training function; must be picklable.
        backend_config: The framework to set up in each worker (none by default).
        scaling_config: Number of workers and their resources (a dict is accepted too).
        run_config: Name, storage, checkpoint retention, failure handling, callbacks.
        datasets: Datasets by name; ``get_dataset_shard(name)`` gives each worker its part.
        dataset_config: Which datasets are split across workers (all, by default).
        resume_from_checkpoint: Start a new run from this checkpoint.
        metadata: JSON data available as ``get_context().get_metadata()``.
        preprocessor: A ``lockstep.data.preprocessors.Preprocessor``: fitted on the
            ``"train"`` dataset when fit() starts (unless fitted already), applied to every
            dataset, and saved in every checkpoint (``Checkpoint.get_preprocessor()``);
            without datasets, it is saved as it is.

    Example:
        >>> import tempfile
        >>> from lockstep import train
        >>> def train_func(config):
        ...     for epoch in range(config["epochs"]):
        ...         train.report({"epoch": epoch, "rank": train.get_context().get_world_rank()})
        >>> with tempfile.TemporaryDirectory() as storage:
        ...     trainer = DataParallelTrainer(
        ...         train_func, train_loop_config={"epochs": 3},
        ...         scaling_config=ScalingConfig(num_workers=2),
        ...         run_config=RunConfig(storage_path=storage, verbose=0))
        ...     trainer.fit().metrics
        {'epoch': 2, 'rank': 0}
    """

    Spec: ClassVar[type[TrainerSpec]]  # set below the class: TrainerSpec

    def __init__(self, train_loop_per_worker: Callable[..., Any] | None = None, **arguments: Any):
        self._build(self.Spec.of(train_loop_per_worker=train_loop_per_worker, **arguments))

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "Spec" in cls.__dict__:
            cls.__signature__ = cls.Spec.signature()  # type: ignore[attr-defined]

    @classmethod
    def _from_spec(cls: type[_T], spec: TrainerSpec) -> _T:
        trainer = cls.__new__(cls)
        trainer._build(spec)
        return trainer

    @classmethod
    def _function_trial(
        cls,
        fn: Callable[..., Any],
        config: dict[str, Any],
        run_config: RunConfig,
        plan: ExecutionPlan | None = None,
    ) -> DataParallelTrainer:
        """A Tune function trainable as a run of no workers: ``fn(config)`` runs in the
        driver's process, never pickled, so that large objects it was given
        (``tune.with_parameters``) are shared, not copied; a dict it returns is its last
        report, as in Ray Tune. ``fn`` may be wrapped already and ``plan`` resolved
        already (:meth:`_function_trial_parts`: once for all the trials of a Tuner)."""
        spec = TrainerSpec(
            train_loop_per_worker=fn if isinstance(fn, FunctionTrial) else FunctionTrial(fn),
            train_loop_config=config,
            scaling_config=_NO_WORKERS,
            run_config=run_config,
        )
        trainer = cls.__new__(cls)
        trainer._build(spec, in_process=True, plan=plan)
        return trainer

    @classmethod
    def _run_function_trial(
        cls,
        parts: tuple[FunctionTrial, ExecutionPlan],
        config: dict[str, Any],
        run_config: RunConfig,
        trial: TrialRun,
    ) -> TrialOutcome:
        """Tune's entry point for a trial of a function trainable (``parts``: see
        :meth:`_function_trial_parts`): the function runs in the trial's thread, with a
        session that records its reports (``function_trial``); no trainer, controller or
        worker. A run that asks for a hang watchdog is a Train run (:meth:`_run_trial`),
        which has one."""
        fn, plan = parts
        if run_config.failure_config.hang_timeout_s is not None:
            return cls._function_trial(fn, config, run_config, plan)._run_trial(trial)
        started = time.monotonic()
        run_config = _named(run_config, plan.launch)
        _check_checkpoint_frequency(cls, run_config)
        _check_storage_shared(run_config, plan.executor)
        run_dir = _open_run_dir(run_config, inline_trial=True)
        record = RunRecord.open(run_dir, run_config.checkpoint_config, save_at_start=False)
        if trial.start_from is not None:
            record.start_from(trial.start_from, dict(trial.start_metrics))
        flags.fault_point("run_opened")
        record.write_params(config)  # the trial's config, as Ray Tune writes it
        context = TrainContext(
            world_rank=0,
            world_size=1,
            local_rank=0,
            local_world_size=1,
            node_rank=0,
            experiment_name=run_config.name or "",
            run_path=run_dir.uri,
            **trial.context_fields(),
        )
        ending, result = FunctionTrialRun(
            fn,
            config,
            record=record,
            context=context,
            failure_policy=FailurePolicy(run_config.failure_config),
            score_attribute=run_config.checkpoint_config.checkpoint_score_attribute,
            listeners=[trial.listener] if trial.listener else [],
            callbacks=run_config.callbacks,
            started_at=started,
        ).run()
        return TrialOutcome("paused" if ending == "paused" else "done", result)

    @staticmethod
    def _function_trial_parts(fn: Callable[..., Any]) -> tuple[FunctionTrial, ExecutionPlan]:
        """What every trial of the function trainable ``fn`` shares: ``fn`` wrapped (its
        signature read once) and the plan of a run of no workers (the environment read
        once)."""
        return FunctionTrial(fn), resolve_plan(_NO_WORKERS)

    def _build(
        self, spec: TrainerSpec, *, in_process: bool = False, plan: ExecutionPlan | None = None
    ) -> None:
        """Check what depends on this machine and the chosen executor (the ``plan``, when
        it was resolved already); pickle the function now, so that a mistake fails here
        rather than after the workers have started (unless the function runs
        ``in_process``, as a Tune function trial's does)."""
        self._spec = spec
        self._in_process = in_process
        if plan is None:
            plan = resolve_plan(ScalingConfig.coerce(spec.scaling_config))
        self._plan = plan
        # the user's, or under an elastic launcher (torchrun) the size this launch gives
        self.scaling_config = self._plan.scaling
        self.run_config = _named(spec.run_config or RunConfig(), self._plan.launch)
        _check_checkpoint_frequency(type(self), self.run_config)
        self.backend_config = spec.backend_config
        self.datasets = dict(spec.datasets or {})
        self.dataset_config = spec.dataset_config
        (self.dataset_config or DataConfig()).check_datasets(self.datasets)
        self.resume_from_checkpoint = spec.resume_from_checkpoint
        self.metadata = _check_metadata(spec.metadata)
        self.preprocessor = _check_preprocessor(spec.preprocessor, self.datasets)
        _check_storage_shared(self.run_config, self._plan.executor)
        _check_ray_datasets(self.datasets, self._plan.executor)
        self._plan.backend_for(spec.backend(self.scaling_config))  # gloo or NCCL fits
        if spec.train_loop_per_worker is not None and not in_process:
            fn, config = spec.train_loop_per_worker, spec.train_loop_config
            _pickle_function(fn, config, _check_train_function(fn, config))
        # Shards are sent to the workers: find out now if one cannot be pickled.
        _in_memory_tables(self.datasets)

    def _worker_setup(self) -> WorkerSetup:
        """The one hook for what a framework adds: the function every worker runs, its
        config and the framework's backend. Called when fit() starts, with the datasets
        final (they may be given only to fit()). The default: the user's function."""
        spec = self._spec
        assert spec.train_loop_per_worker is not None
        backend = spec.backend(self.scaling_config)
        return WorkerSetup(spec.train_loop_per_worker, spec.train_loop_config, backend)

    def fit(self, dataset: Any = None, preprocessor: Any = None) -> Result:
        """Run the training function on every worker until it returns; return the Result.

        If the run directory already holds this run, training continues from its latest
        committed checkpoint. A ``preprocessor`` is fitted on the ``"train"`` dataset first
        (unless fitted already), applied to every dataset, and saved in every checkpoint.

        Args:
            dataset: The older way to give datasets: one (``"train"``) or a dict of them.
            preprocessor: The older way to give the preprocessor.

        Raises:
            TrainingFailedError: The workers failed more than ``max_failures`` times.
        """
        started = time.monotonic()  # the run's time ledger counts from here
        if dataset is not None:
            self.datasets = dict(dataset) if isinstance(dataset, Mapping) else {"train": dataset}
            (self.dataset_config or DataConfig()).check_datasets(self.datasets)
            self._spec = replace(self._spec, datasets=self.datasets)
        if preprocessor is not None:
            self.preprocessor = _check_preprocessor(preprocessor, self.datasets)
            self._spec = replace(self._spec, preprocessor=preprocessor)
        # a cluster run opens its storage before its controller (which does this too, for
        # every other way a run starts): the fork server first, see fork_safety
        start_early(self._plan, self._worker_imports())
        return run.fit(
            self._plan,
            lambda: _storage_root(self.run_config),
            lambda session: self._controller(session=session, started_at=started),
            preemption_deadline_s=self.run_config.failure_config.preemption_deadline_s,
        )

    def _worker_imports(self) -> tuple[str, ...]:
        """What every worker of this trainer's backend imports (a fork server's to do)."""
        config = self._plan.backend_for(self._spec.backend(self.scaling_config))
        return config.backend_cls.worker_imports

    def _run_trial(self, trial: TrialRun) -> TrialOutcome:
        """Tune's entry point: this trainer's fit() as one run of a trial. The trial's
        link listens to the run; a scheduler's stop ends it finished, its pause ends it
        restorable (``"paused"``); a failure the run's FailureConfig did not absorb raises."""
        controller = self._controller(trial, started_at=time.monotonic())
        try:
            result = controller.run()
        except TrainingInterrupted:
            if controller.paused:
                return TrialOutcome("paused")
            raise
        return TrialOutcome("done", result)

    def _controller(
        self,
        trial: TrialRun | None = None,
        session: DriverSession | None = None,
        *,
        started_at: float | None = None,
    ) -> TrainController:
        """A controller for one fit() of this trainer (of a Tune trial's run, ``trial``; of
        a cluster run, on the launched processes of ``session``) that began at
        ``started_at`` (``time.monotonic()``; now by default)."""
        setup = self._worker_setup()
        takes_config = _check_train_function(setup.train_loop, setup.config)
        train_fn: bytes | LocalFunction
        if self._in_process:
            train_fn = LocalFunction(setup.train_loop, dict(setup.config or {}), takes_config)
        else:
            train_fn = _pickle_function(setup.train_loop, setup.config, takes_config)
        start_early(self._plan, self._worker_imports())  # before the storage: see fork_safety
        run_dir = _open_run_dir(self.run_config, inline_trial=self._in_process)
        if not self._in_process:
            # The arguments, then the run state (which RunRecord.open saves): from here on
            # the run can be restored, whenever the driver dies. (A Tune function trial's
            # is restored by its Tuner.)
            run_dir.write_atomic(storage.TRAINER_FILE, self._pickle_for_restore())
        record = RunRecord.open(
            run_dir, self.run_config.checkpoint_config, save_at_start=not self._in_process
        )
        if self._plan.launch is not None and self._plan.executor == "cluster":
            record.record_relaunch(self.scaling_config.min_workers, self._plan.launch.launcher)
        if trial is not None and trial.start_from is not None:
            record.start_from(trial.start_from, dict(trial.start_metrics))
        flags.fault_point("run_opened")
        # A function trial's are its config, as Ray Tune writes them; a trainer's, its own
        record.write_params(
            dict(self._spec.train_loop_config or {}) if self._in_process else self._params()
        )
        datasets = self._preprocessed_datasets()
        if self.preprocessor is not None:
            record.add_checkpoint_metadata(
                {PREPROCESSOR_KEY: preprocessor_metadata(self.preprocessor)}
            )
            # Again, now with the preprocessor fitted: restore() need not fit it again.
            run_dir.write_atomic(storage.TRAINER_FILE, self._pickle_for_restore())
        spec = self._group_spec(run_dir, datasets, train_fn, setup.backend_config)
        if trial is not None:
            spec = replace(spec, trial=trial.context_fields())
        return TrainController(
            make_worker_group=lambda: make_worker_group(self._plan, session),
            spec=spec,
            record=record,
            failure_policy=FailurePolicy(self.run_config.failure_config),
            progress=Progress(
                name=self.run_config.name or "",
                run_uri=run_dir.uri,
                num_workers=max(1, self.scaling_config.min_workers),
                verbose=self.run_config.verbose,
                metrics=self.run_config.progress_metrics,
                score_attribute=self.run_config.checkpoint_config.checkpoint_score_attribute,
                total=self.run_config.progress_total,
                resume_hint=self._resume_hint(run_dir),
            ),
            callbacks=self.run_config.callbacks,
            listeners=[trial.listener] if trial is not None and trial.listener else [],
            config=dict(self._spec.train_loop_config or {}),
            resume_from_checkpoint=self.resume_from_checkpoint,
            elastic=self._elastic_run(datasets),
            started_at=started_at,
            # a Tuner's function trial, a thread of the Tuner's process, offers no socket
            answer_status=not self._in_process,
        )

    def _elastic_run(self, datasets: dict[str, Any]) -> ElasticRun | None:
        """For ``num_workers=(min, max)``: the policy, the capacity it reads (this machine
        or the Ray cluster), and the spec of each size, its datasets split anew."""
        if not self.scaling_config.elasticity_enabled:
            return None

        def resize_spec(spec: WorkerGroupSpec, num_workers: int) -> WorkerGroupSpec:
            shards = self._shards(datasets, num_workers) if datasets else []
            return replace(spec, num_workers=num_workers, datasets=shards)

        return ElasticRun(
            policy=create_scaling_policy(self.scaling_config),
            capacity=capacity_probe(self._plan),
            resize_spec=resize_spec,
        )

    def _shards(self, datasets: dict[str, Any], num_workers: int) -> list[dict[str, Any]]:
        """Each of ``num_workers`` workers' datasets."""
        return (self.dataset_config or DataConfig()).configure(datasets, num_workers)

    def _resume_hint(self, run_dir: storage.StorageDir) -> str:
        """How a user continues this run after stopping it."""
        given = self._spec.run_config
        again = (
            "run the same script again"
            if given is not None and given.name
            else f"run it again with RunConfig(name={self.run_config.name!r})"
        )
        return f"{type(self).__name__}.restore({run_dir.uri!r}).fit(), or {again}"

    @classmethod
    def restore(cls, path: str | os.PathLike[str], **overrides: Any) -> DataParallelTrainer:
        """A trainer that continues the interrupted run in directory ``path``.

        The trainer's arguments are read back from the run; any given in ``overrides``
        (``train_loop_per_worker``, ``datasets``, ...) replace them. Datasets of data in
        memory (``from_pandas``, ``from_items``, ...) and Ray datasets are not saved with
        the run, as in Ray: pass them again as ``datasets=``.

        Example:
            >>> import os, tempfile
            >>> from lockstep.testing import train_epochs
            >>> with tempfile.TemporaryDirectory() as storage:
            ...     run = RunConfig(name="exp", storage_path=storage, verbose=0)
            ...     _ = DataParallelTrainer(train_epochs, train_loop_config={"epochs": 2},
            ...                             run_config=run).fit()
            ...     path = os.path.join(storage, "exp")
            ...     if DataParallelTrainer.can_restore(path):
            ...         restored = DataParallelTrainer.restore(
            ...             path, train_loop_config={"epochs": 4})
            ...         print(restored.fit().metrics_dataframe["epoch"].tolist())
            [0, 1, 2, 3]
        """
        import cloudpickle

        run_dir = storage.StorageDir.from_uri(path)
        if not cls.can_restore(path):
            raise RunNotFoundError(
                f"{run_dir.uri!r} holds no lockstep run to restore. HINT: pass the run "
                "directory, storage_path/name, of a run that was started with fit()"
            )
        saved = cloudpickle.loads(run_dir.read_bytes(storage.TRAINER_FILE))
        # A run of an earlier version saved the arguments as a dict.
        kwargs = saved.arguments() if isinstance(saved, TrainerSpec) else dict(saved)
        unsaved = getattr(saved, "unsaved_datasets", ()) or kwargs.pop(_UNSAVED_DATASETS, [])
        missing = [n for n in unsaved if n not in (overrides.get("datasets") or {})]
        if missing:
            raise ValueError(
                f"the run in {run_dir.uri!r} trained on datasets {missing} that are not saved "
                "with it (data in memory and Ray datasets are not copied into the run "
                "directory). HINT: pass them again: restore(path, datasets={...})"
            )
        kwargs.update(overrides)
        if not is_cluster_member():  # the driver sweeps: it may be running already
            RunRecord.sweep(run_dir)
        parent, name = _split_run_path(run_dir)
        run_config = kwargs.get("run_config") or RunConfig()
        kwargs["run_config"] = replace(run_config, name=name, storage_path=parent)
        return cls._from_spec(cls.Spec.of(**kwargs))

    def as_trainable(self) -> DataParallelTrainer:
        """This trainer as Tune's trainable (Ray's name): ``Tuner`` and ``tune.run`` take it
        as they take the trainer, each trial's config overriding its arguments.

        Example:
            >>> from lockstep.train import DataParallelTrainer
            >>> trainer = DataParallelTrainer(lambda: None)
            >>> trainer.as_trainable() is trainer
            True
        """
        return self

    @classmethod
    def can_restore(cls, path: str | os.PathLike[str]) -> bool:
        """Whether ``path`` is the directory of a run that :meth:`restore` can continue."""
        run_dir = storage.StorageDir.from_uri(path)
        return run_dir.exists(storage.TRAINER_FILE) and run_dir.exists(storage.STATE_FILE)

    def _preprocessed_datasets(self) -> dict[str, Any]:
        """The datasets, with the preprocessor fitted on "train" and applied to all (lazily:
        each worker transforms its own rows)."""
        if self.preprocessor is None:
            return self.datasets
        from lockstep.data.preprocessors import FitStatus

        unfitted = (FitStatus.NOT_FITTED, FitStatus.PARTIALLY_FITTED)
        if "train" in self.datasets and self.preprocessor.fit_status() in unfitted:
            self.preprocessor.fit(self.datasets["train"])
        return {name: self.preprocessor.transform(ds) for name, ds in self.datasets.items()}

    def _group_spec(
        self,
        run_dir: storage.StorageDir,
        datasets: dict[str, Any],
        train_fn: bytes | LocalFunction,
        backend_config: BackendConfig | None,
    ) -> WorkerGroupSpec:
        num_workers = max(1, self.scaling_config.min_workers)
        shards: list[dict[str, Any]] = []
        if datasets and not self.scaling_config.elasticity_enabled:
            # (an elastic run splits them once it knows its size)
            shards = self._shards(datasets, num_workers)
        backend = self._plan.backend_for(backend_config).make_backend()
        if not self._in_process:  # handed to an inline worker as it is
            _check_backend_picklable(backend)
        return WorkerGroupSpec(
            num_workers=num_workers,
            experiment_name=self.run_config.name or "",
            train_fn=train_fn,
            backend=backend,
            run_dir=run_dir,
            score_attribute=self.run_config.checkpoint_config.checkpoint_score_attribute,
            metadata=dict(self.metadata),
            datasets=shards,
            sys_path=tuple(sys.path),
        )

    def _params(self) -> dict[str, Any]:
        return {
            "train_loop_config": self._spec.train_loop_config,
            "scaling_config": asdict(self.scaling_config),
            "run_config": {
                "name": self.run_config.name,
                "storage_path": os.fspath(self.run_config.storage_path or ""),
                "checkpoint_config": asdict(self.run_config.checkpoint_config),
                "failure_config": asdict(self.run_config.failure_config),
            },
            "datasets": sorted(self.datasets),
            "metadata": self.metadata,
        }

    def _pickle_for_restore(self) -> bytes:
        datasets = dict(self._spec.datasets or {})
        # Ray datasets live in the cluster, and data in memory would be copied into every
        # run's directory: restore(path, datasets=...) passes them again, as in Ray.
        unsaved = sorted(
            name
            for name, ds in datasets.items()
            if is_ray_dataset(ds) or _in_memory_tables({name: ds})
        )
        spec = replace(
            self._spec,
            run_config=self.run_config,
            datasets={k: v for k, v in datasets.items() if k not in unsaved},
            unsaved_datasets=tuple(unsaved),
        )
        return pickling.dumps(spec, "the trainer's arguments")

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.run_config.name!r}, "
            f"num_workers={self.scaling_config.num_workers})"
        )


DataParallelTrainer.Spec = TrainerSpec
DataParallelTrainer.__signature__ = TrainerSpec.signature()  # type: ignore[attr-defined]


class FunctionTrial:
    """A Tune function trainable as a training function: ``fn(config)``, whose returned
    dict is reported as its last result (and a number, when it reported nothing, as
    ``_metric``), as Ray Tune does."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self._takes_config = _takes_argument(fn)
        functools.update_wrapper(self, fn)

    def __call__(self, config: dict[str, Any]) -> None:
        from lockstep.train import report

        out = self.fn(config) if self._takes_config else self.fn()
        session = _session.current()
        if isinstance(out, Mapping):
            report(dict(out))
        elif isinstance(out, int | float) and session is not None and not session.num_reports:
            report({"_metric": out})


def _takes_argument(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params
    )


def _check_checkpoint_frequency(trainer: type, run_config: RunConfig) -> None:
    """As Ray: a frequency only trainers that own the training loop can honour."""
    frequency = run_config.checkpoint_config.checkpoint_frequency
    if frequency and not getattr(trainer, "_honours_checkpoint_frequency", False):
        raise ValueError(
            f"CheckpointConfig(checkpoint_frequency={frequency}) cannot be honoured by "
            f"{trainer.__name__}: the training function decides when to checkpoint. HINT: "
            "call train.report(metrics, checkpoint=...) every n steps in your function, and "
            "leave checkpoint_frequency at 0"
        )


def _check_backend_picklable(backend: Any) -> None:
    """A backend goes to every worker: one that cannot be pickled fails here, not later."""
    pickling.dumps(backend, "backend_config (the Backend it makes)")


def _check_train_function(fn: Callable[..., Any] | None, config: Mapping[str, Any] | None) -> bool:
    """Check ``fn`` takes zero or one argument; return whether it takes the config."""
    if not callable(fn):
        raise ValueError(
            f"train_loop_per_worker must be a function, got {type(fn).__name__}. "
            "HINT: def train_func(config): ..."
        )
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return config is not None
    positional = [
        p
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    if len(positional) > 1:
        names = ", ".join(p.name for p in positional)
        raise ValueError(
            f"train_loop_per_worker takes {len(positional)} required arguments ({names}); it "
            "must take none or one, the config. HINT: def train_func(config): ..."
        )
    takes = any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params
    )
    # A function without parameters is called without the config, as Ray does.
    return takes


def _pickle_function(
    fn: Callable[..., Any], config: Mapping[str, Any] | None, takes_config: bool
) -> bytes:
    if config is not None and not isinstance(config, Mapping):
        raise ValueError(
            f"train_loop_config must be a dict, got {type(config).__name__}. "
            'HINT: train_loop_config={"lr": 0.01}'
        )
    config_copy = dict(config) if config is not None else {}
    try:
        return pickling.to_bytes((fn, config_copy, takes_config))
    except Exception:
        # name the part that cannot be pickled, then fall back to the original error
        pickling.dumps(fn, "train_loop_per_worker")
        pickling.dumps(config_copy, "train_loop_config")
        raise


def _check_preprocessor(preprocessor: Any, datasets: Mapping[str, Any]) -> Any:
    if preprocessor is None:
        return None
    from lockstep.data import Dataset
    from lockstep.data.preprocessors import FitStatus, Preprocessor

    if not isinstance(preprocessor, Preprocessor):
        raise ValueError(
            f"preprocessor must be a lockstep.data.preprocessors.Preprocessor, got "
            f"{type(preprocessor).__name__}. HINT: preprocessor=StandardScaler(columns=[...])"
        )
    needs_fit = preprocessor.fit_status() in (FitStatus.NOT_FITTED, FitStatus.PARTIALLY_FITTED)
    # Without datasets there is nothing to fit on: it is saved unfitted, as in Ray AIR.
    if needs_fit and datasets and "train" not in datasets:
        raise UsageKeyError(  # a KeyError, as in Ray
            f"the preprocessor is fitted on datasets['train'], but the datasets given are "
            f"{sorted(datasets)}. HINT: pass datasets={{'train': ds, ...}}, or a fitted "
            "preprocessor"
        )
    others = sorted(k for k, v in datasets.items() if not isinstance(v, Dataset))
    if others:
        raise ValueError(
            f"a preprocessor transforms lockstep.data Datasets; datasets {others} are not. "
            "HINT: build them with lockstep.data (from_items, read_parquet, ...)"
        )
    return preprocessor


def _in_memory_tables(datasets: Mapping[str, Any]) -> int:
    """How many in-memory tables the (non-Ray) datasets hold; a ValueError naming the part
    that cannot be pickled if one cannot be sent to the workers."""
    if not datasets:
        return 0  # lockstep.data (and pyarrow) stay unimported: a third of a second
    from lockstep.data._sources import TableSource

    return pickling.check(_local_datasets(datasets), "datasets", left_out=(TableSource,))


def _local_datasets(datasets: Mapping[str, Any]) -> dict[str, Any]:
    """The datasets that are not Ray datasets (those are passed to Ray's actors by Ray)."""
    return {k: v for k, v in datasets.items() if not is_ray_dataset(v)}


def _check_ray_datasets(datasets: Mapping[str, Any], executor: str) -> None:
    ray_names = sorted(k for k, v in datasets.items() if is_ray_dataset(v))
    if ray_names and executor != "ray":
        raise ValueError(
            f"datasets {ray_names} are ray.data Datasets, which need workers on Ray. HINT: set "
            "ScalingConfig(executor='ray'), or use lockstep.data datasets on local processes"
        )


def _check_type(value: Any, kind: type, name: str) -> Any:
    if value is not None and not isinstance(value, kind):
        raise ValueError(
            f"{name} must be a {kind.__name__}, got {type(value).__name__}. "
            f"HINT: {name}={kind.__name__}(...)"
        )
    return value


def _check_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    if metadata is None:
        return {}
    try:
        return dict(json.loads(json.dumps(dict(metadata))))
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"metadata must be JSON-serialisable: {exc}. HINT: use numbers, strings, lists "
            "and dicts"
        ) from exc


def _named(run_config: RunConfig, launch: Launch | None = None) -> RunConfig:
    """Fill in the run's name and resolve its storage path, once, at construction. In a
    job (SLURM's, SageMaker's, ...) the default name is the job's, so that a requeued or
    restarted job continues its run; SageMaker's default storage is its checkpoint
    directory, which a later job with the same checkpoint location starts with."""
    name = run_config.name or (
        f"lockstep_run-{launch.job_id}"
        if launch is not None and launch.job_id
        else f"lockstep_run-{datetime.datetime.now():%Y-%m-%d_%H-%M-%S}-{secrets.token_hex(2)}"
    )
    raw = run_config.storage_path or default_storage_path(launch)
    if run_config.storage_filesystem is not None or "?" in os.fspath(raw):
        # a path on the user's filesystem, or a URI whose query options must be kept
        return replace(run_config, name=name, storage_path=raw)
    fs, path = storage.resolve(raw)
    return replace(run_config, name=name, storage_path=storage.display_uri(fs, path))


_UNSAVED_DATASETS = "__unsaved_datasets__"  # in trainer.pkl: names restore must be given


def _check_storage_shared(run_config: RunConfig, executor: str) -> None:
    """memory:// lives in one process: workers in other processes would never see it."""
    assert run_config.storage_path is not None
    if executor != "inline" and os.fspath(run_config.storage_path).startswith("memory://"):
        raise ValueError(
            f"storage_path {run_config.storage_path!r} is in this process's memory, which "
            f"workers in other processes cannot see (executor {executor!r}). HINT: use a "
            "local path or shared storage (an NFS mount, s3://, gs://); memory:// works only "
            "with ScalingConfig(num_workers=0)"
        )


def _storage_root(run_config: RunConfig) -> storage.StorageDir:
    """The directory that holds the runs: ``storage_path``, on its filesystem."""
    assert run_config.storage_path is not None
    if run_config.storage_filesystem is not None:
        fs = pyarrow_fs.to_fsspec(run_config.storage_filesystem)
        return storage.StorageDir.of(fs, os.fspath(run_config.storage_path))
    return storage.StorageDir.from_uri(run_config.storage_path)


def _open_run_dir(run_config: RunConfig, *, inline_trial: bool = False) -> storage.StorageDir:
    """The run directory, created and proven writable before any worker starts.

    A Tune function trial's (``inline_trial``) is not marked (its worker is a thread of
    the driver: it sees what the driver sees), and its files are not fsync'd one by one:
    they are as safe from a killed driver, and reach the disk when the Tuner syncs the
    experiment's filesystem before each snapshot of its state; a checkpoint commit is
    fsync'd still. So a trial costs no disk flush (see ``StorageDir.fsync_writes``)."""
    assert run_config.name is not None
    root = _storage_root(run_config)
    run_dir = root.child(run_config.name)
    if inline_trial:
        run_dir = run_dir.without_fsync()
    try:
        run_dir.makedirs()
        if not inline_trial:
            run_dir.write_atomic(storage.MARKER_FILE, b"")
    except OSError as exc:
        raise ValueError(
            f"storage_path {root.uri!r} is not writable ({type(exc).__name__}: {exc}). "
            "HINT: pass RunConfig(storage_path=...) naming a directory you can write to"
        ) from exc
    return run_dir


def _split_run_path(run_dir: storage.StorageDir) -> tuple[str, str]:
    uri = run_dir.uri.rstrip("/")
    parent, _, name = uri.rpartition("/")
    return parent or "/", name
