"""The configs a user builds a run from. All are frozen and validated at construction."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from lockstep._core.callback import Callback, UserCallback

PLACEMENT_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
EXECUTORS = ("process", "ray")


def _check_int(name: str, value: object, *, minimum: int, hint: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(
            f"{name} must be an integer, got {value!r} ({type(value).__name__}). HINT: {hint}"
        )
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}. HINT: {hint}")


@dataclass(frozen=True, kw_only=True)
class ScalingConfig:
    """How many workers to run and what each one gets.

    Args:
        num_workers: Number of workers. 0 runs the training function in this process.
            A ``(min_workers, max_workers)`` tuple makes the run elastic (as in Ray V2):
            it starts with as many workers as the machine or the Ray cluster holds, at
            least ``min_workers`` and at most ``max_workers``, and restarts from the
            latest checkpoint at a new size when that changes.
        use_gpu: Give each worker a GPU.
        resources_per_worker: Resources per worker, e.g. ``{"CPU": 2, "GPU": 0.5}``.
        placement_strategy: How a Ray cluster places workers: PACK, SPREAD, STRICT_PACK
            or STRICT_SPREAD. Ignored (with a warning) on local processes.
        accelerator_type: Ray accelerator type each worker needs, e.g. ``"A100"``.
        executor: ``"process"`` (local processes) or ``"ray"`` (a Ray cluster). When None,
            ``"ray"`` is chosen if Ray is initialised or ``RAY_ADDRESS`` is set.
        trainer_resources: Resources of the trainer itself, as Ray reserves them (none by
            default); they count in :attr:`total_resources`. Here the trainer is the driver
            process, which reserves nothing.
        elastic_resize_monitor_interval_s: With ``num_workers=(min, max)``: while the
            workers are healthy, check this often (seconds) whether the run could grow.

    Example:
        >>> ScalingConfig(num_workers=4, use_gpu=False).num_workers
        4
        >>> elastic = ScalingConfig(num_workers=(1, 8))
        >>> elastic.elasticity_enabled, elastic.min_workers, elastic.max_workers
        (True, 1, 8)
    """

    num_workers: int | tuple[int, int] = 1
    use_gpu: bool = False
    resources_per_worker: Mapping[str, float] | None = None
    placement_strategy: str = "PACK"
    accelerator_type: str | None = None
    executor: Literal["process", "ray"] | None = None
    trainer_resources: Mapping[str, float] | None = None
    elastic_resize_monitor_interval_s: float = 60.0

    def __post_init__(self) -> None:
        if isinstance(self.num_workers, tuple | list):
            self._check_elastic()
        else:
            _check_int(
                "ScalingConfig.num_workers",
                self.num_workers,
                minimum=0,
                hint="use a whole number such as num_workers=2, 0 to run in this process, "
                "or (min, max) for an elastic run",
            )
        interval = self.elastic_resize_monitor_interval_s
        if isinstance(interval, bool) or not isinstance(interval, int | float) or interval < 0:
            raise ValueError(
                "ScalingConfig(elastic_resize_monitor_interval_s) must be a non-negative "
                f"number of seconds, got {interval!r}. HINT: the default is 60.0"
            )
        if not isinstance(self.use_gpu, bool):
            raise ValueError(f"use_gpu must be True or False, got {self.use_gpu!r}")
        self._check_resources()
        if self.placement_strategy not in PLACEMENT_STRATEGIES:
            raise ValueError(
                f"unknown placement_strategy {self.placement_strategy!r}. "
                f"HINT: use one of {', '.join(PLACEMENT_STRATEGIES)}"
            )
        if self.executor is not None and self.executor not in EXECUTORS:
            raise ValueError(
                f"unknown executor {self.executor!r}. "
                "HINT: use executor='process', executor='ray', or leave it unset"
            )

    def _check_elastic(self) -> None:
        """``num_workers=(min, max)``: two whole numbers, 1 <= min <= max."""
        value = self.num_workers
        hint = "give num_workers=(min_workers, max_workers), e.g. num_workers=(1, 8)"
        if not isinstance(value, tuple) or len(value) != 2:
            raise ValueError(
                f"ScalingConfig(num_workers={value!r}) must be an int or a tuple of two ints. "
                f"HINT: {hint}"
            )
        low, high = value
        _check_int("ScalingConfig.num_workers[0] (min_workers)", low, minimum=1, hint=hint)
        _check_int("ScalingConfig.num_workers[1] (max_workers)", high, minimum=1, hint=hint)
        if low > high:
            raise ValueError(
                f"ScalingConfig(num_workers={value!r}): min_workers={low} must be <= "
                f"max_workers={high}. HINT: num_workers=({high}, {low})"
            )

    @property
    def elasticity_enabled(self) -> bool:
        """Whether ``num_workers`` is a ``(min, max)`` range (Ray V2's name)."""
        return isinstance(self.num_workers, tuple)

    @property
    def min_workers(self) -> int:
        """The fewest workers the run starts with: ``num_workers``, or its minimum."""
        return self.num_workers[0] if isinstance(self.num_workers, tuple) else self.num_workers

    @property
    def max_workers(self) -> int:
        """The most workers the run uses: ``num_workers``, or its maximum."""
        return self.num_workers[1] if isinstance(self.num_workers, tuple) else self.num_workers

    def _check_resources(self) -> None:
        resources = self.resources_per_worker
        if resources is None:
            return
        if not isinstance(resources, Mapping):
            raise ValueError(
                f"resources_per_worker must be a dict, got {type(resources).__name__}. "
                'HINT: resources_per_worker={"CPU": 2}'
            )
        for key, amount in resources.items():
            if isinstance(amount, bool) or not isinstance(amount, int | float) or amount < 0:
                raise ValueError(
                    f"resources_per_worker[{key!r}] must be a non-negative number, got {amount!r}"
                )
        gpus = resources.get("GPU", 0)
        if gpus > 0 and not self.use_gpu:
            raise ValueError(
                f'resources_per_worker has "GPU": {gpus} but use_gpu=False. '
                "HINT: set use_gpu=True, or drop GPU from resources_per_worker"
            )
        if self.use_gpu and "GPU" in resources and gpus == 0:
            raise ValueError(
                'use_gpu=True but resources_per_worker has "GPU": 0. '
                'HINT: drop "GPU" from resources_per_worker or give a positive amount'
            )

    @property
    def total_resources(self) -> dict[str, float]:
        """The trainer's resources plus every worker's, as Ray V2 sums them (with
        ``max_workers`` workers for an elastic run: an upper bound).

        Example:
            >>> ScalingConfig(num_workers=2, resources_per_worker={"CPU": 2}).total_resources
            {'CPU': 4.0}
            >>> ScalingConfig(num_workers=2, use_gpu=True).total_resources
            {'GPU': 2.0}
        """
        total = {k: float(v) for k, v in (self.trainer_resources or {}).items() if v}
        per_worker = dict(self.resources_per_worker or {})
        if not per_worker:
            per_worker = {"GPU": 1} if self.use_gpu else {"CPU": 1}
        elif self.use_gpu:
            per_worker.setdefault("GPU", 1)
        if self.accelerator_type is not None:
            per_worker[f"accelerator_type:{self.accelerator_type}"] = 0.001
        for key, amount in per_worker.items():
            if amount:
                total[key] = total.get(key, 0.0) + float(amount) * self.max_workers
        return total

    @property
    def num_cpus_per_worker(self) -> float:
        """CPUs each worker asks for (1 unless ``resources_per_worker`` says otherwise)."""
        return float((self.resources_per_worker or {}).get("CPU", 1))

    @property
    def num_gpus_per_worker(self) -> float:
        """GPUs each worker asks for (1 with ``use_gpu`` unless set in resources)."""
        default = 1 if self.use_gpu else 0
        return float((self.resources_per_worker or {}).get("GPU", default))

    @classmethod
    def coerce(cls, value: ScalingConfig | Mapping[str, Any] | None) -> ScalingConfig:
        """Accept a ScalingConfig, a dict of its fields (the older form) or None.

        The dict may also use the keys of the older GBDT trainers' actor form:
        ``num_actors`` (``num_workers``), ``cpus_per_actor`` and ``gpus_per_actor``
        (``resources_per_worker`` CPU and GPU; GPUs also set ``use_gpu``) and
        ``resources_per_actor`` (``resources_per_worker``).

        Example:
            >>> config = ScalingConfig.coerce({"num_actors": 2, "cpus_per_actor": 2})
            >>> config.num_workers, config.num_cpus_per_worker
            (2, 2.0)
        """
        if value is None:
            return cls()
        if isinstance(value, ScalingConfig):
            return value
        if isinstance(value, Mapping):
            value = _from_actor_keys(value)
            known = {f.name for f in fields(cls)}
            unknown = sorted(set(value) - known)
            if unknown:
                raise ValueError(
                    f"scaling_config has unknown keys {unknown}. "
                    f"HINT: use ScalingConfig fields: {', '.join(sorted(known))}"
                )
            return cls(**value)
        raise ValueError(
            f"scaling_config must be a ScalingConfig or a dict, got {type(value).__name__}. "
            "HINT: ScalingConfig(num_workers=2)"
        )


_ACTOR_KEYS = ("num_actors", "cpus_per_actor", "gpus_per_actor", "resources_per_actor")


def _from_actor_keys(value: Mapping[str, Any]) -> dict[str, Any]:
    """``value`` with the older actor keys (``num_actors``, ...) turned into fields."""
    config = {k: v for k, v in value.items() if k not in _ACTOR_KEYS}
    if not any(k in value for k in _ACTOR_KEYS):
        return config
    clashes = [
        (old, new)
        for old, new in (
            ("num_actors", "num_workers"),
            ("resources_per_actor", "resources_per_worker"),
        )
        if old in value and new in value
    ]
    if clashes:
        old, new = clashes[0]
        raise ValueError(
            f"scaling_config has both {old!r} and {new!r}, which mean the same. "
            f"HINT: keep only {new!r}"
        )
    if "num_actors" in value:
        config["num_workers"] = value["num_actors"]
    resources = dict(value.get("resources_per_actor") or config.get("resources_per_worker") or {})
    if value.get("cpus_per_actor") is not None:
        resources["CPU"] = value["cpus_per_actor"]
    gpus = value.get("gpus_per_actor")
    if gpus:
        resources["GPU"] = gpus
        config["use_gpu"] = True
    if resources:
        config["resources_per_worker"] = resources
    return config


@dataclass(frozen=True, kw_only=True)
class CheckpointConfig:
    """Which checkpoints a run keeps.

    Args:
        num_to_keep: Keep this many checkpoints, the best by score (or the newest without a
            score attribute). The latest checkpoint is also kept until a newer one is
            committed, because a restart resumes from it. None keeps all.
        checkpoint_score_attribute: The reported metric that ranks checkpoints.
        checkpoint_score_order: ``"max"`` (higher is better) or ``"min"``.
        checkpoint_frequency: Checkpoint every this many boosting rounds; 0 (the default)
            only at the end. Honoured by the trainers that own their training loop (the
            XGBoost and LightGBM trainers without a training function); a training function
            of your own decides itself when to checkpoint.
        checkpoint_at_end: Checkpoint after the last round. None (the default) lets the
            trainer choose: the GBDT trainers do. Honoured by the same trainers.

    Example:
        >>> CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="loss",
        ...                  checkpoint_score_order="min").num_to_keep
        2
    """

    num_to_keep: int | None = None
    checkpoint_score_attribute: str | None = None
    checkpoint_score_order: Literal["max", "min"] = "max"
    checkpoint_frequency: int = 0
    checkpoint_at_end: bool | None = None

    def __post_init__(self) -> None:
        _check_int(
            "CheckpointConfig.checkpoint_frequency",
            self.checkpoint_frequency,
            minimum=0,
            hint="checkpoint every n boosting rounds, or 0 for only at the end",
        )
        if self.checkpoint_at_end is not None and not isinstance(self.checkpoint_at_end, bool):
            raise ValueError(
                f"checkpoint_at_end must be True, False or None, got {self.checkpoint_at_end!r}. "
                "HINT: None lets the trainer choose (the GBDT trainers checkpoint at the end)"
            )
        if self.num_to_keep is not None:
            _check_int(
                "CheckpointConfig.num_to_keep",
                self.num_to_keep,
                minimum=1,
                hint="keep at least 1, or pass None to keep every checkpoint",
            )
        if self.checkpoint_score_order not in ("max", "min"):
            raise ValueError(
                f"unknown checkpoint_score_order {self.checkpoint_score_order!r}. "
                'HINT: use "max" (higher is better) or "min" (lower is better)'
            )
        attribute = self.checkpoint_score_attribute
        if attribute is not None and (not isinstance(attribute, str) or not attribute):
            raise ValueError(f"checkpoint_score_attribute must be a metric name, got {attribute!r}")


@dataclass(frozen=True, kw_only=True)
class FailureConfig:
    """How a run recovers from failed workers.

    Args:
        max_failures: Restart all workers from the latest committed checkpoint up to this
            many times; -1 restarts without limit, 0 raises on the first failure.
        fail_fast: Ray's switch to stop at the first failure (True or ``"raise"``); a
            single run then behaves as with ``max_failures=0``, which it requires.
        max_preemption_failures: Restarts after a preemption (a Ray node hosting workers
            drained), counted apart from ``max_failures``; -1 (Ray's default) without
            limit, 0 raises on the first one.
        preemption_deadline_s: Seconds the workers have, once told of a preemption
            (SIGTERM or Ctrl-C to the driver, a draining node without its own
            deadline), to report one more checkpoint before they are stopped.
        hang_timeout_s: Seconds without progress (a ``report()`` or a
            ``train.heartbeat()`` from any rank) after which the run counts as hung: every
            rank's Python stack is written to ``{run}/errors/attempt_N.txt``, the error
            names the rank that is stuck and where, and the workers are restarted (or the
            run raises) as for any worker failure. None (the default) turns it off; a few
            times the slowest step (300-600 s for real jobs) is a sensible value.
        assumed_mtbf_s: The mean time between failures the checkpoint interval advice
            (the end summary, ``lockstep runs show``) assumes for a run that saw no
            failure; from the first failure on, the failure rate the run saw is used.
            A day by default: set it to what your cluster sees.

    Example:
        >>> FailureConfig(max_failures=2).max_failures
        2
        >>> FailureConfig(hang_timeout_s=600).hang_timeout_s
        600
    """

    max_failures: int = 0
    fail_fast: bool | str = False
    max_preemption_failures: int = -1
    preemption_deadline_s: float = 30.0
    hang_timeout_s: float | None = None
    assumed_mtbf_s: float = 24 * 3600.0

    def __post_init__(self) -> None:
        self._check_preemption()
        _check_hang_timeout(self.hang_timeout_s)
        if (
            isinstance(self.assumed_mtbf_s, bool)
            or not isinstance(self.assumed_mtbf_s, int | float)
            or not 0 < self.assumed_mtbf_s < float("inf")
        ):
            raise ValueError(
                f"FailureConfig.assumed_mtbf_s must be a positive number of seconds, got "
                f"{self.assumed_mtbf_s!r}. HINT: assumed_mtbf_s=7 * 24 * 3600 for a failure "
                "a week"
            )
        _check_int(
            "FailureConfig.max_failures",
            self.max_failures,
            minimum=-1,
            hint="use 0 to fail at once, n to allow n restarts, or -1 for no limit",
        )
        if isinstance(self.fail_fast, str) and self.fail_fast.upper() != "RAISE":
            raise ValueError(
                f"fail_fast must be True, False or 'raise', got {self.fail_fast!r}. "
                "HINT: fail_fast=True"
            )
        if self.fail_fast and self.max_failures != 0:
            raise ValueError(
                "max_failures must be 0 if fail_fast is set (Ray's rule). HINT: drop "
                "max_failures, or fail_fast"
            )

    def _check_preemption(self) -> None:
        _check_int(
            "FailureConfig.max_preemption_failures",
            self.max_preemption_failures,
            minimum=-1,
            hint="use -1 to restart after every preemption, or n to allow n of them",
        )
        deadline = self.preemption_deadline_s
        if isinstance(deadline, bool) or not isinstance(deadline, int | float) or deadline <= 0:
            raise ValueError(
                f"FailureConfig.preemption_deadline_s must be a number of seconds > 0, got "
                f"{deadline!r}. HINT: preemption_deadline_s=30"
            )


def _check_hang_timeout(value: object) -> None:
    hint = "give seconds, a few times your slowest step (say 600), or None to turn it off"
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(
            f"FailureConfig.hang_timeout_s must be a number of seconds or None, got {value!r} "
            f"({type(value).__name__}). HINT: {hint}"
        )
    if not value > 0 or value == float("inf"):
        raise ValueError(
            f"FailureConfig.hang_timeout_s must be a positive number of seconds, got {value}. "
            f"HINT: {hint}"
        )


@dataclass(frozen=True, kw_only=True)
class SyncConfig:
    """Ray's settings for copying results from the nodes to storage, accepted for old code.

    lockstep's workers write checkpoints and results straight to the run's storage, so
    there is nothing to sync: the fields are checked and kept, and change nothing.

    Args:
        sync_period: Seconds between syncs in Ray.
        sync_timeout: Seconds a sync may take in Ray.
        sync_artifacts: Whether Ray syncs files the trials wrote beside their results.
        sync_artifacts_on_checkpoint: Whether Ray syncs artifacts at each checkpoint.

    Example:
        >>> SyncConfig(sync_period=60).sync_period
        60
    """

    sync_period: int = 300
    sync_timeout: int = 1800
    sync_artifacts: bool = False
    sync_artifacts_on_checkpoint: bool = True

    def __post_init__(self) -> None:
        for name in ("sync_period", "sync_timeout"):
            _check_int(f"SyncConfig.{name}", getattr(self, name), minimum=0, hint="seconds")


_NAME = re.compile(r"^[A-Za-z0-9_.=+@,-][A-Za-z0-9_.=+@, -]*$")


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """Where a run's results go and how it behaves.

    Args:
        name: The run directory's name. Running again with the same name and storage path
            continues that run from its latest committed checkpoint. Default: a new,
            timestamped name for each trainer.
        storage_path: A local directory or a URL (``s3://bucket/runs``, with pyarrow's
            query options if needed: ``s3://bucket/runs?region=eu-west-1``).
            Default: ``~/lockstep_results``.
        storage_filesystem: A ``pyarrow.fs.FileSystem`` (or an fsspec one) to write to;
            ``storage_path`` is then a path on it, without a URI prefix (as in Ray).
        checkpoint_config: Which checkpoints to keep.
        failure_config: How to recover from failures.
        callbacks: :class:`Callback` (Ray Tune's hooks, e.g. the logger callbacks of
            ``lockstep.train.callbacks``) or :class:`UserCallback` instances, called in the
            driver.
        verbose: Ray's levels: 0 silent; 1 a live status line and a summary at the end
            (the default); 2 also one line per report with the metrics shown; 3 one line per
            report with every metric.
        progress_metrics: The metrics the status line shows. Default: the checkpoint
            score attribute and the losses, at most three.
        progress_total: How many reports the run will make (the number of epochs, say),
            so that progress shows ``iter k/total`` and an estimated time left. Ray has no
            such option and lockstep guesses nothing: without it, no ETA is shown.
        sync_config: Ray's :class:`SyncConfig`; accepted, with nothing to sync here.

    Example:
        >>> RunConfig(name="exp", storage_path="/tmp/runs").name
        'exp'
        >>> RunConfig(progress_metrics=["val_loss"], progress_total=10).progress_total
        10
    """

    name: str | None = None
    storage_path: str | os.PathLike[str] | None = None
    storage_filesystem: Any = None
    checkpoint_config: CheckpointConfig = field(default_factory=CheckpointConfig)
    failure_config: FailureConfig = field(default_factory=FailureConfig)
    callbacks: Sequence[UserCallback | Callback] = ()
    verbose: int = 1
    progress_metrics: Sequence[str] | None = None
    progress_total: int | None = None
    sync_config: SyncConfig | None = None

    def __post_init__(self) -> None:
        if self.name is not None and (
            not isinstance(self.name, str) or not _NAME.match(self.name) or self.name in {".", ".."}
        ):
            raise ValueError(
                f"RunConfig.name {self.name!r} cannot name a directory. "
                "HINT: use letters, digits and '-_.' only, e.g. name='mnist-baseline'"
            )
        if self.storage_path is not None and not isinstance(self.storage_path, str | os.PathLike):
            raise ValueError(
                f"storage_path must be a path or URL string, got {type(self.storage_path).__name__}"
            )
        self._check_storage_filesystem()
        self._check_type("checkpoint_config", CheckpointConfig)
        self._check_type("failure_config", FailureConfig)
        object.__setattr__(self, "callbacks", tuple(self.callbacks))
        for callback in self.callbacks:
            if not isinstance(callback, UserCallback | Callback):
                raise ValueError(
                    "RunConfig(callbacks=...) takes Callback or UserCallback instances, got "
                    f"{callback!r}. HINT: use a logger of lockstep.train.callbacks, or subclass "
                    "lockstep.train.callbacks.Callback (or lockstep.train.UserCallback)"
                )
        if isinstance(self.verbose, bool) or self.verbose not in (0, 1, 2, 3):
            raise ValueError(
                f"verbose must be 0, 1, 2 or 3, got {self.verbose!r}. "
                "HINT: 0 silences progress, 1 shows it, 2 and 3 also print every report"
            )
        self._check_progress()

    def _check_progress(self) -> None:
        metrics = self.progress_metrics
        if metrics is not None:
            if isinstance(metrics, str) or not all(isinstance(m, str) for m in metrics):
                raise ValueError(
                    f"progress_metrics must be a list of metric names, got {metrics!r}. "
                    'HINT: progress_metrics=["val_loss", "accuracy"]'
                )
            object.__setattr__(self, "progress_metrics", tuple(metrics))
        if self.progress_total is not None:
            _check_int(
                "RunConfig.progress_total",
                self.progress_total,
                minimum=1,
                hint="give the number of reports the run makes, e.g. the epochs, or None",
            )

    def _check_storage_filesystem(self) -> None:
        if self.storage_filesystem is None:
            return
        from lockstep._core.pyarrow_fs import to_fsspec

        to_fsspec(self.storage_filesystem)  # raises for anything but a filesystem
        if self.storage_path is not None and "://" in os.fspath(self.storage_path):
            raise ValueError(
                f"storage_filesystem is set, so storage_path must be a path on it without a "
                f"URI prefix, got {self.storage_path!r}. HINT: "
                "RunConfig(storage_path='bucket/runs', storage_filesystem=fs)"
            )

    @classmethod
    def coerce(cls, value: RunConfig | Mapping[str, Any] | None) -> RunConfig | None:
        """Accept a RunConfig, None, or a dict: its fields, or the older keys
        ``max_actor_restarts`` / ``max_failures`` (``FailureConfig(max_failures=...)``).

        Example:
            >>> RunConfig.coerce({"max_actor_restarts": 1}).failure_config.max_failures
            1
        """
        if value is None or isinstance(value, RunConfig):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(
                f"run_config must be a RunConfig, got {type(value).__name__}. "
                "HINT: run_config=RunConfig(...)"
            )
        fields_ = dict(value)
        restarts = [fields_.pop(k) for k in ("max_actor_restarts", "max_failures") if k in fields_]
        if restarts:
            fields_["failure_config"] = FailureConfig(max_failures=int(restarts[0]))
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(fields_) - known)
        if unknown:
            raise ValueError(
                f"run_config has unknown keys {unknown}. HINT: use RunConfig fields: "
                f"{', '.join(sorted(known))}"
            )
        return cls(**fields_)

    def _check_type(self, name: str, kind: type) -> None:
        value = getattr(self, name)
        if not isinstance(value, kind):
            raise ValueError(
                f"RunConfig.{name} must be a {kind.__name__}, got {type(value).__name__}. "
                f"HINT: {name}={kind.__name__}(...)"
            )


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    """Which of a trainer's datasets are split across workers.

    Args:
        datasets_to_split: ``"all"`` (the default, as in Ray Train) or a list of dataset
            names. A dataset left out goes whole to every worker.

    Example:
        >>> DataConfig(datasets_to_split=["train"]).should_split("valid")
        False
    """

    datasets_to_split: Literal["all"] | Sequence[str] = "all"

    def __post_init__(self) -> None:
        value = self.datasets_to_split
        if value == "all":
            return
        if isinstance(value, str) or not all(isinstance(n, str) for n in value):
            raise ValueError(
                f'datasets_to_split must be "all" or a list of dataset names, got {value!r}. '
                'HINT: DataConfig(datasets_to_split=["train"])'
            )
        object.__setattr__(self, "datasets_to_split", tuple(value))

    def should_split(self, name: str) -> bool:
        """Whether the dataset called ``name`` is split across workers."""
        return self.datasets_to_split == "all" or name in self.datasets_to_split

    def configure(self, datasets: Mapping[str, Any], world_size: int) -> list[dict[str, Any]]:
        """Each worker's datasets: split ones in equal parts, the others whole."""
        shards: list[dict[str, Any]] = [{} for _ in range(world_size)]
        for name, dataset in datasets.items():
            if not self.should_split(name):
                parts = [dataset] * world_size
            elif is_ray_dataset(dataset):
                # Ray Data streams each worker its part through a coordinator, as Ray Train does.
                parts = dataset.streaming_split(world_size, equal=True)
            else:
                parts = dataset.split(world_size, equal=True)
            for rank, part in enumerate(parts):
                shards[rank][name] = part
        return shards

    def check_datasets(self, datasets: Mapping[str, Any]) -> None:
        """Raise if a dataset to split cannot be, or a name to split was not given."""
        self.check_names(list(datasets))
        for name, dataset in datasets.items():
            if not isinstance(name, str):
                raise ValueError(f"dataset names must be strings, got {name!r}")
            if self.should_split(name) and not hasattr(dataset, "split"):
                raise ValueError(
                    f"datasets[{name!r}] is a {type(dataset).__name__}, which cannot be split "
                    "across workers. HINT: make it a lockstep.data Dataset (e.g. "
                    "lockstep.data.from_items(...)), or leave it out of "
                    "DataConfig(datasets_to_split=...) to give every worker all of it"
                )

    def check_names(self, names: Sequence[str]) -> None:
        """Raise if ``datasets_to_split`` names a dataset that was not given."""
        if self.datasets_to_split == "all":
            return
        missing = sorted(set(self.datasets_to_split) - set(names))
        if missing:
            raise ValueError(
                f"DataConfig(datasets_to_split=...) names {missing}, which are not among the "
                f"datasets given: {sorted(names)}"
            )


def is_ray_dataset(dataset: object) -> bool:
    """Whether ``dataset`` is a ``ray.data.Dataset`` (told without importing Ray)."""
    return any(
        cls.__module__.startswith("ray.data") and cls.__name__ == "Dataset"
        for cls in type(dataset).__mro__
    )
