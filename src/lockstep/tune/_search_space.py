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
    """A float in ``[lower, upper]``, uniform or log-uniform, optionally rounded to a
    multiple of ``q`` (then both bounds must be multiples of ``q``, as in Ray Tune)."""

    def __init__(
        self, lower: float, upper: float, *, log: bool = False, q: float | None = None
    ) -> None:
        if not lower < upper:
            raise ValueError(f"lower must be below upper, got [{lower}, {upper}]")
        if log and lower <= 0:
            raise ValueError(f"a log scale needs lower > 0, got {lower}. HINT: e.g. 1e-5")
        for bound in (lower, upper):
            if q is not None and not math.isclose(bound / q, round(bound / q)):
                raise ValueError(
                    f"the bound {bound} is not a multiple of q={q}, so a rounded value could "
                    f"fall outside [{lower}, {upper}]. HINT: bounds that are multiples of q"
                )
        self.lower, self.upper, self.log, self.q = float(lower), float(upper), log, q

    def sample(self, rng: Any, spec: dict[str, Any] | None = None) -> float:
        if self.log:
            value = math.exp(rng.uniform(math.log(self.lower), math.log(self.upper)))
        else:
            value = float(rng.uniform(self.lower, self.upper))
        return self.from_random(value)

    def random_distribution(self) -> Any:
        import optuna

        return optuna.distributions.FloatDistribution(self.lower, self.upper, log=self.log)

    def from_random(self, value: Any) -> float:
        # Rounding (and exp) may step a last bit past a bound: keep the value inside.
        return min(self.upper, max(self.lower, _quantize(float(value), self.q)))

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
    scale, or a multiple of ``q`` (then ``upper`` is included, unless ``q`` is 1).

    Each allowed value is as likely (each multiple of ``q``); on a log scale, an integer
    ``k`` comes from the log-uniform floats in ``[k, k + 1)``, as in Ray Tune.
    """

    def __init__(self, lower: int, upper: int, *, log: bool = False, q: int | None = None) -> None:
        if not lower < upper:
            raise ValueError(f"lower must be below upper, got [{lower}, {upper})")
        if log and lower <= 0:
            raise ValueError(f"a log scale needs lower > 0, got {lower}")
        self.lower, self.upper, self.log, self.q = int(lower), int(upper), log, q
        # The allowed values are step * i for i in [first, last].
        self.step = q or 1
        self.first, self.last = -(-self.lower // self.step), self.high // self.step
        if self.last < self.first:
            raise ValueError(
                f"no multiple of q={q} lies in [{lower}, {upper}]. HINT: a smaller q or wider "
                "bounds"
            )

    @property
    def high(self) -> int:
        """The largest value, included."""
        return self.upper if self.q not in (None, 1) else self.upper - 1

    def sample(self, rng: Any, spec: dict[str, Any] | None = None) -> int:
        if self.log:
            return self.from_random(
                math.exp(rng.uniform(math.log(self.first), math.log(self.last + 1)))
            )
        return self.from_random(int(rng.integers(self.first, self.last + 1)))

    def random_distribution(self) -> Any:
        import optuna

        if self.log:  # floored, as Ray Tune draws a log-uniform integer
            return optuna.distributions.FloatDistribution(self.first, self.last + 1, log=True)
        return optuna.distributions.IntDistribution(self.first, self.last)

    def from_random(self, value: Any) -> int:
        """The value for ``value`` drawn from :meth:`random_distribution`: ``step`` times
        its (floored) index."""
        index: int = min(self.last, max(self.first, math.floor(value)))
        return index * self.step

    def to_optuna(self) -> Any:
        import optuna

        if self.log and self.step != 1:
            return super().to_optuna()  # Optuna's log-scale integers take no step
        low, high = self.first * self.step, self.last * self.step
        return optuna.distributions.IntDistribution(low, high, log=self.log, step=self.step)

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
        self.takes_spec = _callable_with(func, 1)
        if not self.takes_spec and not _callable_with(func, 0):
            raise ValueError(
                f"sample_from's function {func!r} must take one argument (the config) or "
                "none. HINT: sample_from(lambda spec: spec.config.lr * 2)"
            )

    def sample(self, rng: Any, spec: dict[str, Any] | None = None) -> Any:
        if not self.takes_spec:
            return self.func()
        return self.func(_Spec(spec or {}))

    def __repr__(self) -> str:
        return f"Function({self.func!r})"


def _callable_with(func: Callable[..., Any], count: int) -> bool:
    import inspect

    try:
        inspect.signature(func).bind(*range(count))
    except TypeError:
        return False
    except ValueError:  # no signature to read (some builtins): assume it takes the config
        return count == 1
    return True


class _Spec(dict):  # type: ignore[type-arg]
    """The resolved config as ``sample_from`` functions see it: ``spec["lr"]``,
    ``spec.config.lr`` and ``spec["config"]["lr"]`` all work."""

    @property
    def config(self) -> _Spec:
        return self

    def __missing__(self, key: Any) -> Any:
        if key == "config":
            return self
        raise KeyError(key)

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
