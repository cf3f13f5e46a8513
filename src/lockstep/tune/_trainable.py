"""What a trial runs: a function ``fn(config)`` or a lockstep trainer, one per config.

Each trial runs in a thread of the driver, as a lockstep run: a trainer's ``fit()`` with its
own controller and workers, or a function called in the trial's thread with a session that
records its reports. The Tuner's link listens to the run, and the scheduler's decisions
reach it as directives (the answer to a function's report).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from lockstep._core.trial import TrialOutcome, TrialRun
from lockstep.train import (
    DataParallelTrainer,
    RunConfig,
    ScalingConfig,
    UserCallback,
)

RESOURCES_ATTR = "_lockstep_resources"


def with_parameters(trainable: Callable[..., Any], **kwargs: Any) -> Callable[..., Any]:
    """``trainable`` with large objects (datasets, models) passed once, not in the config.

    Example:
        >>> def objective(config, data=None):
        ...     return {"n": len(data)}
        >>> with_parameters(objective, data=[1, 2, 3])({})
        {'n': 3}
    """
    if isinstance(trainable, DataParallelTrainer):
        raise ValueError(
            "with_parameters takes a function; a trainer already holds its data. HINT: pass "
            "the trainer to Tuner directly"
        )

    @functools.wraps(trainable)
    def inner(config: dict[str, Any]) -> Any:
        return trainable(config, **kwargs)

    resources = getattr(trainable, RESOURCES_ATTR, None)
    if resources is not None:
        setattr(inner, RESOURCES_ATTR, resources)
    return inner


def with_resources(
    trainable: Any, resources: Mapping[str, float] | Callable[[dict[str, Any]], Any] | Any
) -> Any:
    """``trainable`` with the CPUs and GPUs each of its trials needs (default: 1 CPU).

    ``resources`` is a dict (``{"cpu": 2, "gpu": 1}``), a ``ScalingConfig`` or a function of
    the config returning either.

    Example:
        >>> def objective(config):
        ...     return {"x": 1}
        >>> wrapped = with_resources(objective, {"cpu": 2})
        >>> wrapped.__name__
        'objective'
    """
    if isinstance(trainable, DataParallelTrainer):
        raise ValueError(
            "a trainer's trials take the resources of its scaling_config. HINT: set "
            "ScalingConfig(num_workers=..., resources_per_worker=...) on the trainer, or "
            "search it: param_space={'scaling_config': ...}"
        )

    @functools.wraps(trainable)
    def inner(config: dict[str, Any]) -> Any:
        return trainable(config)

    setattr(inner, RESOURCES_ATTR, resources)
    return inner


def trial_resources(trainable: Any, config: dict[str, Any]) -> dict[str, float]:
    """What one trial of ``trainable`` with ``config`` takes from the machine."""
    if isinstance(trainable, TrainerTrainable):
        return trainable.resources(config)
    spec = getattr(trainable, RESOURCES_ATTR, None)
    if callable(spec) and not isinstance(spec, ScalingConfig):
        spec = spec(config)
    if spec is None:
        return {"CPU": 1.0, "GPU": 0.0}
    if isinstance(spec, ScalingConfig | Mapping) and _is_scaling(spec):
        return _scaling_resources(ScalingConfig.coerce(spec))
    if not isinstance(spec, Mapping):
        raise ValueError(
            f"with_resources takes a dict such as {{'cpu': 2, 'gpu': 0}}, got {spec!r}"
        )
    lowered = {str(k).upper(): float(v) for k, v in spec.items()}
    return {"CPU": lowered.get("CPU", 1.0), "GPU": lowered.get("GPU", 0.0)}


def _is_scaling(spec: Any) -> bool:
    return isinstance(spec, ScalingConfig) or "num_workers" in spec


def _scaling_resources(scaling: ScalingConfig) -> dict[str, float]:
    workers = max(1, scaling.min_workers)  # an elastic trial is admitted at its minimum
    return {
        "CPU": workers * scaling.num_cpus_per_worker,
        "GPU": workers * scaling.num_gpus_per_worker,
    }


def trainable_name(trainable: Any) -> str:
    if isinstance(trainable, TrainerTrainable):
        return trainable.name
    return str(getattr(trainable, "__name__", type(trainable).__name__))


# -- running a trial ------------------------------------------------------------------------


# A function trainable's wrapper and its runs' execution plan (see function_parts).
FunctionParts = tuple[Any, Any]


def run_trial(
    trainable: Any,
    config: dict[str, Any],
    *,
    run_config: RunConfig,
    trial: TrialRun,
    shared: FunctionParts | None = None,
) -> TrialOutcome:
    """One run of a trial of ``trainable`` with ``config``, to its end (a function's with
    the ``shared`` parts of its trials, see :func:`function_parts`)."""
    if isinstance(trainable, TrainerTrainable):
        return trainable.run(config, run_config=run_config, trial=trial)
    parts = shared if shared is not None else DataParallelTrainer._function_trial_parts(trainable)
    return DataParallelTrainer._run_function_trial(parts, config, run_config, trial)


def function_parts(trainable: Any) -> FunctionParts | None:
    """What every trial of a function trainable shares (made once per experiment, not
    per trial): the function wrapped and its run's execution plan; None for a trainer."""
    if isinstance(trainable, TrainerTrainable):
        return None
    return DataParallelTrainer._function_trial_parts(trainable)


# -- a trainer as the trainable -------------------------------------------------------------

# Older names of trainer arguments (the dataset "train_dataset" of early Ray AIR).
_DATASET_ALIASES = {"train_dataset": "train"}
_MERGED = ("train_loop_config", "params", "datasets", "metadata")


class TrainerTrainable:
    """A trainer whose arguments a trial's config overrides, key by key."""

    def __init__(self, trainer: DataParallelTrainer) -> None:
        self.trainer_cls = type(trainer)
        self.base_kwargs: dict[str, Any] = trainer._spec.arguments()
        self.base_run_config: RunConfig = trainer.run_config
        # The RunConfig given to the trainer, which a Tuner given none uses (as Ray's)
        self.own_run_config: RunConfig | None = trainer._spec.run_config
        self.name = type(trainer).__name__
        self.datasets: dict[str, Any] = {}
        signature = inspect.signature(self.trainer_cls)
        self._known = set(signature.parameters)
        self._takes_extra = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())

    def check_space(self, space: Mapping[str, Any]) -> None:
        unknown = sorted(k for k in space if k not in self._known and k != "run_config")
        if unknown and not self._takes_extra:
            raise ValueError(
                f"param_space keys {unknown} are not arguments of {self.name}. HINT: a "
                f"trainer's param_space overrides its arguments: {sorted(self._known)}; put "
                "your hyperparameters under 'train_loop_config' (or 'params')"
            )

    def kwargs(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The trainer's arguments for one trial."""
        kwargs = dict(self.base_kwargs)
        if self.datasets:
            kwargs["datasets"] = {**(kwargs.get("datasets") or {}), **self.datasets}
        for key, value in config.items():
            if key == "scaling_config":
                kwargs[key] = _merge_scaling(kwargs.get(key), value)
            elif key in _MERGED and isinstance(value, Mapping):
                kwargs[key] = {**(kwargs.get(key) or {}), **value}
            else:
                kwargs[key] = value
        if kwargs.get("preprocessor") is not None:
            # Fitting changes a preprocessor: each trial fits its own copy, as if the
            # config had been sent to it, even when trials share one in the param space.
            kwargs["preprocessor"] = copy.deepcopy(kwargs["preprocessor"])
        if kwargs.get("datasets"):
            kwargs["datasets"] = {
                _DATASET_ALIASES.get(k, k): v for k, v in kwargs["datasets"].items()
            }
        return kwargs

    def resources(self, config: Mapping[str, Any]) -> dict[str, float]:
        scaling = _merge_scaling(
            self.base_kwargs.get("scaling_config"), config.get("scaling_config")
        )
        return _scaling_resources(scaling)

    def run(
        self, config: dict[str, Any], *, run_config: RunConfig, trial: TrialRun
    ) -> TrialOutcome:
        """One run of a trial: the trainer of ``config``'s arguments, fit to its end."""
        kwargs = self.kwargs(config)
        kwargs["run_config"] = run_config
        return self.trainer_cls(**kwargs)._run_trial(trial)


def _merge_scaling(base: Any, override: Any) -> ScalingConfig:
    base_config = ScalingConfig.coerce(base)
    if override is None:
        return base_config
    if isinstance(override, ScalingConfig):
        return override
    if isinstance(override, Mapping):
        fields = {f.name for f in dataclasses.fields(ScalingConfig)}
        if set(override) <= fields:
            return dataclasses.replace(base_config, **dict(override))
        return ScalingConfig.coerce(override)  # the older actor keys
    raise ValueError(
        f"param_space['scaling_config'] must be a ScalingConfig or a dict, got {override!r}"
    )


def trial_run_config(
    experiment: RunConfig, trainable: Any, *, name: str, storage_path: str
) -> RunConfig:
    """The run config of one trial: its directory in the experiment's, silent; the
    Tuner's checkpoint and failure configs, or a trainer's own where the Tuner set none
    (applied once, by the trial's run); the Tuner's Train callbacks (its Tune callbacks
    see each trial from the experiment)."""
    own = trainable.base_run_config if isinstance(trainable, TrainerTrainable) else RunConfig()
    return RunConfig(
        name=name,
        storage_path=storage_path,
        checkpoint_config=_given(experiment.checkpoint_config, own.checkpoint_config),
        failure_config=_given(experiment.failure_config, own.failure_config),
        callbacks=tuple(c for c in experiment.callbacks if isinstance(c, UserCallback)),
        verbose=0,
    )


def _given(tuner_value: Any, trainer_value: Any) -> Any:
    """The Tuner's setting when it was given, else the trainer's own."""
    return tuner_value if tuner_value != type(tuner_value)() else trainer_value
