"""The ways to consume data, shared by Dataset, DataIterator and DatasetPipeline.

``iter_batches`` and its kin return an Iterable, as Ray's do: every ``for`` loop over it
starts a fresh pass, in which blocks are read, cut into batches, converted, and handed over
through a background thread (``prefetch_batches`` ahead). So an iterable made once before
the epoch loop reads the data again at each epoch.
"""

from __future__ import annotations

import functools
import numbers
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from lockstep.data._batching import rebatch, shuffle_batches
from lockstep.data._convert import check_batch_format, to_format, to_rows
from lockstep.data._position import PassTracker, take_row_ids, with_row_ids
from lockstep.data._prefetch import prefetch
from lockstep.data._relational import Schema
from lockstep.data._stats import IterStats, counted

if TYPE_CHECKING:
    from lockstep.data._plan import Plan

T = TypeVar("T")


class Passes(Iterable[T], Generic[T]):
    """What ``iter_batches``, ``iter_rows`` and the others return: each iteration is a pass.

    Example:
        >>> import lockstep.data as ld
        >>> batches = ld.range(3).iter_batches(batch_size=3)
        >>> [[b["id"].tolist() for b in batches] for epoch in range(2)]
        [[[0, 1, 2]], [[0, 1, 2]]]
    """

    def __init__(self, start: Callable[[], Iterator[T]], what: str) -> None:
        self._start = start
        self._what = what

    def __iter__(self) -> Iterator[T]:
        return self._start()

    def __repr__(self) -> str:
        return f"<{self._what}: an Iterable; each for loop over it is a new pass>"


class BatchIterable:
    """Iteration methods over whatever ``_pass_blocks()`` yields."""

    _last_stats: IterStats | None = None
    _plan: Plan  # the sources and pending ops of the rows

    def _pass_blocks(self) -> Iterator[Any]:
        """The blocks of one pass (one epoch; every epoch for a pipeline)."""
        raise NotImplementedError

    def schema(self) -> Schema | None:
        """The :class:`~lockstep.data.Schema` of the rows, or None when there are none to
        look at.

        Example:
            >>> import lockstep.data as ld
            >>> ld.range(2).iterator().schema().names
            ['id']
        """
        schema = self._plan.schema()
        return Schema(schema) if schema is not None else None

    def iter_rows(self, *, prefetch_batches: int = 1) -> Iterable[dict[str, Any]]:
        """The rows, as dicts of column name to value; each ``for`` loop is a new pass.

        Example:
            >>> import lockstep.data as ld
            >>> [row["id"] for row in ld.range(3).iter_rows()]
            [0, 1, 2]
        """
        return self._batches(
            "iter_rows",
            batch_size=None,
            batch_format="pyarrow",
            prefetch_batches=prefetch_batches,
            by_row=True,
        )

    def iter_batches(
        self,
        *,
        prefetch_batches: int = 1,
        batch_size: int | None = 256,
        batch_format: str = "default",
        drop_last: bool = False,
        local_shuffle_buffer_size: int | None = None,
        local_shuffle_seed: int | None = None,
    ) -> Iterable[Any]:
        """Batches of rows; each ``for`` loop over the result is a new pass over the data.

        Args:
            prefetch_batches: Batches prepared ahead on a background thread (0: none).
            batch_size: Rows per batch (the last may be smaller); None for whole blocks.
            batch_format: ``"default"``/``"numpy"`` (dict of arrays), ``"pandas"`` or
                ``"pyarrow"``.
            drop_last: Leave out a last batch smaller than ``batch_size``.
            local_shuffle_buffer_size: Shuffle rows within a buffer of at least this many.
            local_shuffle_seed: Seed of that shuffle, for a reproducible order.

        Example:
            >>> import lockstep.data as ld
            >>> [b["id"].tolist() for b in ld.range(5).iter_batches(batch_size=2)]
            [[0, 1], [2, 3], [4]]
        """
        return self._batches(
            "iter_batches",
            batch_size=batch_size,
            batch_format=batch_format,
            drop_last=drop_last,
            local_shuffle_buffer_size=local_shuffle_buffer_size,
            local_shuffle_seed=local_shuffle_seed,
            prefetch_batches=prefetch_batches,
        )

    def iter_torch_batches(
        self,
        *,
        prefetch_batches: int = 1,
        batch_size: int | None = 256,
        dtypes: Any = None,
        device: Any = "auto",
        collate_fn: Callable[[dict[str, Any]], Any] | None = None,
        drop_last: bool = False,
        local_shuffle_buffer_size: int | None = None,
        local_shuffle_seed: int | None = None,
    ) -> Iterable[Any]:
        """Batches as dicts of ``torch.Tensor``; each ``for`` loop is a new pass.

        Args:
            prefetch_batches: Batches prepared ahead on a background thread.
            batch_size: Rows per batch; None for whole blocks.
            dtypes: A torch dtype for every column, or a dict of column name to dtype.
            device: Where the tensors go; ``"auto"`` is the current GPU if any, else CPU.
            collate_fn: Makes the batch from the dict of numpy arrays instead (then
                ``dtypes`` and ``device`` are not used).
            drop_last: Leave out a last batch smaller than ``batch_size``.
            local_shuffle_buffer_size: Shuffle rows within a buffer of at least this many.
            local_shuffle_seed: Seed of that shuffle.

        Example:
            >>> import torch, lockstep.data as ld
            >>> batches = ld.range(4).iter_torch_batches(batch_size=4, dtypes=torch.float32)
            >>> batch = next(iter(batches))
            >>> batch["id"]
            tensor([0., 1., 2., 3.])
        """
        if collate_fn is not None and dtypes is not None:
            raise ValueError(
                "iter_torch_batches: dtypes is not used with collate_fn. "
                "HINT: convert to the dtypes inside collate_fn, or drop collate_fn"
            )
        from lockstep.data import _torch

        convert = collate_fn if collate_fn is not None else _torch.batch_converter(dtypes, device)
        return self._batches(
            "iter_torch_batches",
            batch_size=batch_size,
            batch_format="numpy",
            drop_last=drop_last,
            local_shuffle_buffer_size=local_shuffle_buffer_size,
            local_shuffle_seed=local_shuffle_seed,
            prefetch_batches=prefetch_batches,
            convert=convert,
            # arrays handed to user code are writable copies, as torch.as_tensor wants
            writable=collate_fn is not None,
        )

    def iter_tf_batches(
        self,
        *,
        prefetch_batches: int = 1,
        batch_size: int | None = 256,
        dtypes: Any = None,
        drop_last: bool = False,
        local_shuffle_buffer_size: int | None = None,
        local_shuffle_seed: int | None = None,
    ) -> Iterable[dict[str, Any]]:
        """Batches as dicts of ``tf.Tensor`` (needs TensorFlow); each ``for`` loop is a new pass.

        Args:
            prefetch_batches: Batches prepared ahead on a background thread.
            batch_size: Rows per batch; None for whole blocks.
            dtypes: A tf dtype for every column, or a dict of column name to dtype.
            drop_last: Leave out a last batch smaller than ``batch_size``.
            local_shuffle_buffer_size: Shuffle rows within a buffer of at least this many.
            local_shuffle_seed: Seed of that shuffle.

        Example:
            >>> import lockstep.data as ld
            >>> try:
            ...     batches = ld.range(4).iter_tf_batches(batch_size=2)
            ... except ImportError as error:  # when TensorFlow is not installed
            ...     batches = ["pip install tensorflow" in str(error)] * 2
            >>> len(list(batches))
            2
        """
        from lockstep.data import _tensorflow

        return self._batches(
            "iter_tf_batches",
            batch_size=batch_size,
            batch_format="numpy",
            drop_last=drop_last,
            local_shuffle_buffer_size=local_shuffle_buffer_size,
            local_shuffle_seed=local_shuffle_seed,
            prefetch_batches=prefetch_batches,
            convert=_tensorflow.batch_converter(dtypes),
        )

    def to_tf(
        self,
        feature_columns: str | list[str],
        label_columns: str | list[str],
        *,
        additional_columns: str | list[str] | None = None,
        prefetch_batches: int = 1,
        batch_size: int = 1,
        drop_last: bool = False,
        local_shuffle_buffer_size: int | None = None,
        local_shuffle_seed: int | None = None,
        feature_type_spec: Any = None,
        label_type_spec: Any = None,
        additional_type_spec: Any = None,
    ) -> Any:
        """A ``tf.data.Dataset`` of ``(features, labels)``, for ``keras.Model.fit``.

        A column name gives a tensor; a list of names gives a dict of tensors. Every
        iteration of the returned dataset is a new pass. TensorFlow's auto-sharding is off:
        in a training function the data is already this worker's shard.

        Example:
            >>> import lockstep.data as ld
            >>> ds = ld.from_items([{"x": float(i), "y": 2.0 * i} for i in range(4)])
            >>> try:
            ...     n = len(list(ds.to_tf("x", "y", batch_size=2)))
            ... except ImportError:  # when TensorFlow is not installed
            ...     n = 2
            >>> n
            2
        """
        from lockstep.data import _tensorflow

        _tensorflow.import_tensorflow()
        schema = self.schema()
        names = list(schema.names) if schema is not None else []
        for what, cols in (("feature_columns", feature_columns), ("label_columns", label_columns)):
            _tensorflow.check_columns(names, cols, what)
        if additional_columns:
            _tensorflow.check_columns(names, additional_columns, "additional_columns")
        batches = functools.partial(
            self.iter_batches,
            prefetch_batches=prefetch_batches,
            batch_size=batch_size,
            drop_last=drop_last,
            local_shuffle_buffer_size=local_shuffle_buffer_size,
            local_shuffle_seed=local_shuffle_seed,
        )
        return _tensorflow.tf_dataset(
            batches,
            self._sample_batch(),
            feature_columns,
            label_columns,
            additional_columns,
            (feature_type_spec, label_type_spec, additional_type_spec),
        )

    def to_torch(
        self,
        *,
        label_column: str | None = None,
        feature_columns: Sequence[str]
        | Sequence[Sequence[str]]
        | Mapping[str, Sequence[str]]
        | None = None,
        label_column_dtype: Any = None,
        feature_column_dtypes: Any = None,
        batch_size: int = 1,
        prefetch_batches: int = 1,
        drop_last: bool = False,
        local_shuffle_buffer_size: int | None = None,
        local_shuffle_seed: int | None = None,
        unsqueeze_label_tensor: bool = True,
        unsqueeze_feature_tensors: bool = True,
    ) -> Any:
        """A ``torch.utils.data.IterableDataset`` of ``(features, label)`` (the older API).

        Features are the columns ``feature_columns`` (all but the label when None) stacked
        into one ``(batch, n)`` tensor; a list of lists gives a list of tensors and a dict of
        lists a dict of tensors. The label is ``(batch, 1)`` unless
        ``unsqueeze_label_tensor=False``, and None without ``label_column``.

        Example:
            >>> import torch, lockstep.data as ld
            >>> ds = ld.from_items([{"x": float(i), "y": 2.0 * i} for i in range(4)])
            >>> torch_ds = ds.to_torch(label_column="y", feature_columns=["x"],
            ...                        label_column_dtype=torch.float, batch_size=4)
            >>> features, label = next(iter(torch_ds))
            >>> features.shape, label.shape
            (torch.Size([4, 1]), torch.Size([4, 1]))
        """
        warnings.warn(
            "to_torch is deprecated in Ray Data (lockstep keeps it for the older API). "
            "HINT: iter_torch_batches() gives dicts of tensors",
            DeprecationWarning,
            stacklevel=2,
        )
        self._check_torch_columns(label_column, feature_columns)
        from lockstep.data import _torch

        batches = functools.partial(
            self.iter_batches,
            prefetch_batches=prefetch_batches,
            batch_size=batch_size,
            drop_last=drop_last,
            local_shuffle_buffer_size=local_shuffle_buffer_size,
            local_shuffle_seed=local_shuffle_seed,
        )
        shape = (
            label_column,
            feature_columns,
            label_column_dtype,
            feature_column_dtypes,
            unsqueeze_label_tensor,
            unsqueeze_feature_tensors,
        )
        return _torch.torch_iterable(batches, shape)

    def _check_torch_columns(self, label_column: str | None, feature_columns: Any) -> None:
        schema = self.schema()
        if schema is None:
            return
        wanted = [label_column] if label_column is not None else []
        if isinstance(feature_columns, Mapping):
            wanted += [c for cols in feature_columns.values() for c in cols]
        elif feature_columns:
            for item in feature_columns:
                wanted += [item] if isinstance(item, str) else list(item)
        missing = [c for c in wanted if c not in schema.names]
        if missing:
            raise ValueError(
                f"to_torch: columns {missing} do not exist; the columns are {schema.names}. "
                "HINT: pass label_column= and feature_columns= from ds.columns()"
            )

    def _sample_batch(self) -> dict[str, Any]:
        batches = iter(
            self._batches(
                "to_tf", batch_size=1, batch_format="numpy", prefetch_batches=0, track=False
            )
        )
        try:
            return dict(next(batches))
        except StopIteration:
            raise ValueError(
                "to_tf: the dataset has no rows to take the tensor shapes from. HINT: pass "
                "feature_type_spec= and label_type_spec= (tf.TensorSpec)"
            ) from None
        finally:
            batches.close()  # type: ignore[attr-defined]

    def _batches(
        self,
        where: str,
        *,
        batch_size: int | None,
        batch_format: str,
        prefetch_batches: int,
        drop_last: bool = False,
        local_shuffle_buffer_size: int | None = None,
        local_shuffle_seed: int | None = None,
        convert: Callable[[Any], Any] | None = None,
        writable: bool = False,
        by_row: bool = False,
        track: bool = True,
    ) -> Passes[Any]:
        check_batch_format(batch_format, where)
        _check_positive(batch_size, "batch_size", where, allow_none=True)
        _check_positive(local_shuffle_buffer_size, "local_shuffle_buffer_size", where, True)
        if prefetch_batches < 0:
            raise ValueError(f"{where}: prefetch_batches must be >= 0, got {prefetch_batches}")
        if local_shuffle_buffer_size and batch_size is None:
            raise ValueError(
                f"{where}: a local shuffle needs a batch_size. HINT: pass batch_size=256"
            )

        def produce(blocks: Iterator[Any], ids: bool) -> Iterator[tuple[int, Any]]:
            shuffled = bool(local_shuffle_buffer_size)
            if shuffled and ids:
                blocks = with_row_ids(blocks)  # which rows a shuffled batch holds
            if local_shuffle_buffer_size:
                assert batch_size is not None
                tables = shuffle_batches(
                    blocks, batch_size, local_shuffle_buffer_size, local_shuffle_seed, drop_last
                )
            else:
                tables = rebatch(blocks, batch_size, drop_last)
            offset = 0
            for table in tables:
                rows = table.num_rows
                taken: Any = (offset, offset + rows)
                if shuffled and ids:
                    table, taken = take_row_ids(table)
                offset += rows
                batch = to_format(table, batch_format, writable=writable)
                # drop references before the next read: a slice keeps its whole block alive
                del table
                yield rows, (taken, convert(batch) if convert is not None else batch)
                del batch

        def start() -> Iterator[Any]:
            stats = IterStats()
            self._last_stats = stats
            blocks, tracker = self._begin_pass() if track else (self._pass_blocks(), None)
            made = functools.partial(produce, blocks, tracker is not None)
            batches = counted(prefetch(made, prefetch_batches, stats.timer), stats)
            return _handed(batches, tracker, by_row)

        return Passes(start, where)

    def _begin_pass(self) -> tuple[Iterator[Any], PassTracker | None]:
        """The blocks of a new pass, and what records the rows it hands out (None: the
        position is not kept; only a worker's dataset shard keeps one)."""
        return self._pass_blocks(), None


def _check_positive(value: int | None, name: str, where: str, allow_none: bool) -> None:
    if value is None and allow_none:
        return
    # numpy's integers too (a batch size computed with numpy), as Ray takes them
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{where}: {name} must be a positive int, got {value!r}")


def _handed(
    batches: Iterator[tuple[Any, Any]], tracker: PassTracker | None, by_row: bool
) -> Iterator[Any]:
    """The batches (or, ``by_row``, their rows), each recorded as handed out when it is."""
    try:
        for taken, batch in batches:
            if tracker is not None:
                tracker.hand(taken, by_row=by_row)
            if not by_row:
                yield batch
                continue
            for row in to_rows(batch):
                if tracker is not None:
                    tracker.advance()
                yield row
        if tracker is not None:
            tracker.ended = True
    finally:
        batches.close()  # type: ignore[attr-defined]  # stops the prefetch thread now
