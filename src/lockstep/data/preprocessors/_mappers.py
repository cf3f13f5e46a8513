"""Stateless preprocessors around a user function or a dataset operation."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lockstep.data._convert import check_batch_format, from_batch, to_format
from lockstep.data._ops import check_callable
from lockstep.data.preprocessors._base import Preprocessor

if TYPE_CHECKING:
    from lockstep.data._dataset import Dataset


class BatchMapper(Preprocessor):
    """Apply a function to batches, as ``Dataset.map_batches`` does.

    Args:
        fn: A function of a batch, returning a batch.
        batch_format: The format ``fn`` takes: ``"pandas"``, ``"numpy"`` or ``"pyarrow"``.
        batch_size: Rows per batch; None for whole blocks.

    Example:
        >>> import lockstep.data as ld
        >>> add_one = BatchMapper(lambda df: df.assign(id=df["id"] + 1), batch_format="pandas")
        >>> add_one.transform(ld.range(2)).take_all()
        [{'id': 1}, {'id': 2}]
    """

    _is_fittable = False

    def __init__(
        self,
        fn: Callable[[Any], Any],
        batch_format: str = "pandas",
        batch_size: int | None = None,
    ):
        check_callable(fn, type(self).__name__)
        self.fn = fn
        self.batch_format = check_batch_format(batch_format, type(self).__name__) or "pyarrow"
        self.batch_size = batch_size

    def _transform_dataset(self, ds: Dataset, batch_size: int | None = None) -> Dataset:
        return ds.map_batches(self.fn, batch_format=self.batch_format, batch_size=self.batch_size)

    def _transform_arrow(self, table: Any) -> Any:
        return from_batch(self.fn(to_format(table, self.batch_format, writable=True)), "fn")

    def preferred_batch_format(self) -> str:  # type: ignore[override]  # per instance here
        """The batch format the function takes.

        Example:
            >>> BatchMapper(lambda b: b, batch_format="numpy").preferred_batch_format()
            'numpy'
        """
        return self.batch_format


class FunctionTransformer(BatchMapper):
    """A function applied to each batch (scikit-learn's name for what BatchMapper does).

    Args:
        func: A function of a batch, returning a batch.
        batch_format: The format ``func`` takes: ``"pandas"``, ``"numpy"`` or ``"pyarrow"``.
        batch_size: Rows per batch; None for whole blocks.

    Example:
        >>> import numpy as np, lockstep.data as ld
        >>> log = FunctionTransformer(lambda b: {"id": np.log1p(b["id"])}, batch_format="numpy")
        >>> log.transform(ld.range(2)).take_all()
        [{'id': 0.0}, {'id': 0.6931471805599453}]
    """

    def __init__(
        self,
        func: Callable[[Any], Any],
        batch_format: str = "pandas",
        batch_size: int | None = None,
    ):
        super().__init__(func, batch_format, batch_size)


class Repartitioner(Preprocessor):
    """Repartition the dataset into ``num_partitions`` blocks; batches pass unchanged.

    Args:
        num_partitions: The number of blocks.
        shuffle: Shuffle the rows too (this gathers them in the calling process).

    Example:
        >>> import lockstep.data as ld
        >>> Repartitioner(num_partitions=2).transform(ld.range(10)).num_blocks()
        2
    """

    _is_fittable = False

    def __init__(self, num_partitions: int, shuffle: bool = False):
        if not isinstance(num_partitions, int) or num_partitions <= 0:
            raise ValueError(
                f"Repartitioner: num_partitions must be a positive int, got {num_partitions!r}"
            )
        self.num_partitions = num_partitions
        self.shuffle = shuffle

    def _transform_dataset(self, ds: Dataset, batch_size: int | None = None) -> Dataset:
        return ds.repartition(self.num_partitions, shuffle=self.shuffle)

    def _transform_arrow(self, table: Any) -> Any:
        return table
