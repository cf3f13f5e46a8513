"""Combining and sampling datasets, gathered in the calling process: join, zip, stratified
splits, random_sample; and ``Schema``, the description ``Dataset.schema()`` returns.

A join runs ``pyarrow.Table.join`` (a hash join in C++) on the two sides' needed rows
gathered here, as ``sort`` and ``groupby`` gather theirs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

JOIN_TYPES = {
    "inner": "inner",
    "left_outer": "left outer",
    "right_outer": "right outer",
    "full_outer": "full outer",
    "left_semi": "left semi",
    "right_semi": "right semi",
    "left_anti": "left anti",
    "right_anti": "right anti",
}


class Schema:
    """The column names and types of a dataset (Ray's ``ray.data.Schema``).

    Compares equal to another Schema or ``pyarrow.Schema`` with the same fields; any other
    attribute is the ``pyarrow.Schema``'s (``base_schema``).

    Example:
        >>> import lockstep.data as ld
        >>> schema = ld.from_items([{"x": 1, "s": "a"}]).schema()
        >>> schema.names, [str(t) for t in schema.types]
        (['x', 's'], ['int64', 'string'])
    """

    def __init__(self, base_schema: Any) -> None:
        self.base_schema = base_schema

    @property
    def names(self) -> list[str]:
        """The column names."""
        return list(self.base_schema.names)

    @property
    def types(self) -> list[Any]:
        """The column types (pyarrow types)."""
        return list(self.base_schema.types)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Schema):
            other = other.base_schema
        return bool(self.base_schema == other)

    def __hash__(self) -> int:
        return hash(tuple(zip(self.names, map(str, self.types), strict=True)))

    def __getattr__(self, name: str) -> Any:
        if name == "base_schema":
            raise AttributeError(name)
        return getattr(self.base_schema, name)

    def __len__(self) -> int:
        return len(self.base_schema)

    def __iter__(self) -> Any:
        return iter(self.base_schema)

    def __repr__(self) -> str:
        from lockstep.data._repr import schema_table

        names = self.base_schema.names
        return schema_table(names, self.base_schema.types) if names else "Schema()"


def join_tables(
    left: Any,
    right: Any,
    join_type: str,
    on: Sequence[str],
    right_on: Sequence[str] | None,
    left_suffix: str | None,
    right_suffix: str | None,
) -> Any:
    """``left`` joined with ``right``; a ValueError naming a key one side lacks."""
    if join_type not in JOIN_TYPES:
        raise ValueError(
            f"join: unknown join_type {join_type!r}. HINT: one of {sorted(JOIN_TYPES)}"
        )
    right_keys = list(right_on) if right_on is not None else list(on)
    if len(right_keys) != len(on):
        raise ValueError(f"join: {len(on)} keys in on but {len(right_keys)} in right_on")
    for side, table, keys in (("left", left, on), ("right", right, right_keys)):
        missing = [k for k in keys if k not in table.column_names]
        if missing:
            raise ValueError(
                f"join: the {side} dataset has no key columns {missing} (its columns are "
                f"{table.column_names}). HINT: pass on= (and right_on=) with existing columns"
            )
    return left.join(
        right,
        keys=list(on),
        right_keys=right_keys,
        join_type=JOIN_TYPES[join_type],
        left_suffix=left_suffix,
        right_suffix=right_suffix,
        coalesce_keys=True,
        use_threads=True,
    )


def zip_tables(left: Any, right: Any) -> Any:
    """The columns of both, row by row; a right column whose name is taken gets ``_1``."""
    if left.num_rows != right.num_rows:
        raise ValueError(
            f"zip: the datasets have {left.num_rows} and {right.num_rows} rows. HINT: zip "
            "datasets of the same length (e.g. made from the same one with map)"
        )
    out = left
    for name in right.column_names:
        new = name
        while new in out.column_names:
            new = f"{new}_1"
        out = out.append_column(new, right.column(name))
    return out


def stratified_indices(labels: Any, test_fraction: float, seed: int | None) -> tuple[Any, Any]:
    """Row indices of train and test, each class split in the same proportion."""
    rng = np.random.default_rng(seed)
    values = np.asarray(
        labels.to_pandas().astype(str)
        if labels.null_count
        else labels.to_numpy(zero_copy_only=False)
    )
    train, test = [], []
    for value in dict.fromkeys(values.tolist()):
        rows = np.flatnonzero(values == value)
        rows = rng.permutation(rows) if seed is not None else rows
        cut = len(rows) - int(len(rows) * test_fraction)  # Ray's count of test rows
        train.append(rows[:cut])
        test.append(rows[cut:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


class Sampler:
    """Keeps each row of one block with probability ``fraction``.

    With a seed, the block's random numbers come from ``default_rng([block, seed])``, as
    Ray draws them for its block (task) ``block``: the same rows as Ray's, and the same
    rows wherever (and however often) the block is read.
    """

    def __init__(self, fraction: float, seed: int | None, block: int = 0) -> None:
        self.fraction, self.seed, self.block = fraction, seed, block

    def __call__(self, table: Any) -> Any:
        if self.seed is None:
            rng = np.random.default_rng()
        else:
            rng = np.random.default_rng([self.block, self.seed])
        return table.filter(pa.array(rng.random(table.num_rows) < self.fraction))
