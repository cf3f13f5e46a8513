"""Text and token features (Ray's names): Tokenizer, CountVectorizer, HashingVectorizer,
FeatureHasher.

Tokens come from ``tokenization_fn`` (by default ``s.split(" ")``, as Ray); a token's hash
index is ``sha1(token) mod num_features``, as Ray's ``simple_hash``, so the same token gets
the same feature in Ray and here. Counts are lists, one per row, in the output column.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lockstep.data._columns import put_column
from lockstep.data._convert import column_from_values
from lockstep.data._ops import check_callable
from lockstep.data.preprocessors._base import (
    ArrowPreprocessor,
    check_columns,
    output_names,
    require_columns,
)

if TYPE_CHECKING:
    from lockstep.data._dataset import Dataset


def simple_split_tokenizer(value: str) -> list[str]:
    """Ray's default tokenizer: the string split on single spaces."""
    return value.split(" ")


def simple_hash(value: object, num_features: int) -> int:
    """Ray's hash of a token: ``int(sha1(str(value))) mod num_features``."""
    return int(hashlib.sha1(str(value).encode()).hexdigest(), 16) % num_features


class _Tokenizing(ArrowPreprocessor):
    columns: list[str]
    output_columns: list[str]
    tokenization_fn: Callable[[str], list[str]]

    def _set_columns(
        self,
        columns: Sequence[str],
        tokenization_fn: Callable[[str], list[str]] | None,
        output_columns: Sequence[str] | None,
    ) -> None:
        where = type(self).__name__
        self.columns = check_columns(columns, where)
        if tokenization_fn is not None:
            check_callable(tokenization_fn, where)
        self.tokenization_fn = tokenization_fn or simple_split_tokenizer
        self.output_columns = output_names(self.columns, output_columns, where)

    def _tokens(self, column: Any) -> list[list[str] | None]:
        return [None if v is None else self.tokenization_fn(v) for v in column.to_pylist()]


class Tokenizer(_Tokenizing):
    """Replace each string by its list of tokens.

    Args:
        columns: The columns of strings to tokenize.
        tokenization_fn: A function of a string returning its tokens; ``s.split(" ")``
            by default.
        output_columns: Where to write the results; in place by default.

    Example:
        >>> import lockstep.data as ld
        >>> ds = ld.from_items([{"text": "hello big world"}])
        >>> Tokenizer(["text"]).transform(ds).take_all()
        [{'text': ['hello', 'big', 'world']}]
    """

    _is_fittable = False

    def __init__(
        self,
        columns: Sequence[str],
        tokenization_fn: Callable[[str], list[str]] | None = None,
        output_columns: Sequence[str] | None = None,
    ):
        self._set_columns(columns, tokenization_fn, output_columns)

    def _transform_arrow(self, table: Any) -> Any:
        require_columns(table, self.columns, "Tokenizer")
        for column, out in zip(self.columns, self.output_columns, strict=True):
            tokens = pa.array(self._tokens(table.column(column)), pa.list_(pa.string()))
            table = put_column(table, out, tokens)
        return table


class CountVectorizer(_Tokenizing):
    """Count each token of a vocabulary (fitted) in each string: a list of counts per row.

    ``fit`` counts the tokens of each column; the vocabulary is the ``max_features`` most
    frequent (all by default), most frequent first, in ``stats_["token_counts(col)"]``.

    Args:
        columns: The columns of strings to count tokens in.
        tokenization_fn: A function of a string returning its tokens; ``s.split(" ")``
            by default.
        max_features: Keep only this many most frequent tokens.
        output_columns: Where to write the results; in place by default.

    Example:
        >>> import lockstep.data as ld
        >>> ds = ld.from_items([{"t": "a b a"}, {"t": "b c"}])
        >>> CountVectorizer(["t"]).fit_transform(ds).take_all()
        [{'t': [2, 1, 0]}, {'t': [0, 1, 1]}]
    """

    def __init__(
        self,
        columns: Sequence[str],
        tokenization_fn: Callable[[str], list[str]] | None = None,
        max_features: int | None = None,
        output_columns: Sequence[str] | None = None,
    ):
        self._set_columns(columns, tokenization_fn, output_columns)
        if max_features is not None and (not isinstance(max_features, int) or max_features < 1):
            raise ValueError(
                f"CountVectorizer: max_features must be a positive int or None, got "
                f"{max_features!r}"
            )
        self.max_features = max_features

    def _compute_stats(self, ds: Dataset) -> dict[str, Any]:
        counts: dict[str, Counter[str]] = {c: Counter() for c in self.columns}
        for block in ds.select_columns(self.columns)._pass_blocks():
            for name in self.columns:
                for tokens in self._tokens(block.column(name)):
                    counts[name].update(tokens or ())
        return {
            f"token_counts({name})": Counter(dict(counter.most_common(self.max_features)))
            for name, counter in counts.items()
        }

    def _transform_arrow(self, table: Any) -> Any:
        require_columns(table, self.columns, "CountVectorizer")
        for column, out in zip(self.columns, self.output_columns, strict=True):
            vocabulary = [t for t, _ in self.stats_[f"token_counts({column})"].most_common()]
            rows = [Counter(tokens or ()) for tokens in self._tokens(table.column(column))]
            counts = [[row[token] for token in vocabulary] for row in rows]
            table = put_column(table, out, pa.array(counts, pa.list_(pa.int64())))
        return table


class HashingVectorizer(_Tokenizing):
    """Count tokens into ``num_features`` buckets by their hash: a list of counts per row.

    Stateless: no vocabulary to fit, so it pickles small; tokens that share a bucket add up.

    Args:
        columns: The columns of strings to count tokens in.
        num_features: The number of buckets (the length of each list).
        tokenization_fn: A function of a string returning its tokens; ``s.split(" ")``
            by default.
        output_columns: Where to write the results; in place by default.

    Example:
        >>> import lockstep.data as ld
        >>> ds = ld.from_items([{"t": "a b a"}])
        >>> HashingVectorizer(["t"], num_features=5).transform(ds).take_all()
        [{'t': [1, 0, 2, 0, 0]}]
    """

    _is_fittable = False

    def __init__(
        self,
        columns: Sequence[str],
        num_features: int,
        tokenization_fn: Callable[[str], list[str]] | None = None,
        output_columns: Sequence[str] | None = None,
    ):
        self._set_columns(columns, tokenization_fn, output_columns)
        self.num_features = _check_num_features(num_features, "HashingVectorizer")

    def _transform_arrow(self, table: Any) -> Any:
        require_columns(table, self.columns, "HashingVectorizer")
        for column, out in zip(self.columns, self.output_columns, strict=True):
            rows = []
            for tokens in self._tokens(table.column(column)):
                vector = [0] * self.num_features
                for token in tokens or ():
                    vector[simple_hash(token, self.num_features)] += 1
                rows.append(vector)
            table = put_column(table, out, pa.array(rows, pa.list_(pa.int64())))
        return table


class FeatureHasher(ArrowPreprocessor):
    """Sum numeric columns (e.g. token counts, one column per token) into hashed buckets.

    Each column adds its values to bucket ``simple_hash(column name)``; the result is one
    vector of ``num_features`` per row in ``output_column``, and the columns are dropped.

    Args:
        columns: The numeric columns to hash (their names are the features).
        num_features: The number of buckets.
        output_column: The column to write the vectors to.

    Example:
        >>> import lockstep.data as ld
        >>> ds = ld.from_items([{"a": 1, "b": 2}])
        >>> out = FeatureHasher(["a", "b"], num_features=5, output_column="h").transform(ds)
        >>> out.take_all()[0]["h"].tolist()
        [2.0, 0.0, 1.0, 0.0, 0.0]
    """

    _is_fittable = False

    def __init__(self, columns: Sequence[str], num_features: int, output_column: str):
        self.columns = check_columns(columns, "FeatureHasher")
        self.num_features = _check_num_features(num_features, "FeatureHasher")
        if not isinstance(output_column, str):
            raise ValueError(f"FeatureHasher: output_column must be a name, got {output_column!r}")
        self.output_column = output_column

    def _transform_arrow(self, table: Any) -> Any:
        require_columns(table, self.columns, "FeatureHasher")
        vectors = np.zeros((table.num_rows, self.num_features), dtype=np.float64)
        for name in self.columns:
            values = pc.fill_null(table.column(name).cast(pa.float64()), 0.0)
            vectors[:, simple_hash(name, self.num_features)] += values.to_numpy()
        table = table.drop_columns(self.columns)
        return put_column(table, self.output_column, column_from_values(vectors))


def _check_num_features(num_features: Any, where: str) -> int:
    if not isinstance(num_features, int) or isinstance(num_features, bool) or num_features < 1:
        raise ValueError(f"{where}: num_features must be a positive int, got {num_features!r}")
    return num_features
