"""The Preprocessor base class: fit statistics on a dataset, transform datasets and batches.

A preprocessor transforms Arrow tables (``_transform_arrow``); ``transform(ds)`` adds that
as a lazy, row-preserving op, so a file-based dataset stays a description that each worker
reads and transforms itself. ``transform_batch`` applies the same function to one pandas,
numpy or pyarrow batch, which is how serving applies exactly the training transform.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from lockstep.data._convert import from_batch, from_columns, to_numpy, to_pandas
from lockstep.data._ops import MapBatches, Udf

if TYPE_CHECKING:
    from typing import Self

    from lockstep.data._dataset import Dataset

_PICKLE_PREFIX = b"CPKL:"


class PreprocessorNotFittedException(RuntimeError):
    """``transform`` was called on a preprocessor that needs ``fit`` first.

    Example:
        >>> import lockstep.data as ld
        >>> from lockstep.data.preprocessors import StandardScaler
        >>> try:
        ...     StandardScaler(["id"]).transform(ld.range(3))
        ... except PreprocessorNotFittedException as error:
        ...     print(str(error).split(",")[0])
        StandardScaler is not fitted
    """


class FitStatus(str, enum.Enum):
    """Where a preprocessor stands with fitting.

    Example:
        >>> from lockstep.data.preprocessors import Normalizer
        >>> Normalizer(["x"]).fit_status() is FitStatus.NOT_FITTABLE
        True
    """

    NOT_FITTABLE = "NOT_FITTABLE"
    NOT_FITTED = "NOT_FITTED"
    PARTIALLY_FITTED = "PARTIALLY_FITTED"
    FITTED = "FITTED"


class Preprocessor(abc.ABC):
    """Base class: ``fit`` computes ``stats_`` from a dataset, ``transform`` applies them.

    Subclasses compute statistics in ``_fit`` (streaming) and transform an Arrow table in
    ``_transform_arrow``. A fitted preprocessor pickles with its statistics.

    Example:
        >>> import lockstep.data as ld
        >>> from lockstep.data.preprocessors import MinMaxScaler
        >>> ds = ld.from_items([{"x": 0.0}, {"x": 5.0}, {"x": 10.0}])
        >>> MinMaxScaler(["x"]).fit_transform(ds).to_pandas()["x"].tolist()
        [0.0, 0.5, 1.0]
    """

    _is_fittable: ClassVar[bool] = True
    stats_: dict[str, Any]

    def fit(self, ds: Dataset) -> Self:
        """Compute the statistics on ``ds`` (streaming) and return self; refitting replaces them.

        Example:
            >>> import lockstep.data as ld
            >>> from lockstep.data.preprocessors import StandardScaler
            >>> StandardScaler(["id"]).fit(ld.range(3)).stats_
            {'mean(id)': 1.0, 'std(id)': 0.816496580927726}
        """
        _check_dataset(ds, f"{type(self).__name__}.fit")
        if self._is_fittable:
            self.stats_ = self._fit(ds)
        return self

    def transform(self, ds: Dataset) -> Dataset:
        """``ds`` with this transform added as a lazy op (applied where the rows are read).

        Raises:
            PreprocessorNotFittedException: The preprocessor needs ``fit`` first.

        Example:
            >>> import lockstep.data as ld
            >>> from lockstep.data.preprocessors import Normalizer
            >>> ds = ld.from_items([{"a": 3.0, "b": 4.0}])
            >>> Normalizer(["a", "b"]).transform(ds).take_all()
            [{'a': 0.6, 'b': 0.8}]
        """
        _check_dataset(ds, f"{type(self).__name__}.transform")
        self._check_fitted()
        return self._transform_dataset(ds)

    def fit_transform(self, ds: Dataset) -> Dataset:
        """``fit(ds)`` then ``transform(ds)``.

        Example:
            >>> import lockstep.data as ld
            >>> from lockstep.data.preprocessors import MaxAbsScaler
            >>> MaxAbsScaler(["id"]).fit_transform(ld.range(3)).take_all()
            [{'id': 0.0}, {'id': 0.5}, {'id': 1.0}]
        """
        return self.fit(ds).transform(ds)

    def transform_batch(self, batch: Any) -> Any:
        """Transform one batch: a pandas DataFrame, a dict of numpy arrays or a pyarrow Table.

        The result has the same kind (and, for pandas, the same index) as ``batch``.

        Example:
            >>> import pandas as pd
            >>> import lockstep.data as ld
            >>> from lockstep.data.preprocessors import StandardScaler
            >>> scaler = StandardScaler(["x"]).fit(ld.from_items([{"x": 1.0}, {"x": 3.0}]))
            >>> scaler.transform_batch(pd.DataFrame({"x": [2.0, 5.0]}))["x"].tolist()
            [0.0, 3.0]
        """
        self._check_fitted()
        return self._transform_any(batch)

    def fit_status(self) -> FitStatus:
        """NOT_FITTABLE, NOT_FITTED, PARTIALLY_FITTED (a Chain) or FITTED.

        Example:
            >>> from lockstep.data.preprocessors import StandardScaler
            >>> StandardScaler(["x"]).fit_status().value
            'NOT_FITTED'
        """
        if not self._is_fittable:
            return FitStatus.NOT_FITTABLE
        return FitStatus.FITTED if "stats_" in self.__dict__ else FitStatus.NOT_FITTED

    def has_stats(self) -> bool:
        """Whether ``fit`` has computed statistics.

        Example:
            >>> from lockstep.data.preprocessors import StandardScaler
            >>> StandardScaler(["x"]).has_stats()
            False
        """
        return "stats_" in self.__dict__

    def preferred_batch_format(self) -> str:
        """The batch format the transform works on natively.

        Example:
            >>> from lockstep.data.preprocessors import StandardScaler
            >>> StandardScaler(["x"]).preferred_batch_format()
            'pyarrow'
        """
        return "pyarrow"

    def serialize(self) -> bytes:
        """The preprocessor as bytes (``b"CPKL:"`` and a cloudpickle), as Ray's format.

        Example:
            >>> from lockstep.data.preprocessors import Preprocessor, StandardScaler
            >>> data = StandardScaler(["x"]).serialize()
            >>> type(Preprocessor.deserialize(data)).__name__
            'StandardScaler'
        """
        import cloudpickle

        return _PICKLE_PREFIX + bytes(cloudpickle.dumps(self))

    @staticmethod
    def deserialize(data: bytes) -> Preprocessor:
        """The preprocessor that ``serialize`` turned into ``data``.

        Example:
            >>> from lockstep.data.preprocessors import MinMaxScaler, Preprocessor
            >>> Preprocessor.deserialize(MinMaxScaler(["x"]).serialize()).columns
            ['x']
        """
        import pickle

        if not data.startswith(_PICKLE_PREFIX):
            raise ValueError(
                "Preprocessor.deserialize: these bytes were not made by serialize(). "
                "HINT: pass exactly what preprocessor.serialize() returned"
            )
        loaded = pickle.loads(data[len(_PICKLE_PREFIX) :])
        if not isinstance(loaded, Preprocessor):
            raise ValueError(f"Preprocessor.deserialize: got a {type(loaded).__name__}")
        return loaded

    # -- for subclasses -----------------------------------------------------------------------

    def _fit(self, ds: Dataset) -> dict[str, Any]:
        """The statistics (``stats_``) of ``ds``."""
        raise NotImplementedError

    @abc.abstractmethod
    def _transform_arrow(self, table: Any) -> Any:
        """``table`` transformed."""

    def _needs_fit(self) -> bool:
        return self._is_fittable

    def _check_fitted(self) -> None:
        if self._needs_fit() and not self.has_stats():
            name = type(self).__name__
            raise PreprocessorNotFittedException(
                f"{name} is not fitted, so it cannot transform yet. "
                f"HINT: call {name}.fit(dataset) (or fit_transform) first"
            )

    def _transform_dataset(self, ds: Dataset) -> Dataset:
        op = MapBatches(Udf(self._transform_arrow), "pyarrow", None, preserves_rows=True)
        return ds._with_op(op)

    def _transform_any(self, batch: Any) -> Any:
        """Apply ``_transform_arrow`` to a batch of any supported kind, returning that kind."""
        kind = type(batch).__name__
        if kind == "DataFrame":
            out = to_pandas(self._transform_arrow(from_batch(batch, "transform_batch")))
            out.index = batch.index
            return out
        if isinstance(batch, dict):
            return to_numpy(self._transform_arrow(from_columns(batch, "transform_batch")))
        if kind == "Table":
            return self._transform_arrow(batch)
        raise ValueError(
            f"transform_batch takes a pandas DataFrame, a dict of numpy arrays or a pyarrow "
            f"Table, got {kind}. HINT: pd.DataFrame(rows)"
        )

    def __repr__(self) -> str:
        fields = ", ".join(
            f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_") and k != "stats_"
        )
        return f"{type(self).__name__}({fields})"


def _check_dataset(ds: Any, where: str) -> None:
    from lockstep.data._dataset import Dataset

    if not isinstance(ds, Dataset):
        raise ValueError(
            f"{where} takes a lockstep.data Dataset, got {type(ds).__name__}. "
            "HINT: wrap it, e.g. lockstep.data.from_pandas(df)"
        )


def check_columns(columns: Any, where: str) -> list[str]:
    """``columns`` as a non-empty list of names, or a ValueError."""
    names = [columns] if isinstance(columns, str) else list(columns) if columns else []
    if not names or not all(isinstance(c, str) for c in names):
        raise ValueError(
            f"{where}: columns must be a non-empty list of column names, got {columns!r}. "
            f'HINT: {where}(columns=["x", "y"])'
        )
    return names


def output_names(columns: list[str], output_columns: Sequence[str] | None, where: str) -> list[str]:
    """Where each column's result goes: in place by default."""
    if output_columns is None:
        return list(columns)
    outputs = list(output_columns)
    if len(outputs) != len(columns):
        raise ValueError(
            f"{where}: {len(outputs)} output_columns for {len(columns)} columns. "
            "HINT: one output column per input column, or leave output_columns out"
        )
    return outputs


def require_columns(table: Any, columns: Sequence[str], where: str) -> None:
    """Raise a ValueError naming the columns the batch lacks."""
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise ValueError(
            f"{where}: the batch has no columns {missing} (it has {table.column_names}). "
            "HINT: transform data with the columns the preprocessor was made for"
        )


def put_column(table: Any, name: str, values: Any) -> Any:
    """``table`` with column ``name`` replaced by ``values``, or appended when new."""
    if name in table.column_names:
        return table.set_column(table.column_names.index(name), name, values)
    return table.append_column(name, values)
