"""Search spaces: the values a ``param_space`` entry may take, as Ray Tune writes them.

A domain samples itself with a numpy ``Generator`` (the default variant generator) and
converts itself to an Optuna distribution (``OptunaSearch``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any


class Domain:
    """One hyperparameter's range of values."""

    def sample(self, rng: Any, spec: dict[str, Any] | None = None) -> Any:
        """Draw one value."""
        raise NotImplementedError

    def random_distribution(self) -> Any:
        """The Optuna distribution the default search samples (at random) for this domain;
        None when Optuna has none (a normal distribution, a function)."""
        return None

    def from_random(self, value: Any) -> Any:
        """The domain's value for a value drawn from :meth:`random_distribution`."""
        return value

    def to_optuna(self) -> Any:
        """The equivalent Optuna distribution."""
        raise ValueError(
            f"{self!r} has no Optuna equivalent. HINT: use uniform, loguniform, randint, "
            "choice, ... with OptunaSearch, or the default search algorithm"
        )


class Float(Domain):
    """A float in ``[lower, upper]``, uniform or log-uniform, optionally rounded to ``q``."""

    def __init__(
        self, lower: float, upper: float, *, log: bool = False, q: float | None = None
    ) -> None:
        if not lower < upper:
            raise ValueError(f"lower must be below upper, got [{lower}, {upper}]")
        if log and lower <= 0:
            raise ValueError(f"a log scale needs lower > 0, got {lower}. HINT: e.g. 1e-5")
        self.lower, self.upper, self.log, self.q = float(lower), float(upper), log, q

    def sample(self, rng: Any, spec: dict[str, Any] | None = None) -> float:
        if self.log:
            value = math.exp(rng.uniform(math.log(self.lower), math.log(self.upper)))
        else:
            value = float(rng.uniform(self.lower, self.upper))
        return _quantize(value, self.q)

    def random_distribution(self) -> Any:
        import optuna

        return optuna.distributions.FloatDistribution(self.lower, self.upper, log=self.log)

    def from_random(self, value: Any) -> float:
        return _quantize(float(value), self.q)

    def to_optuna(self) -> Any:
        import optuna

        if self.q is not None and not self.log:
            return optuna.distributions.FloatDistribution(self.lower, self.upper, step=self.q)
        return optuna.distributions.FloatDistribution(self.lower, self.upper, log=self.log)

    def __repr__(self) -> str:
        return f"Float({self.lower}, {self.upper}, log={self.log}, q={self.q})"


class Normal(Domain):
    """A normally distributed float, optionally rounded to ``q``."""

    def __init__(self, mean: float = 0.0, sd: float = 1.0, q: float | None = None) -> None:
        if sd <= 0:
            raise ValueError(f"sd must be > 0, got {sd}")
        self.mean, self.sd, self.q = mean, sd, q

    def sample(self, rng: Any, spec: dict[str, Any] | None = None) -> float:
        return _quantize(float(rng.normal(self.mean, self.sd)), self.q)

    def __repr__(self) -> str:
        return f"Normal({self.mean}, {self.sd}, q={self.q})"


class Integer(Domain):
    """An integer in ``[lower, upper)`` (upper excluded, as in Ray Tune), optionally on a log
    scale or a multiple of ``q`` (then ``upper`` is included)."""

    def __init__(self, lower: int, upper: int, *, log: bool = False, q: int | None = None) -> None:
        if not lower < upper:
            raise ValueError(f"lower must be below upper, got [{lower}, {upper})")
        if log and lower <= 0:
            raise ValueError(f"a log scale needs lower > 0, got {lower}")
        self.lower, self.upper, self.log, self.q = int(lower), int(upper), log, q

    @property
    def high(self) -> int:
        """The largest value, included."""
        return self.upper if self.q is not None else self.upper - 1

    def sample(self, rng: Any, spec: dict[str, Any] | None = None) -> int:
        if self.log:
            value = math.exp(rng.uniform(math.log(self.lower), math.log(self.high + 1)))
            value = min(self.high, int(value))
        else:
            value = int(rng.integers(self.lower, self.high + 1))
        return self.from_random(value)

    def random_distribution(self) -> Any:
        import optuna

        return optuna.distributions.IntDistribution(self.lower, self.high, log=self.log)

    def from_random(self, value: Any) -> int:
        number = int(value)
        if self.q is not None:
            lowest = -(-self.lower // self.q) * self.q  # the multiples of q in range
            highest = self.high // self.q * self.q
            number = min(highest, max(lowest, int(round(number / self.q) * self.q)))
        return number

    def to_optuna(self) -> Any:
        import optuna

        if self.q is not None and not self.log:
            return optuna.distributions.IntDistribution(self.lower, self.high, step=self.q)
        return optuna.distributions.IntDistribution(self.lower, self.high, log=self.log)

    def __repr__(self) -> str:
        return f"Integer({self.lower}, {self.upper}, log={self.log}, q={self.q})"


class Categorical(Domain):
    """One of ``categories``, each as likely."""

    def __init__(self, categories: Sequence[Any]) -> None:
        self.categories = list(categories)
        if not self.categories:
            raise ValueError("choice() needs at least one category. HINT: choice([1, 2, 3])")

    def sample(self, rng: Any, spec: dict[str, Any] | None = None) -> Any:
        return self.categories[int(rng.integers(len(self.categories)))]

    def random_distribution(self) -> Any:
        import optuna

        # By index: Optuna's categories must be plain values, a config's may be anything.
        return optuna.distributions.CategoricalDistribution(list(range(len(self.categories))))

    def from_random(self, value: Any) -> Any:
        return self.categories[int(value)]

    def to_optuna(self) -> Any:
        import optuna

        return optuna.distributions.CategoricalDistribution(self.categories)

    def __repr__(self) -> str:
        return f"Categorical({self.categories!r})"


class Function(Domain):
    """A value computed by ``func(spec)`` from the rest of the resolved config."""

    def __init__(self, func: Callable[..., Any]) -> None:
        if not callable(func):
            raise ValueError("sample_from takes a function. HINT: sample_from(lambda spec: ...)")
        self.func = func

    def sample(self, rng: Any, spec: dict[str, Any] | None = None) -> Any:
        import inspect

        try:
            takes = len(inspect.signature(self.func).parameters) > 0
        except (TypeError, ValueError):
            takes = True
        if not takes:
            return self.func()
        return self.func(_Spec(spec or {}))

    def __repr__(self) -> str:
        return f"Function({self.func!r})"


class _Spec(dict):  # type: ignore[type-arg]
    """The resolved config as ``sample_from`` functions see it: ``spec.config.lr`` works."""

    @property
    def config(self) -> _Spec:
        return self

    def __getattr__(self, name: str) -> Any:
        try:
            value = self[name]
        except KeyError:
            raise AttributeError(name) from None
        return _Spec(value) if isinstance(value, dict) else value


def _quantize(value: float, q: float | None) -> float:
    if q is None:
        return value
    return float(round(value / q) * q)


GRID_KEY = "grid_search"


def grid_search(values: Sequence[Any]) -> dict[str, list[Any]]:
    """Try every one of ``values``: one trial (per sample) for each.

    Example:
        >>> grid_search([0.1, 0.01])
        {'grid_search': [0.1, 0.01]}
    """
    return {GRID_KEY: list(values)}


def is_grid(value: Any) -> bool:
    """Whether ``value`` is a ``grid_search(...)`` entry."""
    return isinstance(value, dict) and set(value) == {GRID_KEY}


def choice(categories: Sequence[Any]) -> Categorical:
    """One of ``categories``, each as likely.

    Example:
        >>> import numpy as np
        >>> choice([1, 2, 3]).sample(np.random.default_rng(0)) in (1, 2, 3)
        True
    """
    return Categorical(categories)


def uniform(lower: float, upper: float) -> Float:
    """A float uniformly in ``[lower, upper]``.

    Example:
        >>> import numpy as np
        >>> 0.5 <= uniform(0.5, 1.0).sample(np.random.default_rng(0)) <= 1.0
        True
    """
    return Float(lower, upper)


def quniform(lower: float, upper: float, q: float) -> Float:
    """A float uniformly in ``[lower, upper]``, rounded to a multiple of ``q``.

    Example:
        >>> import numpy as np
        >>> quniform(0, 10, 5).sample(np.random.default_rng(0)) in (0.0, 5.0, 10.0)
        True
    """
    return Float(lower, upper, q=q)


def loguniform(lower: float, upper: float, base: float = 10) -> Float:
    """A float in ``[lower, upper]`` whose logarithm is uniform.

    Example:
        >>> import numpy as np
        >>> 1e-4 <= loguniform(1e-4, 1e-1).sample(np.random.default_rng(0)) <= 1e-1
        True
    """
    return Float(lower, upper, log=True)


def qloguniform(lower: float, upper: float, q: float, base: float = 10) -> Float:
    """A log-uniform float rounded to a multiple of ``q``.

    Example:
        >>> import numpy as np
        >>> qloguniform(1, 100, 1).sample(np.random.default_rng(0)).is_integer()
        True
    """
    return Float(lower, upper, log=True, q=q)


def randn(mean: float = 0.0, sd: float = 1.0) -> Normal:
    """A normally distributed float.

    Example:
        >>> import numpy as np
        >>> isinstance(randn(0, 1).sample(np.random.default_rng(0)), float)
        True
    """
    return Normal(mean, sd)


def qrandn(mean: float, sd: float, q: float) -> Normal:
    """A normally distributed float rounded to a multiple of ``q``.

    Example:
        >>> import numpy as np
        >>> (qrandn(0, 10, 2).sample(np.random.default_rng(0)) / 2).is_integer()
        True
    """
    return Normal(mean, sd, q=q)


def randint(lower: int, upper: int) -> Integer:
    """An integer in ``[lower, upper)``.

    Example:
        >>> import numpy as np
        >>> randint(1, 9).sample(np.random.default_rng(0)) in range(1, 9)
        True
    """
    return Integer(lower, upper)


def qrandint(lower: int, upper: int, q: int = 1) -> Integer:
    """An integer in ``[lower, upper]`` that is a multiple of ``q``.

    Example:
        >>> import numpy as np
        >>> qrandint(0, 10, 5).sample(np.random.default_rng(0)) in (0, 5, 10)
        True
    """
    return Integer(lower, upper, q=q)


def lograndint(lower: int, upper: int, base: float = 10) -> Integer:
    """An integer in ``[lower, upper)`` whose logarithm is uniform.

    Example:
        >>> import numpy as np
        >>> lograndint(1, 100).sample(np.random.default_rng(0)) in range(1, 100)
        True
    """
    return Integer(lower, upper, log=True)


def qlograndint(lower: int, upper: int, q: int, base: float = 10) -> Integer:
    """A log-uniform integer in ``[lower, upper]``, a multiple of ``q``.

    Example:
        >>> import numpy as np
        >>> qlograndint(1, 100, 10).sample(np.random.default_rng(0)) % 10
        0
    """
    return Integer(lower, upper, log=True, q=q)


def sample_from(func: Callable[..., Any]) -> Function:
    """A value computed from the rest of the config: ``func(spec)``, ``spec.config.key``.

    Example:
        >>> import numpy as np
        >>> sample_from(lambda spec: spec.config.a * 2).sample(None, {"a": 3})
        6
    """
    return Function(func)
