"""Stoppers: when a trial, or the whole experiment, stops (``RunConfig(stop=...)``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


class Stopper:
    """Decides per result whether a trial stops, and whether the whole experiment does.

    Example:
        >>> class LossBelow(Stopper):
        ...     def __call__(self, trial_id, result):
        ...         return result["loss"] < 0.1
        ...     def stop_all(self):
        ...         return False
        >>> LossBelow()("t", {"loss": 0.05})
        True
    """

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        """Whether trial ``trial_id`` stops after ``result``."""
        return False

    def stop_all(self) -> bool:
        """Whether the experiment stops (every running trial at its next report)."""
        return False


class MaximumIterationStopper(Stopper):
    """Stops each trial after ``max_iter`` reports.

    Example:
        >>> MaximumIterationStopper(2)("t", {"training_iteration": 2})
        True
    """

    def __init__(self, max_iter: int) -> None:
        self._max_iter = max_iter

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return bool(result.get("training_iteration", 0) >= self._max_iter)


class _DictStopper(Stopper):
    """``{"metric": threshold}``: a trial stops once any metric reaches its threshold.

    A nested metric is named by its path, ``{"val/loss": ...}`` (or a nested dict of
    thresholds), as Ray Tune flattens results.
    """

    def __init__(self, criteria: Mapping[str, Any]) -> None:
        self._criteria = dict(_flatten(criteria))

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        for key, threshold in self._criteria.items():
            value = _lookup(result, key)
            if value is not None and value >= threshold:
                return True
        return False


def _flatten(criteria: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    items: list[tuple[str, Any]] = []
    for key, value in criteria.items():
        if isinstance(value, Mapping):
            items += _flatten(value, f"{prefix}{key}/")
        else:
            items.append((f"{prefix}{key}", value))
    return items


def _lookup(result: Mapping[str, Any], key: str) -> Any:
    """``result[key]``, or the nested value at the path ``key`` ("a/b"); None if absent."""
    if key in result:
        return result[key]
    value: Any = result
    for part in key.split("/"):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


class _FunctionStopper(Stopper):
    def __init__(self, fn: Callable[[str, dict[str, Any]], bool]) -> None:
        self._fn = fn

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return bool(self._fn(trial_id, result))


def as_stopper(stop: Any) -> Stopper | None:
    """``RunConfig(stop=...)`` as a Stopper: a dict, a function or a Stopper."""
    if stop is None:
        return None
    if isinstance(stop, Stopper):
        return stop
    if isinstance(stop, Mapping):
        return _DictStopper(stop)
    if callable(stop):
        return _FunctionStopper(stop)
    raise ValueError(
        f"stop must be a dict, a function (trial_id, result) -> bool or a Stopper, got "
        f"{stop!r}. HINT: stop={{'training_iteration': 10}}"
    )
