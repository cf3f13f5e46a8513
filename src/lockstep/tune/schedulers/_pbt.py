"""Population based training: bad trials continue from good trials' checkpoints."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lockstep.tune._search_space import Domain, Function
from lockstep.tune.schedulers._base import Exploit, FIFOScheduler


class PopulationBasedTraining(FIFOScheduler):
    """Every ``perturbation_interval``, a trial in the bottom ``quantile_fraction`` restarts
    from the latest checkpoint of a trial in the top fraction, with that trial's config
    perturbed (exploit, then explore).

    The training function must report checkpoints (``tune.report(..., checkpoint=...)``)
    and resume from ``tune.get_checkpoint()``. The trials are ranked by the score each
    had at its latest perturbation point; a trial that has ended still ranks, and can be
    exploited from its last checkpoint.

    Args:
        time_attr: The result key that counts progress.
        metric: The metric to compare.
        mode: ``"min"`` or ``"max"``.
        perturbation_interval: Exploit every this much ``time_attr``.
        burn_in_period: No exploit before ``time_attr`` reaches this.
        hyperparam_mutations: Per key: a list of values, a Tune domain or a function;
            the values explored. Nested dicts follow nested configs (a trainer's
            ``{"train_loop_config": {"lr": [...]}}``). A key missing from a new trial's
            config is sampled from here.
        quantile_fraction: The fraction of trials that is bottom (and top).
        resample_probability: Chance that a value is resampled rather than perturbed.
        perturbation_factors: A continuous value is multiplied by one of these.
        custom_explore_fn: Applied to the new config last.
        log_config: Accepted for Ray Tune's signature; no policy files are written.
        require_attrs: A result without ``time_attr`` or the metric is an error (else it
            is ignored).
        synch: Only ``False``: the trials are perturbed each on its own.
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
        _check_arguments(
            quantile_fraction, perturbation_interval, hyperparam_mutations, custom_explore_fn
        )
        if synch:
            raise ValueError(
                "PopulationBasedTraining(synch=True) is not supported: trials are perturbed "
                "each at its own perturbation point. HINT: leave synch=False"
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
        self._require_attrs = require_attrs
        self._random = random.Random(seed)
        self._last_perturbed: dict[str, float] = {}
        self._scores: dict[str, float] = {}  # at each trial's latest perturbation point
        self._trials: dict[str, Any] = {}
        self.num_perturbations = 0

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        self._trials[trial.trial_id] = trial
        self._fill(trial.config, self._mutations)

    def _fill(self, config: dict[str, Any], mutations: Mapping[str, Any]) -> None:
        """Sample the keys ``config`` lacks from ``mutations`` (Ray Tune does the same)."""
        for key, space in mutations.items():
            if isinstance(space, Mapping):
                self._fill(config.setdefault(key, {}), space)
            elif key not in config and isinstance(space, list | tuple):
                config[key] = self._random.choice(list(space))
            elif key not in config:
                config[key] = self._sample(space)

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> Any:
        self._require_metric("PopulationBasedTraining")
        self._trials.setdefault(trial.trial_id, trial)
        score = self._score(result)
        if score is None or self._time_attr not in result:
            self._check_attrs(result)
            return self.CONTINUE
        now = float(result[self._time_attr])
        if now < self._burn_in:
            return self.CONTINUE
        if now - self._last_perturbed.get(trial.trial_id, 0.0) < self._interval:
            return self.CONTINUE
        self._scores[trial.trial_id] = score
        self._last_perturbed[trial.trial_id] = now
        lower, upper = self._quantiles()
        if trial.trial_id not in lower:
            return self.CONTINUE
        donors = [self._trials[t] for t in upper if self._trials[t].checkpoint is not None]
        if not donors:
            return self.CONTINUE
        donor = self._random.choice(donors)
        self.num_perturbations += 1
        return Exploit(donor=donor, config=self.explore(donor.config))

    def _check_attrs(self, result: dict[str, Any]) -> None:
        missing = [k for k in (self._time_attr, self._metric) if k not in result]
        if self._require_attrs and missing:
            raise ValueError(
                f"PopulationBasedTraining needs {missing[0]!r} in every result, got the "
                f"keys {sorted(result)}. HINT: report it, or pass require_attrs=False to "
                "ignore such results"
            )

    def _quantiles(self) -> tuple[list[str], list[str]]:
        """The bottom and top ``quantile_fraction`` of the ranked trials (at least one each
        when the fraction is above 0, at most half)."""
        ranked = sorted(self._scores, key=lambda t: self._scores[t])  # worst first
        if len(ranked) <= 1:
            return [], []
        count = min(math.ceil(len(ranked) * self._quantile), len(ranked) // 2)
        return ranked[:count], ranked[len(ranked) - count :]

    def choose_trial_to_run(self, tune_controller: Any, trials: Sequence[Any]) -> Any:
        """The waiting trial that has trained least, so that every trial gets its share."""
        waiting = [t for t in trials if t.status in ("PENDING", "PAUSED")]
        return min(waiting, key=lambda t: self._last_perturbed.get(t.trial_id, 0.0), default=None)

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
            new = self._sample(space)
        else:
            new = value * self._random.choice(self._factors)
        if isinstance(value, bool):
            return bool(new)
        return round(new) if isinstance(value, int) else new

    def _sample(self, space: Any) -> Any:
        if isinstance(space, Domain):
            import numpy as np

            return space.sample(np.random.default_rng(self._random.randrange(2**32)))
        return space()


def _check_arguments(
    quantile_fraction: float,
    perturbation_interval: float,
    mutations: Mapping[str, Any] | None,
    custom_explore_fn: Any,
) -> None:
    if not 0 <= quantile_fraction <= 0.5:
        raise ValueError(
            f"quantile_fraction must be in [0, 0.5], got {quantile_fraction}. "
            "HINT: 0.25 exploits the bottom quarter from the top quarter"
        )
    if perturbation_interval <= 0:
        raise ValueError(f"perturbation_interval must be > 0, got {perturbation_interval}")
    if not mutations and custom_explore_fn is None:
        raise ValueError(
            "PopulationBasedTraining needs hyperparam_mutations or custom_explore_fn. "
            "HINT: hyperparam_mutations={'lr': tune.loguniform(1e-4, 1e-1)}"
        )
    _check_mutations(mutations or {})


def _check_mutations(mutations: Mapping[str, Any], prefix: str = "") -> None:
    for key, space in mutations.items():
        if isinstance(space, Mapping):
            _check_mutations(space, f"{prefix}{key}/")
        elif isinstance(space, Function):
            raise ValueError(
                f"hyperparam_mutations[{prefix}{key!r}]: sample_from cannot be explored. "
                "HINT: use a list, a Tune domain (tune.uniform, tune.choice, ...) or a "
                "function without arguments"
            )
        elif not (isinstance(space, list | tuple | Domain) or callable(space)):
            raise ValueError(
                f"hyperparam_mutations values must be lists, Tune domains or functions, got "
                f"{prefix}{key}={space!r}. HINT: {{'lr': tune.uniform(1e-4, 1e-1)}}"
            )
