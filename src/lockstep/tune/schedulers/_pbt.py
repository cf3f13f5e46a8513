"""Population based training: bad trials continue from good trials' checkpoints."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

from lockstep.tune._search_space import Domain
from lockstep.tune.schedulers._base import Exploit, TrialScheduler


class PopulationBasedTraining(TrialScheduler):
    """Every ``perturbation_interval``, a trial in the bottom ``quantile_fraction`` restarts
    from the latest checkpoint of a trial in the top fraction, with that trial's config
    perturbed (exploit, then explore).

    The training function must report checkpoints (``tune.report(..., checkpoint=...)``)
    and resume from ``tune.get_checkpoint()``.

    Args:
        time_attr: The result key that counts progress.
        metric: The metric to compare.
        mode: ``"min"`` or ``"max"``.
        perturbation_interval: Exploit every this much ``time_attr``.
        burn_in_period: No exploit before ``time_attr`` reaches this.
        hyperparam_mutations: Per key: a list of values, a Tune domain or a function;
            the values explored. Nested dicts follow nested configs (a trainer's
            ``{"train_loop_config": {"lr": [...]}}``).
        quantile_fraction: The fraction of trials that is bottom (and top).
        resample_probability: Chance that a value is resampled rather than perturbed.
        perturbation_factors: A continuous value is multiplied by one of these.
        custom_explore_fn: Applied to the new config last.
        seed: Seed of the random choices.

    Example:
        >>> from lockstep import tune
        >>> pbt = PopulationBasedTraining(time_attr="training_iteration", metric="acc",
        ...     mode="max", perturbation_interval=2,
        ...     hyperparam_mutations={"lr": tune.uniform(0.001, 0.1)})
        >>> pbt.explore({"lr": 0.01})["lr"] > 0
        True
    """

    def __init__(
        self,
        time_attr: str = "time_total_s",
        metric: str | None = None,
        mode: str | None = None,
        perturbation_interval: float = 60.0,
        burn_in_period: float = 0.0,
        hyperparam_mutations: Mapping[str, Any] | None = None,
        quantile_fraction: float = 0.25,
        resample_probability: float = 0.25,
        perturbation_factors: tuple[float, float] = (1.2, 0.8),
        custom_explore_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        log_config: bool = True,
        require_attrs: bool = True,
        synch: bool = False,
        seed: int | None = None,
    ) -> None:
        if not 0 <= quantile_fraction <= 0.5:
            raise ValueError(
                f"quantile_fraction must be in [0, 0.5], got {quantile_fraction}. "
                "HINT: 0.25 exploits the bottom quarter from the top quarter"
            )
        if perturbation_interval <= 0:
            raise ValueError(f"perturbation_interval must be > 0, got {perturbation_interval}")
        if not hyperparam_mutations and custom_explore_fn is None:
            raise ValueError(
                "PopulationBasedTraining needs hyperparam_mutations or custom_explore_fn. "
                "HINT: hyperparam_mutations={'lr': tune.loguniform(1e-4, 1e-1)}"
            )
        self._time_attr = time_attr
        self._metric, self._mode = metric, mode
        self._interval = perturbation_interval
        self._burn_in = burn_in_period
        self._mutations = dict(hyperparam_mutations or {})
        self._quantile = quantile_fraction
        self._resample = resample_probability
        self._factors = perturbation_factors
        self._custom = custom_explore_fn
        self._random = random.Random(seed)
        self._last_perturbed: dict[str, float] = {}
        self._scores: dict[str, float] = {}
        self._trials: dict[str, Any] = {}
        self.num_perturbations = 0

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        self._trials[trial.trial_id] = trial

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> Any:
        self._require_metric("PopulationBasedTraining")
        self._trials.setdefault(trial.trial_id, trial)
        score = self._score(result)
        if score is None or self._time_attr not in result:
            return self.CONTINUE
        self._scores[trial.trial_id] = score
        now = float(result[self._time_attr])
        if now < self._burn_in:
            return self.CONTINUE
        if now - self._last_perturbed.get(trial.trial_id, 0.0) < self._interval:
            return self.CONTINUE
        self._last_perturbed[trial.trial_id] = now
        lower, upper = self._quantiles()
        if trial.trial_id not in lower:
            return self.CONTINUE
        donors = [self._trials[t] for t in upper if self._trials[t].checkpoint is not None]
        if not donors:
            return self.CONTINUE
        donor = self._random.choice(donors)
        self.num_perturbations += 1
        self._last_perturbed[trial.trial_id] = now
        return Exploit(donor=donor, config=self.explore(donor.config))

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> None:
        # A finished trial can still be a donor: its last checkpoint stays.
        pass

    def _quantiles(self) -> tuple[list[str], list[str]]:
        ranked = sorted(self._scores, key=lambda t: self._scores[t])  # worst first
        if len(ranked) <= 1:
            return [], []
        count = max(1, int(len(ranked) * self._quantile)) if self._quantile > 0 else 0
        count = min(count, len(ranked) // 2)
        return ranked[:count], ranked[-count:] if count else []

    def explore(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """A perturbed copy of ``config``."""
        new = self._explore_dict(config, self._mutations)
        if self._custom is not None:
            new = dict(self._custom(new))
        return new

    def _explore_dict(
        self, config: Mapping[str, Any], mutations: Mapping[str, Any]
    ) -> dict[str, Any]:
        # Nested mutations follow nested configs: {"train_loop_config": {"lr": [...]}}.
        new = dict(config)
        for key, space in mutations.items():
            if isinstance(space, Mapping):
                new[key] = self._explore_dict(config.get(key) or {}, space)
            else:
                new[key] = self._explore_value(config.get(key), space)
        return new

    def _explore_value(self, value: Any, space: Any) -> Any:
        resample = self._random.random() < self._resample
        if isinstance(space, list | tuple):
            values = list(space)
            if resample or value not in values:
                return self._random.choice(values)
            index = values.index(value) + self._random.choice([-1, 1])
            return values[min(max(index, 0), len(values) - 1)]
        if resample or value is None:
            return self._sample(space)
        factor = self._random.choice(self._factors)
        return int(value * factor) if isinstance(value, int) else value * factor

    def _sample(self, space: Any) -> Any:
        if isinstance(space, Domain):
            import numpy as np

            return space.sample(np.random.default_rng(self._random.randrange(2**32)))
        if callable(space):
            return space()
        raise ValueError(
            f"hyperparam_mutations values must be lists, Tune domains or functions, got "
            f"{space!r}. HINT: {{'lr': tune.uniform(1e-4, 1e-1)}}"
        )
