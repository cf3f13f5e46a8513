"""Tuner: hyperparameter search over training runs, with Ray Tune's API."""

from __future__ import annotations

import dataclasses
import datetime
import os
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lockstep._core import flags, pickling, storage
from lockstep._core.callback import Callback
from lockstep.train import DataParallelTrainer
from lockstep.train import RunConfig as TrainRunConfig
from lockstep.tune._progress import TrialTable
from lockstep.tune._resources import ResourcePool, machine_resources
from lockstep.tune._result_grid import ResultGrid
from lockstep.tune._runner import RunnerSetup, TrialRunner
from lockstep.tune._state import (
    TUNER_FILE,
    has_state,
    read_state,
    replay_journal,
    tell_ended,
)
from lockstep.tune._stopper import Stopper, as_stopper
from lockstep.tune._trainable import TrainerTrainable, trainable_name, trial_resources
from lockstep.tune._trial import ERROR, PAUSED, PENDING, RUNNING, TuneTrial, safe_dirname
from lockstep.tune._variants import tag
from lockstep.tune.schedulers._base import FIFOScheduler, TrialScheduler
from lockstep.tune.search._basic import BasicVariantGenerator
from lockstep.tune.search._searcher import Searcher


@dataclass(frozen=True, kw_only=True)
class TuneConfig:
    """How the search goes: what to optimise, how many trials, how they are chosen.

    Args:
        metric: The metric to optimise (for the search algorithm, the scheduler and
            ``get_best_result``).
        mode: ``"min"`` or ``"max"``.
        search_alg: A search algorithm (default: grid and random variants).
        scheduler: A trial scheduler (default: FIFO, every trial to its end).
        num_samples: Samples of the param space (each expanded over its grids); -1 runs
            until ``time_budget_s`` or a stopper ends the experiment.
        max_concurrent_trials: At most this many trials at once (default: as many as the
            CPUs and GPUs allow).
        time_budget_s: Stop the experiment after this many seconds.
        reuse_actors: Accepted for compatibility; trials run in threads already.
        trial_name_creator: ``fn(trial) -> str``, each trial's name.
        trial_dirname_creator: ``fn(trial) -> str``, each trial's directory name.

    Example:
        >>> TuneConfig(metric="loss", mode="min", num_samples=10).num_samples
        10
    """

    metric: str | None = None
    mode: str | None = None
    search_alg: Searcher | None = None
    scheduler: TrialScheduler | None = None
    num_samples: int = 1
    max_concurrent_trials: int | None = None
    time_budget_s: float | None = None
    reuse_actors: bool | None = None
    trial_name_creator: Callable[[Any], str] | None = None
    trial_dirname_creator: Callable[[Any], str] | None = None

    def __post_init__(self) -> None:
        if self.mode is not None and self.mode not in ("min", "max"):
            raise ValueError(f'mode must be "min" or "max", got {self.mode!r}')
        if isinstance(self.num_samples, bool) or not isinstance(self.num_samples, int):
            raise ValueError(f"num_samples must be an integer, got {self.num_samples!r}")
        if self.num_samples == 0 or self.num_samples < -1:
            raise ValueError(f"num_samples must be >= 1 or -1 (no limit), got {self.num_samples}")
        limit = self.max_concurrent_trials
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise ValueError(f"max_concurrent_trials must be an integer >= 1, got {limit!r}")
        if self.search_alg is not None and not isinstance(self.search_alg, Searcher):
            raise ValueError(
                f"search_alg must be a lockstep.tune.search Searcher, got {self.search_alg!r}. "
                "HINT: search_alg=OptunaSearch()"
            )
        if self.scheduler is not None and not isinstance(self.scheduler, TrialScheduler):
            raise ValueError(
                f"scheduler must be a lockstep.tune.schedulers TrialScheduler, got "
                f"{self.scheduler!r}. HINT: scheduler=ASHAScheduler()"
            )


@dataclass(frozen=True, kw_only=True)
class RunConfig(TrainRunConfig):
    """A Tune experiment's run config: the Train one, plus ``stop``.

    Args:
        stop: When trials stop: ``{"metric": threshold}`` (stop once reached), a function
            ``(trial_id, result) -> bool`` or a :class:`~lockstep.tune.stopper.Stopper`.
        callbacks: Tune :class:`~lockstep.tune.Callback` instances (and Train
            ``UserCallback`` ones, given to trainer trials).

    Example:
        >>> RunConfig(name="search", stop={"training_iteration": 10}).stop
        {'training_iteration': 10}
    """

    stop: Mapping[str, Any] | Callable[[str, dict[str, Any]], bool] | Stopper | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        as_stopper(self.stop)


def _coerce_run_config(run_config: Any, name: str | None, callbacks: Any) -> RunConfig:
    if run_config is None:
        run_config = {}
    if isinstance(run_config, Mapping):
        # The older form: Tuner(run_config={...}, name=..., callbacks=...).
        run_config = RunConfig(**dict(run_config))
    if not isinstance(run_config, TrainRunConfig):
        raise ValueError(
            f"run_config must be a RunConfig, got {type(run_config).__name__}. "
            "HINT: run_config=tune.RunConfig(name=..., storage_path=...)"
        )
    if not isinstance(run_config, RunConfig):
        fields = {f.name: getattr(run_config, f.name) for f in dataclasses.fields(run_config)}
        run_config = RunConfig(**fields)
    changes: dict[str, Any] = {}
    if name is not None:
        changes["name"] = name
    if callbacks:
        changes["callbacks"] = (*run_config.callbacks, *callbacks)
    coerced: RunConfig = run_config
    if changes:
        coerced = dataclasses.replace(coerced, **changes)
    return coerced


class Tuner:
    """Runs a trainable once per config of ``param_space`` and collects the results.

    The trainable is a function ``fn(config)`` that calls ``tune.report``, or a lockstep
    trainer: each trial is then a whole ``fit()`` with its own workers, the trial's config
    overriding the trainer's arguments (``train_loop_config``, ``scaling_config``,
    ``params``, ``preprocessor``, ``datasets``, ...).

    Args:
        trainable: The function or trainer.
        param_space: The search space: constants, ``tune.choice(...)``,
            ``tune.grid_search(...)``, ... in nested dicts.
        tune_config: Metric, mode, search algorithm, scheduler, number of samples.
        run_config: Name, storage path, stop criteria, callbacks, verbosity. The older
            form passes a dict, and ``name=`` and ``callbacks=`` to the Tuner.

    Example:
        >>> import tempfile
        >>> from lockstep import tune
        >>> def objective(config):
        ...     for step in range(3):
        ...         tune.report({"score": config["a"] * step})
        >>> with tempfile.TemporaryDirectory() as d:
        ...     tuner = tune.Tuner(objective,
        ...         param_space={"a": tune.grid_search([1, 2, 3])},
        ...         tune_config=tune.TuneConfig(metric="score", mode="max"),
        ...         run_config=tune.RunConfig(name="exp", storage_path=d, verbose=0))
        ...     results = tuner.fit()
        >>> results.get_best_result().config, results.get_best_result().metrics["score"]
        ({'a': 3}, 6)
    """

    def __init__(
        self,
        trainable: Any = None,
        *,
        param_space: Mapping[str, Any] | None = None,
        tune_config: TuneConfig | None = None,
        run_config: Any = None,
        name: str | None = None,
        callbacks: Sequence[Any] | None = None,
        _restored: dict[str, Any] | None = None,
    ) -> None:
        self._trainable = _as_trainable(trainable)
        self._param_space = dict(param_space or {})
        if run_config is None and name is None and isinstance(self._trainable, TrainerTrainable):
            run_config = self._trainable.own_run_config  # the trainer's, as in Ray
        self._tune_config = tune_config or TuneConfig()
        if not isinstance(self._tune_config, TuneConfig):
            raise ValueError("tune_config must be a TuneConfig. HINT: tune.TuneConfig(...)")
        self._run_config = _named(
            _coerce_run_config(run_config, name, callbacks), trainable_name(self._trainable)
        )
        if isinstance(self._trainable, TrainerTrainable):
            self._trainable.check_space(self._param_space)
        self._restored = _restored
        self._result_grid: ResultGrid | None = None

    @property
    def _experiment_dir(self) -> storage.StorageDir:
        assert self._run_config.storage_path is not None and self._run_config.name
        root = storage.StorageDir.from_uri(self._run_config.storage_path)
        return root.child(self._run_config.name)

    def fit(self, datasets: Mapping[str, Any] | None = None) -> ResultGrid:
        """Run every trial to its end (or until a stopper or the time budget says so).

        Args:
            datasets: The older way to give a trainer trainable its datasets.

        Raises:
            ValueError: The experiment directory already holds an experiment (use
                :meth:`restore` to continue it, or another name).
        """
        if datasets is not None:
            if not isinstance(self._trainable, TrainerTrainable):
                raise ValueError(
                    "fit(datasets=...) is for a trainer trainable. HINT: pass data to a "
                    "function with tune.with_parameters(fn, data=...)"
                )
            self._trainable.datasets = dict(datasets)
        exp_dir = self._experiment_dir
        if self._restored is None:
            if has_state(exp_dir):
                raise ValueError(
                    f"{exp_dir.uri!r} already holds an experiment; it is not overwritten. "
                    "HINT: continue it with Tuner.restore(path, trainable), or pick another "
                    "RunConfig(name=...)"
                )
            exp_dir.makedirs()
            self._save_tuner(exp_dir)
        runner = self._runner(exp_dir)
        runner.run()
        self._result_grid = ResultGrid(
            runner.trials, exp_dir.uri, self._tune_config.metric, self._tune_config.mode
        )
        return self._result_grid

    def get_results(self) -> ResultGrid:
        """The results of the last :meth:`fit` (or of the restored experiment)."""
        if self._result_grid is not None:
            return self._result_grid
        exp_dir = self._experiment_dir
        if not has_state(exp_dir):
            raise RuntimeError("no results yet. HINT: call fit() first")
        if self._restored is not None:
            trials = self._restored["trials"]
        else:
            state = read_state(exp_dir)
            replay_journal(state, exp_dir)
            trials = state["trials"]
            _reload(trials)
        return ResultGrid(trials, exp_dir.uri, self._tune_config.metric, self._tune_config.mode)

    def _runner(self, exp_dir: storage.StorageDir) -> TrialRunner:
        config = self._tune_config
        searcher = self._searcher()
        scheduler = self._scheduler()
        trials: list[TuneTrial] = []
        num_created = 0
        if self._restored is not None:
            trials = self._restored["trials"]
            num_created = self._restored["num_created"]
            if trials:  # new trials keep the experiment's id prefix
                self._run_id_value = trials[0].trial_id.rpartition("_")[0]
            searcher, scheduler = self._restored["searcher"], self._restored["scheduler"]
        pool = ResourcePool(machine_resources())
        limit = config.max_concurrent_trials or 10**9
        setup = RunnerSetup(
            trainable=self._trainable,
            experiment_dir=exp_dir,
            searcher=searcher,
            scheduler=scheduler,
            stopper=as_stopper(self._run_config.stop),
            callbacks=[c for c in self._run_config.callbacks if isinstance(c, Callback)],
            pool=pool,
            max_concurrent=limit,
            num_samples=config.num_samples,
            time_budget_s=config.time_budget_s,
            run_config=self._run_config,
            new_trial=lambda c: self._new_trial(c, exp_dir, pool, len(runner.trials)),
            table=TrialTable(
                name=self._run_config.name or "",
                path=exp_dir.uri,
                metric=config.metric,
                verbose=self._run_config.verbose,
            ),
        )
        runner = TrialRunner(setup, trials, num_created)
        if self._restored is not None:
            runner.search_finished = bool(self._restored.get("search_finished"))
        return runner

    def _searcher(self) -> Searcher:
        config = self._tune_config
        searcher = config.search_alg or BasicVariantGenerator()
        searcher.set_search_properties(
            config.metric, config.mode, self._param_space, num_samples=config.num_samples
        )
        return searcher

    def _scheduler(self) -> TrialScheduler:
        scheduler = self._tune_config.scheduler or FIFOScheduler()
        scheduler.set_search_properties(self._tune_config.metric, self._tune_config.mode)
        return scheduler

    def _new_trial(
        self, config: dict[str, Any], exp_dir: storage.StorageDir, pool: ResourcePool, index: int
    ) -> TuneTrial:
        resources = trial_resources(self._trainable, config)
        name = trainable_name(self._trainable)
        pool.check(resources, f"trial {index} of {name}")
        pool.check_concurrency(resources, self._tune_config.max_concurrent_trials)
        trial_id = f"{self._run_id}_{index:05d}"
        experiment_tag = f"{index}_{tag(config, self._param_space)}".rstrip("_")
        trial = TuneTrial(
            trial_id=trial_id,
            config=config,
            experiment_dir=exp_dir,
            dirname=safe_dirname(f"{name}_{trial_id}_{experiment_tag}"),
            experiment_tag=experiment_tag,
            resources=resources,
        )
        creators = self._tune_config
        if creators.trial_name_creator is not None:
            trial.custom_name = str(creators.trial_name_creator(trial))
        if creators.trial_dirname_creator is not None:
            trial.dirname = safe_dirname(str(creators.trial_dirname_creator(trial)))
            trial.path = exp_dir.join(trial.dirname)
        return trial

    @property
    def _run_id(self) -> str:
        if not hasattr(self, "_run_id_value"):
            self._run_id_value = secrets.token_hex(3)
        return self._run_id_value

    def _save_tuner(self, exp_dir: storage.StorageDir) -> None:
        trainable: Any = self._trainable
        try:
            pickled_trainable = pickling.dumps(trainable, "the trainable")
        except Exception:
            pickled_trainable = None  # restore(path, trainable=...) passes it again
        data = {
            "param_space": self._param_space,
            "tune_config": self._tune_config,
            "run_config": dataclasses.replace(self._run_config, callbacks=()),
            "trainable": pickled_trainable,
        }
        try:
            blob = pickling.dumps(data, "the Tuner's arguments")
        except Exception:
            data["param_space"] = None
            blob = pickling.dumps(data, "the Tuner's arguments")
        exp_dir.write_atomic(TUNER_FILE, blob)

    @classmethod
    def restore(
        cls,
        path: str | os.PathLike[str],
        trainable: Any = None,
        resume_unfinished: bool = True,
        resume_errored: bool = False,
        restart_errored: bool = False,
        param_space: Mapping[str, Any] | None = None,
        **_: Any,
    ) -> Tuner:
        """A Tuner that continues the experiment in ``path``: its unfinished trials run
        again (from their latest checkpoints); finished ones are not run again.

        Args:
            path: The experiment directory, ``storage_path/name``.
            trainable: The trainable again (needed when it could not be saved).
            resume_unfinished: Run trials that had not finished.
            resume_errored: Run failed trials again, from their latest checkpoints.
            restart_errored: Run failed trials again, from the start.
            param_space: The param space again (needed when it could not be saved).
        """
        import cloudpickle

        exp_dir = storage.StorageDir.from_uri(path)
        if not cls.can_restore(path):
            raise ValueError(
                f"{exp_dir.uri!r} holds no Tune experiment to restore. HINT: pass "
                "storage_path/name of an experiment started with Tuner.fit()"
            )
        saved = cloudpickle.loads(exp_dir.read_bytes(TUNER_FILE))
        if trainable is None:
            if saved["trainable"] is None:
                raise ValueError(
                    "the trainable of this experiment was not saved. HINT: "
                    "Tuner.restore(path, trainable=...)"
                )
            trainable = cloudpickle.loads(saved["trainable"])
        state = read_state(exp_dir)
        ended = replay_journal(state, exp_dir)
        _reset_trials(state["trials"], resume_unfinished, resume_errored, restart_errored)
        tell_ended(state["searcher"], ended)
        parent, _sep, exp_name = exp_dir.uri.rstrip("/").rpartition("/")
        run_config = dataclasses.replace(saved["run_config"], name=exp_name, storage_path=parent)
        return cls(
            trainable,
            param_space=param_space if param_space is not None else saved["param_space"],
            tune_config=saved["tune_config"],
            run_config=run_config,
            _restored=state,
        )

    @classmethod
    def can_restore(cls, path: str | os.PathLike[str]) -> bool:
        """Whether ``path`` holds an experiment that :meth:`restore` can continue."""
        exp_dir = storage.StorageDir.from_uri(path)
        return exp_dir.exists(TUNER_FILE) and has_state(exp_dir)


def _reload(trials: list[TuneTrial]) -> None:
    for trial in trials:
        trial.reload_from_disk()
        if trial.status == ERROR and trial.error is None:
            trial.error = TrialError(trial.error_text or "the trial failed")


def _reset_trials(
    trials: list[TuneTrial], unfinished: bool, errored: bool, restart_errored: bool
) -> None:
    _reload(trials)
    for trial in trials:
        if trial.status in (RUNNING, PENDING, PAUSED) and unfinished:
            trial.status = PENDING
        elif trial.status in (RUNNING, PENDING, PAUSED):
            trial.status = "TERMINATED"
        elif trial.status == ERROR and restart_errored:
            trial.run_dir.remove("")
            trial.results, trial.last_result, trial.checkpoint = [], {}, None
            trial.status, trial.num_failures = PENDING, 0
        elif trial.status == ERROR and errored:
            trial.status, trial.num_failures = PENDING, 0


class TrialError(RuntimeError):
    """A trial's failure read back from the experiment directory (its traceback)."""


def _as_trainable(trainable: Any) -> Any:
    if isinstance(trainable, DataParallelTrainer):
        return TrainerTrainable(trainable)
    if isinstance(trainable, TrainerTrainable) or callable(trainable):
        return trainable
    raise ValueError(
        f"Tuner takes a function fn(config) or a lockstep trainer, got {trainable!r}. "
        "HINT: def objective(config): ... tune.report({...})"
    )


def _named(run_config: RunConfig, trainable: str) -> RunConfig:
    """Ray's default name: the trainable's, and the time."""
    name = run_config.name or f"{trainable}_{datetime.datetime.now():%Y-%m-%d_%H-%M-%S}"
    raw = run_config.storage_path or flags.DEFAULT_STORAGE_PATH.get()
    fs, path = storage.resolve(raw)
    return dataclasses.replace(run_config, name=name, storage_path=storage.display_uri(fs, path))
