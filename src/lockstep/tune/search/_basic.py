"""The default search algorithm: every grid combination, with random samples of the rest."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lockstep.tune._search_space import Domain, Function, is_grid
from lockstep.tune._variants import (
    Path,
    grid_variant,
    num_grid_variants,
    resolve,
    set_path,
    walk,
)
from lockstep.tune.search._searcher import Searcher


class BasicVariantGenerator(Searcher):
    """Expands every ``grid_search`` and samples every other domain at random.

    The random values come from Optuna's ``RandomSampler`` (seeded by ``random_state``)
    through ask/tell; only what Optuna has no distribution for (``randn``, ``sample_from``)
    is drawn here.

    ``num_samples`` times over, each sample gives one trial per grid combination: 3 grid
    values and ``num_samples=2`` make 6 trials. ``points_to_evaluate`` are partial configs
    tried first, each in place of one sample, as in Ray Tune: a point's values replace
    the searched ones, so a point that sets a grid key gives one trial for that key.

    Args:
        points_to_evaluate: Configs (or parts of them) to try first.
        max_concurrent: At most this many trials at once (0: no limit).
        random_state: Seed of the random samples.
        constant_grid_search: Draw the random values once per sample, the same for every
            grid combination (``sample_from`` functions still see each combination).

    Example:
        >>> from lockstep import tune
        >>> gen = BasicVariantGenerator(random_state=0)
        >>> gen.set_search_properties(None, None, {"a": tune.grid_search([1, 2])},
        ...                           num_samples=1)
        True
        >>> gen.suggest("t0"), gen.suggest("t1"), gen.suggest("t2")
        ({'a': 1}, {'a': 2}, 'FINISHED')
    """

    # Counted once (a state saved before they existed reads these defaults).
    _total: int | None = None
    _space_combos: int | None = None

    def __init__(
        self,
        points_to_evaluate: Sequence[Mapping[str, Any]] | None = None,
        max_concurrent: int = 0,
        random_state: int | None = None,
        constant_grid_search: bool = False,
    ) -> None:
        import numpy as np

        super().__init__()
        self._points = [dict(p) for p in points_to_evaluate or []]
        self.max_concurrent = max_concurrent
        self._rng = np.random.default_rng(random_state)
        self._constant = constant_grid_search
        self._space: dict[str, Any] = {}
        self._num_samples = 1
        self._index = 0  # configs given
        self._sample, self._combo = 0, 0  # the next config: sample, grid combination
        self._live: set[str] = set()
        self._sample_cache: tuple[int, dict[Path, Any]] | None = None
        self._seed = random_state
        self._study: Any = None

    def set_search_properties(
        self, metric: str | None, mode: str | None, config: dict[str, Any], **spec: Any
    ) -> bool:
        super().set_search_properties(metric, mode, config)
        self._space = dict(config)
        self._num_samples = int(spec.get("num_samples", 1))
        self._total = self._space_combos = None
        return True

    @property
    def total_trials(self) -> int:
        """How many configs this generator gives in all (-1: without end)."""
        if self._total is None:  # asked before every trial: counted once
            self._total = self._count_trials()
        return self._total

    def _count_trials(self) -> int:
        if self._num_samples < 0:
            return -1
        points = range(len(self._points))
        from_points = sum(num_grid_variants(self._sample_space(i)) for i in points)
        rest = max(self._num_samples - len(self._points), 0)
        return from_points + rest * num_grid_variants(self._space)

    def _sample_space(self, sample: int) -> dict[str, Any]:
        """The space of a sample: the ``sample``-th point's values set in it, if any."""
        if sample >= len(self._points):
            return self._space
        space = _copy_dicts(self._space)
        for path, value in walk(self._points[sample]):
            set_path(space, path, value)
        return space

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if self.is_finished():
            return Searcher.FINISHED
        if self.max_concurrent and len(self._live) >= self.max_concurrent:
            return None
        space = self._sample_space(self._sample)
        config = self._variant(space, self._sample, self._combo)
        self._index += 1
        self._combo += 1
        if self._combo >= self._num_combos(space):
            self._sample, self._combo = self._sample + 1, 0
        self._live.add(trial_id)
        return config

    def _num_combos(self, space: dict[str, Any]) -> int:
        """The grid combinations of a sample's space (a point's own, or the space's)."""
        if space is not self._space:
            return num_grid_variants(space)
        if self._space_combos is None:
            self._space_combos = num_grid_variants(space)
        return self._space_combos

    def _variant(self, space: dict[str, Any], sample: int, combo: int) -> dict[str, Any]:
        grid = grid_variant(space, combo)
        if not self._constant:
            return resolve(space, grid, self._rng, self._draw(space, grid))
        if self._sample_cache is None or self._sample_cache[0] != sample:
            drawn = self._draw(space, grid)
            for path, value in walk(space):  # what Optuna cannot draw, but functions
                if path not in grid and path not in drawn and _is_random(value):
                    drawn[path] = value.sample(self._rng)
            self._sample_cache = (sample, drawn)
        return resolve(space, grid, self._rng, self._sample_cache[1])

    def _draw(self, space: dict[str, Any], grid: dict[Path, Any]) -> dict[Path, Any]:
        """One random value for every domain Optuna can sample, by one ask/tell."""
        domains = [
            (path, value)
            for path, value in walk(space)
            if path not in grid and isinstance(value, Domain)
        ]
        distributions = {
            f"p{i}": d.random_distribution()
            for i, (_, d) in enumerate(domains)
            if d.random_distribution() is not None
        }
        if not distributions:
            return {}
        import optuna

        if self._study is None:
            optuna.logging.set_verbosity(optuna.logging.WARNING)
            sampler = optuna.samplers.RandomSampler(seed=self._seed)
            self._study = optuna.create_study(sampler=sampler)
        trial = self._study.ask(fixed_distributions=distributions)
        self._study.tell(trial, 0.0)  # random sampling learns nothing from scores
        return {
            path: domain.from_random(trial.params[f"p{i}"])
            for i, (path, domain) in enumerate(domains)
            if f"p{i}" in distributions
        }

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        self._live.discard(trial_id)

    def is_finished(self) -> bool:
        total = self.total_trials
        return total >= 0 and self._index >= total


def _is_random(value: Any) -> bool:
    return isinstance(value, Domain) and not isinstance(value, Function)


def _copy_dicts(space: Mapping[str, Any]) -> dict[str, Any]:
    """``space`` with its nested dicts copied and its values shared."""
    return {
        key: _copy_dicts(value) if isinstance(value, Mapping) and not is_grid(value) else value
        for key, value in space.items()
    }
