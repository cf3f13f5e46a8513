"""Chain: preprocessors applied one after the other."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lockstep.data._convert import from_batch
from lockstep.data.preprocessors._base import FitStatus, Preprocessor, _check_dataset

if TYPE_CHECKING:
    from typing import Self

    from lockstep.data._dataset import Dataset


class Chain(Preprocessor):
    """Apply preprocessors in order; ``fit`` fits each on the output of those before it.

    Example:
        >>> import lockstep.data as ld
        >>> from lockstep.data.preprocessors import MinMaxScaler, SimpleImputer
        >>> ds = ld.from_items([{"x": 0.0}, {"x": None}, {"x": 4.0}])
        >>> chain = Chain(SimpleImputer(["x"]), MinMaxScaler(["x"]))
        >>> chain.fit_transform(ds).to_pandas()["x"].tolist()
        [0.0, 0.5, 1.0]
    """

    def __init__(self, *preprocessors: Preprocessor):
        if not preprocessors or not all(isinstance(p, Preprocessor) for p in preprocessors):
            raise ValueError(
                "Chain takes one or more preprocessors. "
                "HINT: Chain(SimpleImputer(['x']), StandardScaler(['x']))"
            )
        self.preprocessors = tuple(preprocessors)
        self._is_fittable = any(p._is_fittable for p in preprocessors)  # type: ignore[misc]

    def fit(self, ds: Dataset) -> Self:
        """Fit each preprocessor on the previous ones' output (lazily transformed).

        Example:
            >>> import lockstep.data as ld
            >>> from lockstep.data.preprocessors import StandardScaler
            >>> Chain(StandardScaler(["id"])).fit(ld.range(3)).fit_status().value
            'FITTED'
        """
        _check_dataset(ds, "Chain.fit")
        for preprocessor in self.preprocessors[:-1]:
            ds = preprocessor.fit_transform(ds)
        self.preprocessors[-1].fit(ds)
        self.stats_ = {}
        self._fitted = True
        return self

    def fit_status(self) -> FitStatus:
        """FITTED when every fittable stage is, PARTIALLY_FITTED when only some are.

        Example:
            >>> from lockstep.data.preprocessors import Normalizer, StandardScaler
            >>> Chain(Normalizer(["x"]), StandardScaler(["x"])).fit_status().value
            'NOT_FITTED'
        """
        statuses = {p.fit_status() for p in self.preprocessors} - {FitStatus.NOT_FITTABLE}
        if not statuses:
            return FitStatus.NOT_FITTABLE
        if statuses == {FitStatus.FITTED}:
            return FitStatus.FITTED
        return (
            FitStatus.NOT_FITTED
            if statuses == {FitStatus.NOT_FITTED}
            else FitStatus.PARTIALLY_FITTED
        )

    def _check_fitted(self) -> None:
        for preprocessor in self.preprocessors:
            preprocessor._check_fitted()

    def _transform_dataset(self, ds: Dataset, batch_size: int | None = None) -> Dataset:
        for preprocessor in self.preprocessors:
            ds = preprocessor._transform_dataset(ds, batch_size)
        return ds

    def _transform_batch(self, batch: Any) -> Any:
        for preprocessor in self.preprocessors:
            batch = preprocessor._transform_batch(batch)
        return batch

    def _transform_arrow(self, table: Any) -> Any:
        for preprocessor in self.preprocessors:
            table = from_batch(preprocessor._transform_batch(table), "Chain")
        return table

    def __repr__(self) -> str:
        return f"Chain({', '.join(repr(p) for p in self.preprocessors)})"


class Pipeline(Chain):
    """Preprocessors applied one after the other: the same as :class:`Chain`.

    Example:
        >>> import lockstep.data as ld
        >>> from lockstep.data.preprocessors import MinMaxScaler, SimpleImputer
        >>> ds = ld.from_items([{"x": 0.0}, {"x": None}, {"x": 4.0}])
        >>> Pipeline(SimpleImputer(["x"]), MinMaxScaler(["x"])).fit_transform(ds).count()
        3
    """

    def __repr__(self) -> str:
        return f"Pipeline({', '.join(repr(p) for p in self.preprocessors)})"
