"""The Preprocessor base class, with Ray's contract for subclasses.

A subclass implements ``_fit(self, dataset)`` (keeping what it learns in attributes whose
names end in ``_``, returning self) unless it sets ``_is_fittable = False``, and any of
``_transform_pandas``, ``_transform_numpy`` and ``_transform_arrow``: ``transform(ds)``
adds the one to use as a lazy op, so a file-based dataset stays a description that each
worker reads and transforms itself, and ``transform_batch`` applies it to one batch, which
is how serving applies exactly the training transform. Preprocessors written for Ray's
``ray.data.preprocessor.Preprocessor`` work unchanged.

The built-in preprocessors transform Arrow tables and keep every row; their ``_fit`` stores
what ``_compute_stats`` returns in ``stats_``.
"""

from __future__ import annotations

import base64
import enum
import inspect
import pickle
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from lockstep.data import _columns
from lockstep.data._convert import from_batch, from_columns, to_numpy, to_pandas
from lockstep.data._ops import MapBatches, Udf

if TYPE_CHECKING:
    from typing import Self

    from lockstep.data._dataset import Dataset

_PICKLE_PREFIX = b"CPKL:"
_HOOKS = {"pyarrow": "_transform_arrow", "numpy": "_transform_numpy", "pandas": "_transform_pandas"}


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


class Preprocessor:
    """Base class: ``fit`` learns from a dataset, ``transform`` applies what it learned.

    Subclasses implement ``_fit(self, dataset)`` (unless ``_is_fittable = False``) and at
    least one of ``_transform_pandas``, ``_transform_numpy``, ``_transform_arrow``; with
    more than one, ``preferred_batch_format()`` chooses. A fitted preprocessor pickles with
    what it learned.

    Example:
        >>> import lockstep.data as ld
        >>> class Center(Preprocessor):
        ...     def _fit(self, dataset):
        ...         self.mean_ = dataset.mean("x")
        ...         return self
        ...     def _transform_pandas(self, df):
        ...         return df.assign(x=df["x"] - self.mean_)
        >>> ds = ld.from_items([{"x": 1.0}, {"x": 3.0}])
        >>> Center().fit_transform(ds).to_pandas()["x"].tolist()
        [-1.0, 1.0]
    """

    class FitStatus(str, enum.Enum):
        """Where a preprocessor stands with fitting (``lockstep.data.preprocessors.FitStatus``).

        Example:
            >>> from lockstep.data.preprocessors import Normalizer
            >>> Normalizer(["x"]).fit_status() is Preprocessor.FitStatus.NOT_FITTABLE
            True
        """

        NOT_FITTABLE = "NOT_FITTABLE"
        NOT_FITTED = "NOT_FITTED"
        PARTIALLY_FITTED = "PARTIALLY_FITTED"
        FITTED = "FITTED"

    _is_fittable: ClassVar[bool] = True
    _fitted: bool = False
    # Built-ins: rows are kept (so counts stay known) and transform_batch returns the kind
    # of batch it was given.
    _keeps_rows: ClassVar[bool] = False
    stats_: dict[str, Any]

    def __init__(self) -> None:
        self.stats_ = {}

    def fit(self, ds: Dataset) -> Self:
        """Learn from ``ds`` (streaming) and return self; fitting again replaces what it learned.

        Example:
            >>> import lockstep.data as ld
            >>> from lockstep.data.preprocessors import StandardScaler
            >>> StandardScaler(["id"]).fit(ld.range(3)).stats_
            {'mean(id)': 1.0, 'std(id)': 0.816496580927726}
        """
        _check_dataset(ds, f"{type(self).__name__}.fit")
        status = self.fit_status()
        if status is FitStatus.NOT_FITTABLE:
            return self
        if status in (FitStatus.FITTED, FitStatus.PARTIALLY_FITTED):
            warnings.warn(
                "`fit` has already been called on the preprocessor (or at least one "
                "contained preprocessors if this is a chain). All previously fitted state "
                "will be overwritten!",
                stacklevel=2,
            )
        self.stats_ = {}
        self._fit(ds)
        self._fitted = True
        return self

    def transform(
        self,
        ds: Dataset,
        *,
        batch_size: int | None = None,
        num_cpus: float | None = None,
        memory: float | None = None,
        concurrency: int | None = None,
    ) -> Dataset:
        """``ds`` with this transform added as a lazy op (applied where the rows are read).

        ``num_cpus``, ``memory`` and ``concurrency`` are accepted for Ray compatibility:
        the rows are transformed by whichever process reads them, with no CPUs of their
        own, so a transform never waits for CPUs the training workers hold.

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
        return self._transform_dataset(ds, batch_size)

    def fit_transform(
        self,
        ds: Dataset,
        *,
        transform_num_cpus: float | None = None,
        transform_memory: float | None = None,
        transform_batch_size: int | None = None,
        transform_concurrency: int | None = None,
    ) -> Dataset:
        """``fit(ds)`` then ``transform(ds)``.

        Example:
            >>> import lockstep.data as ld
            >>> from lockstep.data.preprocessors import MaxAbsScaler
            >>> MaxAbsScaler(["id"]).fit_transform(ld.range(3)).take_all()
            [{'id': 0.0}, {'id': 0.5}, {'id': 1.0}]
        """
        return self.fit(ds).transform(ds, batch_size=transform_batch_size)

    def transform_batch(self, data: Any) -> Any:
        """Transform one batch: a pandas DataFrame, a dict of numpy arrays or a pyarrow Table.

        The built-in preprocessors return the kind of batch given (a DataFrame keeps its
        index); a subclass returns what its ``_transform_*`` method returns, as in Ray.

        Example:
            >>> import pandas as pd
            >>> import lockstep.data as ld
            >>> from lockstep.data.preprocessors import StandardScaler
            >>> scaler = StandardScaler(["x"]).fit(ld.from_items([{"x": 1.0}, {"x": 3.0}]))
            >>> scaler.transform_batch(pd.DataFrame({"x": [2.0, 5.0]}))["x"].tolist()
            [0.0, 3.0]
        """
        self._check_fitted()
        return self._transform_batch(data)

    def fit_status(self) -> FitStatus:
        """NOT_FITTABLE, NOT_FITTED, PARTIALLY_FITTED (a Chain) or FITTED.

        Fitted means ``fit`` ran, or an attribute ending in ``_`` holds state (Ray's rule).

        Example:
            >>> from lockstep.data.preprocessors import StandardScaler
            >>> StandardScaler(["x"]).fit_status().value
            'NOT_FITTED'
        """
        if not self._is_fittable:
            return FitStatus.NOT_FITTABLE
        if getattr(self, "_fitted", False) or self._check_has_fitted_state():
            return FitStatus.FITTED
        return FitStatus.FITTED if not self._needs_fit() else FitStatus.NOT_FITTED

    def has_stats(self) -> bool:
        """Whether ``stats_`` holds statistics.

        Example:
            >>> from lockstep.data.preprocessors import StandardScaler
            >>> StandardScaler(["x"]).has_stats()
            False
        """
        return bool(getattr(self, "stats_", None))

    @classmethod
    def preferred_batch_format(cls) -> str:
        """The batch format to use when more than one ``_transform_*`` is implemented.

        Example:
            >>> from lockstep.data.preprocessors import StandardScaler
            >>> StandardScaler.preferred_batch_format()
            'pyarrow'
        """
        return "pyarrow" if cls._keeps_rows else "pandas"

    def get_input_columns(self) -> list[str]:
        """The columns the preprocessor reads.

        Example:
            >>> from lockstep.data.preprocessors import StandardScaler
            >>> StandardScaler(["x"]).get_input_columns()
            ['x']
        """
        for name in ("_columns", "columns", "label_column"):
            value = getattr(self, name, None)
            if value is not None:
                return [value] if isinstance(value, str) else list(value)
        return []

    def get_output_columns(self) -> list[str]:
        """The columns the preprocessor writes.

        Example:
            >>> from lockstep.data.preprocessors import StandardScaler
            >>> StandardScaler(["x"], output_columns=["x_scaled"]).get_output_columns()
            ['x_scaled']
        """
        for name in ("_output_columns", "output_columns", "output_column", "output_column_name"):
            value = getattr(self, name, None)
            if value:
                return [value] if isinstance(value, str) else list(value)
        return self.get_input_columns()

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
    def deserialize(data: bytes | str) -> Preprocessor:
        """The preprocessor that ``serialize`` turned into ``data``.

        Also takes Ray's older format, a base64 string of a pickle.

        Raises:
            UnknownPreprocessorError: ``data`` names a preprocessor type not known here.
            ValueError: ``data`` was not made by ``serialize``.

        Example:
            >>> from lockstep.data.preprocessors import MinMaxScaler, Preprocessor
            >>> Preprocessor.deserialize(MinMaxScaler(["x"]).serialize()).columns
            ['x']
        """
        try:
            if isinstance(data, str):
                loaded = pickle.loads(base64.b64decode(data, validate=True))
            elif data.startswith(_PICKLE_PREFIX):
                loaded = pickle.loads(data[len(_PICKLE_PREFIX) :])
            else:
                raise ValueError("no CPKL: prefix")
        except Exception as exc:
            raise ValueError(
                "Preprocessor.deserialize: these bytes were not made by serialize(). "
                "HINT: pass exactly what preprocessor.serialize() returned"
            ) from exc
        if isinstance(loaded, Mapping) and "type" in loaded:
            return SerializablePreprocessorBase._from_record(loaded)
        if not isinstance(loaded, Preprocessor):
            raise ValueError(f"Preprocessor.deserialize: got a {type(loaded).__name__}")
        return loaded

    # -- for subclasses -----------------------------------------------------------------------

    def _fit(self, ds: Dataset) -> Preprocessor:
        """Learn from ``ds``: set attributes ending in ``_``, and return self."""
        self.stats_ = self._compute_stats(ds)
        return self

    def _compute_stats(self, ds: Dataset) -> dict[str, Any]:
        """The built-ins' statistics of ``ds``, kept in ``stats_``."""
        raise NotImplementedError(
            f"{type(self).__name__} is fittable but does not implement _fit(self, dataset). "
            "HINT: implement _fit, or set _is_fittable = False"
        )

    def _transform_arrow(self, table: Any) -> Any:
        """Transform a batch given as a ``pyarrow.Table``."""
        raise NotImplementedError

    def _transform_pandas(self, df: Any) -> Any:
        """Transform a batch given as a ``pandas.DataFrame``."""
        raise NotImplementedError

    def _transform_numpy(self, data: Any) -> Any:
        """Transform a batch given as a dict of numpy arrays."""
        raise NotImplementedError

    def _get_transform_config(self) -> dict[str, Any]:
        """Extra keyword arguments for ``Dataset.map_batches`` (Ray's hook)."""
        return {}

    def _check_has_fitted_state(self) -> bool:
        return any(k.endswith("_") and v for k, v in vars(self).items())

    def _needs_fit(self) -> bool:
        return self._is_fittable

    def _check_fitted(self) -> None:
        if self.fit_status() in (FitStatus.NOT_FITTED, FitStatus.PARTIALLY_FITTED):
            name = type(self).__name__
            raise PreprocessorNotFittedException(
                f"{name} is not fitted, so it cannot transform yet: `fit` must be called "
                f"before `transform`. HINT: call {name}.fit(dataset) (or fit_transform) first"
            )

    def _determine_transform_to_use(self) -> str:
        """The batch format of the ``_transform_*`` method to use."""
        implemented = [
            fmt
            for fmt, hook in _HOOKS.items()
            if getattr(type(self), hook) is not getattr(Preprocessor, hook)
        ]
        if not implemented:
            raise NotImplementedError(
                f"{type(self).__name__} implements none of `_transform_numpy`, "
                "`_transform_pandas` or `_transform_arrow`. At least one of these transform "
                "functions must be implemented for Preprocessor transforms."
            )
        if len(implemented) > 1:
            preferred = self.preferred_batch_format()
            preferred = str(getattr(preferred, "value", preferred))
            return "pyarrow" if preferred == "arrow" else preferred
        return implemented[0]

    def _transform_dataset(self, ds: Dataset, batch_size: int | None = None) -> Dataset:
        fmt = self._determine_transform_to_use()
        fn = getattr(self, _HOOKS[fmt])
        if self._keeps_rows:
            return ds._with_op(MapBatches(Udf(fn), fmt, batch_size, preserves_rows=True))
        kwargs = {"batch_size": batch_size, **self._get_transform_config()}
        return ds.map_batches(fn, batch_format=fmt, zero_copy_batch=True, **kwargs)

    def _transform_batch(self, batch: Any) -> Any:
        if not isinstance(batch, Mapping | np.ndarray) and type(batch).__name__ not in (
            "DataFrame",
            "Table",
        ):
            raise ValueError(
                f"transform_batch takes a pandas DataFrame, a dict of numpy arrays or a pyarrow "
                f"Table, got {type(batch).__name__}. HINT: pd.DataFrame(rows)"
            )
        fmt = self._determine_transform_to_use()
        if self._keeps_rows and fmt == "pyarrow":
            return self._transform_any(batch)
        table = _as_table(batch)
        if fmt == "pandas":
            return self._transform_pandas(to_pandas(table))
        if fmt == "numpy":
            return self._transform_numpy(to_numpy(table))
        out = self._transform_arrow(table)
        return to_pandas(out) if type(batch).__name__ == "DataFrame" else out

    def _transform_any(self, batch: Any) -> Any:
        """Apply ``_transform_arrow`` to a batch of any supported kind, returning that kind."""
        kind = type(batch).__name__
        if kind == "DataFrame":
            out = to_pandas(self._transform_arrow(from_batch(batch, "transform_batch")))
            out.index = batch.index
            return out
        if isinstance(batch, Mapping):
            return to_numpy(self._transform_arrow(from_columns(dict(batch), "transform_batch")))
        if kind == "Table":
            return self._transform_arrow(batch)
        return to_numpy(self._transform_arrow(_as_table(batch)))

    def __repr__(self) -> str:
        fields = ", ".join(
            f"{k}={_shown(v)}"
            for k, v in vars(self).items()
            if not k.startswith("_") and k != "stats_"
        )
        return f"{type(self).__name__}({fields})"


FitStatus = Preprocessor.FitStatus


class UnknownPreprocessorError(ValueError):
    """Serialized data names a preprocessor type that this process does not know.

    Example:
        >>> issubclass(UnknownPreprocessorError, ValueError)
        True
    """


class SerializablePreprocessorBase(Preprocessor):
    """Ray's serializable preprocessor: ``serialize()`` keeps the type, its version, the
    constructor's fields and the fitted ``stats_`` (``b"CPKL:"`` and a cloudpickle of that
    record), and ``deserialize`` rebuilds the preprocessor from them, as Ray does.

    A subclass may override ``_get_serializable_fields`` / ``_set_serializable_fields``
    (e.g. to migrate fields of an older ``get_version()``) and ``_get_stats`` /
    ``_set_stats``. The built-in preprocessors are serializable preprocessors.

    Example:
        >>> import lockstep.data as ld
        >>> from lockstep.data.preprocessors import StandardScaler
        >>> data = StandardScaler(["id"]).fit(ld.range(3)).serialize()
        >>> data.startswith(SerializablePreprocessorBase.MAGIC_CLOUDPICKLE)
        True
        >>> SerializablePreprocessorBase.deserialize(data).stats_["mean(id)"]
        1.0
    """

    class SerializationFormat(str, enum.Enum):
        """The formats ``deserialize`` reads."""

        CLOUDPICKLE = "cloudpickle"
        PICKLE = "pickle"  # Ray's older base64 pickle

    MAGIC_CLOUDPICKLE: ClassVar[bytes] = _PICKLE_PREFIX
    SERIALIZER_FORMAT_VERSION: ClassVar[int] = 1
    _version: ClassVar[int] = 1
    _registry: ClassVar[dict[str, type[SerializablePreprocessorBase]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        SerializablePreprocessorBase._registry[cls.get_preprocessor_class_id()] = cls

    @classmethod
    def get_preprocessor_class_id(cls) -> str:
        """The name of this type in serialized data (its module and class name)."""
        return f"{cls.__module__}.{cls.__qualname__}"

    @classmethod
    def get_version(cls) -> int:
        """The version of this type's serialized fields."""
        return cls._version

    def _get_serializable_fields(self) -> dict[str, Any]:
        """The fields that rebuild the preprocessor: its public attributes but ``stats_``."""
        return {k: v for k, v in vars(self).items() if not k.startswith("_") and k != "stats_"}

    def _set_serializable_fields(self, fields: dict[str, Any], version: int) -> None:
        """Set the fields ``_get_serializable_fields`` gave (of ``version``)."""
        for key, value in fields.items():
            setattr(self, key, value)

    def _get_stats(self) -> dict[str, Any]:
        """What ``fit`` learned."""
        return dict(getattr(self, "stats_", {}) or {})

    def _set_stats(self, stats: dict[str, Any]) -> None:
        """Set what ``_get_stats`` gave."""
        self.stats_ = dict(stats)

    def serialize(self) -> bytes:
        """``b"CPKL:"`` and a cloudpickle of the type, version, fields and stats."""
        import cloudpickle

        record = {
            "type": self.get_preprocessor_class_id(),
            "version": self.get_version(),
            "fields": self._get_serializable_fields(),
            "stats": self._get_stats(),
            "fitted": bool(getattr(self, "_fitted", False)),
            "serializer_format_version": self.SERIALIZER_FORMAT_VERSION,
        }
        return self.MAGIC_CLOUDPICKLE + bytes(cloudpickle.dumps(record))

    @staticmethod
    def _from_record(record: Mapping[str, Any]) -> Preprocessor:
        kind = record["type"]
        cls = SerializablePreprocessorBase._registry.get(kind)
        if cls is None:
            raise UnknownPreprocessorError(
                f"Unknown preprocessor type {kind!r} in serialized data. HINT: import the "
                "module that defines it before deserialize()"
            )
        preprocessor = cls.__new__(cls)
        preprocessor._set_serializable_fields(dict(record["fields"]), int(record["version"]))
        preprocessor._set_stats(dict(record.get("stats") or {}))
        preprocessor._fitted = bool(record.get("fitted", bool(record.get("stats"))))
        return preprocessor


def _shown(value: Any) -> str:
    """A field in ``repr``: a function by its name (as Ray shows one; its address would
    make the repr long and different every run)."""
    if inspect.isfunction(value) or inspect.isbuiltin(value):
        return str(value.__name__)
    return repr(value)


def _as_table(batch: Any) -> Any:
    """A batch of any supported kind as a ``pyarrow.Table``."""
    if isinstance(batch, np.ndarray):
        return from_columns({"__value__": batch}, "transform_batch")
    if isinstance(batch, Mapping):
        return from_columns(dict(batch), "transform_batch")
    return from_batch(batch, "transform_batch")


class ArrowPreprocessor(SerializablePreprocessorBase):
    """The built-ins' base: they transform Arrow tables, keep every row, fit ``stats_``."""

    _keeps_rows = True

    def _transform_arrow(self, table: Any) -> Any:
        raise NotImplementedError

    def _transform_pandas(self, df: Any) -> Any:
        """The Arrow transform of a ``pandas.DataFrame`` (Ray's built-ins have both)."""
        return self._transform_any(df)

    def _determine_transform_to_use(self) -> str:
        return "pyarrow"


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
            "The length of columns and output_columns must match. HINT: "
            f"{where} got {len(outputs)} output_columns for {len(columns)} columns; give one "
            "output column per input column, or leave output_columns out"
        )
    return outputs


def require_columns(table: Any, columns: Sequence[str], where: str) -> None:
    """Raise a ValueError naming the columns the batch lacks."""
    hint = "transform data with the columns the preprocessor was made for"
    _columns.require_columns(table.column_names, columns, where, hint)
