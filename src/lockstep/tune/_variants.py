"""Turning a ``param_space`` into concrete configs: grid expansion, then sampling.

Paths into the nested dict are tuples of keys; grid entries are expanded in the order of
their sorted paths, the first one varying fastest (as Ray Tune does).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

from lockstep.tune._search_space import Domain, Function, is_grid

Path = tuple[str, ...]


def walk(space: Mapping[str, Any], prefix: Path = ()) -> Iterator[tuple[Path, Any]]:
    """Every leaf of the nested dict ``space``, with its path; grid entries are leaves."""
    for key, value in space.items():
        path = (*prefix, key)
        if isinstance(value, Mapping) and not is_grid(value):
            yield from walk(value, path)
        else:
            yield path, value


def set_path(config: dict[str, Any], path: Path, value: Any) -> None:
    """``config[a][b][c] = value`` for the path ``(a, b, c)``."""
    for key in path[:-1]:
        config = config.setdefault(key, {})
    config[path[-1]] = value


def get_path(config: Mapping[str, Any], path: Path) -> Any:
    for key in path:
        config = config[key]
    return config


def grid_paths(space: Mapping[str, Any]) -> list[tuple[Path, list[Any]]]:
    """The grid entries of ``space``, each with its values, sorted by path."""
    grids = [(path, list(value["grid_search"])) for path, value in walk(space) if is_grid(value)]
    return sorted(grids, key=lambda grid: tuple(map(str, grid[0])))


def num_grid_variants(space: Mapping[str, Any]) -> int:
    """How many configs one sample of ``space`` expands to."""
    count = 1
    for _, values in grid_paths(space):
        count *= len(values)
    return count


def grid_variant(space: Mapping[str, Any], index: int) -> dict[tuple[str, ...], Any]:
    """The ``index``-th combination of grid values (the first path fastest)."""
    chosen = {}
    for path, values in grid_paths(space):
        index, position = divmod(index, len(values))
        chosen[path] = values[position]
    return chosen


def resolve(
    space: Mapping[str, Any],
    grid: dict[Path, Any],
    rng: Any,
    drawn: dict[Path, Any] | None = None,
) -> dict[str, Any]:
    """A concrete config: grid values as given, ``drawn`` values as given, other domains
    sampled with ``rng``, constants copied.

    ``sample_from`` functions run last, so they see every other resolved value.
    """
    config: dict[str, Any] = {}
    deferred: list[tuple[Path, Function]] = []
    drawn = drawn or {}
    for path, value in walk(space):
        if path in grid:
            set_path(config, path, grid[path])
        elif path in drawn:
            set_path(config, path, drawn[path])
        elif isinstance(value, Function):
            deferred.append((path, value))
        elif isinstance(value, Domain):
            set_path(config, path, value.sample(rng))
        else:
            set_path(config, path, _copy(value))
    for path, function in deferred:
        set_path(config, path, function.sample(rng, config))
    return config


def _copy(value: Any) -> Any:
    # Constants such as datasets or preprocessors are shared, not copied: a deep copy of a
    # dataset would duplicate its rows in every trial.
    if isinstance(value, list | dict):
        try:
            return copy.deepcopy(value)
        except Exception:
            return value
    return value


def tag(config: Mapping[str, Any], space: Mapping[str, Any]) -> str:
    """A short description of the searched values of ``config``: ``lr=0.01,layers=2``."""
    parts = []
    for path, value in walk(space):
        if is_grid(value) or isinstance(value, Domain):
            shown = get_path(config, path)
            text = f"{shown:.4g}" if isinstance(shown, float) else _short(shown)
            parts.append(f"{'/'.join(path)}={text}")
    return ",".join(parts)


def _short(value: Any) -> str:
    text = str(value) if isinstance(value, int | str | bool) else type(value).__name__
    return text[:20]
