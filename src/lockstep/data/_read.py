"""Creating datasets: from Python objects, from files, and ranges of integers.

In-memory data becomes Arrow tables at once (small enough to pickle to workers); files are
only listed, and parquet footers read, on the caller's side: the rows are read later, by
whoever iterates.
"""

from __future__ import annotations

import builtins
import itertools
import os
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from lockstep.data._block_control import num_blocks_arg, rebalance
from lockstep.data._context import within_block_size
from lockstep.data._convert import column_from_values, from_batch, from_rows
from lockstep.data._dataset import Dataset
from lockstep.data._file_order import FileShuffleConfig, ordered
from lockstep.data._file_sources import (
    CsvSource,
    JsonSource,
    NumpySource,
    TextSource,
    numpy_shape,
)
from lockstep.data._files import find_files
from lockstep.data._objects import objects_to_chunked_array
from lockstep.data._parquet import parquet_sources, to_filter_expression
from lockstep.data._partitioning import Partitioning
from lockstep.data._sources import RangeSource, Source, TableSource

if TYPE_CHECKING:
    import pandas as pd

Paths = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
_HIVE = Partitioning("hive")


def _blocks(table: Any, num_blocks: int | None, *, exactly: bool = False) -> list[Source]:
    """``table`` cut into ``num_blocks`` in-memory blocks of near-equal size (one by default),
    never more blocks than rows unless ``exactly`` (then the last ones may be empty)."""
    if num_blocks is None:
        return [TableSource(t) for t in within_block_size(table)]
    if not exactly:
        num_blocks = min(num_blocks, table.num_rows)
    if num_blocks <= 1:
        return [TableSource(table)]
    base, extra = divmod(table.num_rows, num_blocks)
    sources: list[Source] = []
    start = 0
    for i in builtins.range(num_blocks):
        length = base + (1 if i < extra else 0)
        sources.append(TableSource(table.slice(start, length)))
        start += length
    return sources


def from_items(
    items: Iterable[Any],
    *,
    override_num_blocks: int | None = None,
    parallelism: int | None = None,
) -> Dataset:
    """A dataset of Python values: dicts become rows; anything else a row ``{"item": value}``.

    Args:
        items: The rows.
        override_num_blocks: How many blocks to cut the rows into (one by default).
        parallelism: Ray's deprecated name of ``override_num_blocks`` (a warning).

    Example:
        >>> from_items([{"x": 1, "y": "a"}, {"x": 2, "y": "b"}]).take(1)
        [{'x': 1, 'y': 'a'}]
    """
    rows = list(items)
    if rows and not all(isinstance(r, dict) for r in rows):
        rows = [{"item": r} for r in rows]
    num_blocks = num_blocks_arg(override_num_blocks, parallelism, "from_items")
    return Dataset(_blocks(from_rows(rows, "from_items"), num_blocks))


def from_pandas(
    dfs: pd.DataFrame | Sequence[pd.DataFrame],
    *,
    override_num_blocks: int | None = None,
    parallelism: int | None = None,
) -> Dataset:
    """A dataset of one or more pandas DataFrames, one block each (the index is dropped).

    Example:
        >>> import pandas as pd
        >>> from_pandas(pd.DataFrame({"x": [1, 2, 3]})).count()
        3
    """
    frames: list[Any] = [dfs] if type(dfs).__name__ == "DataFrame" else list(dfs)
    override_num_blocks = num_blocks_arg(override_num_blocks, parallelism, "from_pandas")
    if override_num_blocks is not None:
        import pandas as pd

        whole = from_batch(pd.concat(frames), "from_pandas")
        # as Ray repartitions: exactly that many blocks, empty ones if rows are fewer
        return Dataset(_blocks(whole, override_num_blocks, exactly=True))
    return Dataset([TableSource(from_batch(f, "from_pandas")) for f in frames])


def from_numpy(
    ndarrays: np.ndarray[Any, Any] | Sequence[np.ndarray[Any, Any]],
    *,
    override_num_blocks: int | None = None,
    parallelism: int | None = None,
) -> Dataset:
    """A dataset with column ``data``: one row per entry along each array's first axis.

    Example:
        >>> import numpy as np
        >>> from_numpy(np.zeros((4, 2))).take(1)
        [{'data': array([0., 0.])}]
    """
    arrays = [ndarrays] if not isinstance(ndarrays, list | tuple) else list(ndarrays)
    for a in arrays:
        if not isinstance(a, np.ndarray) or a.ndim == 0:
            raise ValueError(
                f"from_numpy takes arrays of one or more axes, got {type(a).__name__}. "
                "HINT: from_numpy(np.asarray(values))"
            )
    return rebalance(
        num_blocks_arg(override_num_blocks, parallelism, "from_numpy"),
        Dataset([TableSource(pa.table({"data": column_from_values(a)})) for a in arrays]),
    )


def from_arrow(
    tables: Any, *, override_num_blocks: int | None = None, parallelism: int | None = None
) -> Dataset:
    """A dataset of one or more ``pyarrow.Table`` (or RecordBatch), one block each.

    Example:
        >>> import pyarrow as pa
        >>> from_arrow(pa.table({"x": [1, 2]})).columns()
        ['x']
    """
    items = [tables] if isinstance(tables, pa.Table | pa.RecordBatch) else list(tables)
    return rebalance(
        num_blocks_arg(override_num_blocks, parallelism, "from_arrow"),
        Dataset([TableSource(from_batch(t, "from_arrow")) for t in items]),
    )


def from_blocks(blocks: Sequence[Any]) -> Dataset:
    """A dataset of blocks: ``pyarrow.Table`` or pandas DataFrames, one block each.

    Example:
        >>> import pyarrow as pa
        >>> ds = from_blocks([pa.table({"x": [1, 2]}), pa.table({"x": [3]})])
        >>> ds.num_blocks(), ds.count()
        (2, 3)
    """
    if not isinstance(blocks, list | tuple) or not blocks:
        raise ValueError(
            f"from_blocks takes a non-empty list of tables or DataFrames, got {blocks!r}. "
            "HINT: from_blocks([pyarrow_table, ...])"
        )
    return Dataset([TableSource(from_batch(b, "from_blocks")) for b in blocks])


def from_torch(
    dataset: Any, *, override_num_blocks: int | None = None, parallelism: int | None = None
) -> Dataset:
    """A dataset of a torch ``Dataset``'s samples, each as a row ``{"item": sample}``.

    The samples are read now, in this process (as Ray does), and come back as they were
    (a ``(tensor, label)`` tuple stays one). Each tensor is stored as a copy of just its own
    values: a sample of a ``TensorDataset`` is a view, and pickling a view would store the
    whole tensor it views.

    Example:
        >>> import torch
        >>> samples = torch.utils.data.TensorDataset(torch.arange(3))
        >>> from_torch(samples).count()
        3
    """
    if hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__"):
        samples = (dataset[i] for i in builtins.range(len(dataset)))
    else:
        samples = iter(dataset)
    column = objects_to_chunked_array(_own_values(s) for s in samples)
    return rebalance(
        num_blocks_arg(override_num_blocks, parallelism, "from_torch"),
        Dataset([TableSource(pa.table({"item": column}))]),
    )


def _own_values(sample: Any) -> Any:
    """``sample`` with each tensor in it replaced by a compact copy of its own values."""
    if isinstance(sample, tuple | list):
        return type(sample)(_own_values(v) for v in sample)
    if isinstance(sample, dict):
        return {k: _own_values(v) for k, v in sample.items()}
    if hasattr(sample, "detach") and hasattr(sample, "clone"):  # a torch tensor
        return sample.detach().clone(memory_format=_contiguous())
    return sample


def _contiguous() -> Any:
    import torch

    return torch.contiguous_format


def from_tf(
    dataset: Any, *, override_num_blocks: int | None = None, parallelism: int | None = None
) -> Dataset:
    """A dataset of a ``tf.data.Dataset``'s elements, read now, in this process (as Ray).

    An element that is a dict of tensors becomes a row; anything else (a tensor, a
    ``(features, label)`` tuple) becomes a row ``{"item": element}``, as numpy values.

    Example:
        >>> class Elements:  # stands for tf.data.Dataset.from_tensor_slices({"x": [1, 2]})
        ...     def as_numpy_iterator(self):
        ...         return iter([{"x": 1}, {"x": 2}])
        >>> from_tf(Elements()).take_all()
        [{'x': 1}, {'x': 2}]
    """
    return from_items(list(dataset.as_numpy_iterator()))


def from_huggingface(
    dataset: Any, *, override_num_blocks: int | None = None, parallelism: int | None = None
) -> Dataset:
    """A dataset of a Hugging Face ``datasets.Dataset`` (or ``IterableDataset``).

    A ``Dataset`` already holds an Arrow table: its rows are taken as they are, without a
    copy per row (a selection or shuffle of it is applied first, as Hugging Face does). An
    ``IterableDataset`` is read now, batch by batch.

    Args:
        dataset: A ``datasets.Dataset`` or ``datasets.IterableDataset`` (one split).
        override_num_blocks: How many blocks to cut the rows into (one by default).

    Example:
        >>> import datasets
        >>> hf = datasets.Dataset.from_dict({"text": ["a", "b", "c"], "label": [0, 1, 0]})
        >>> from_huggingface(hf).take(2)
        [{'text': 'a', 'label': 0}, {'text': 'b', 'label': 1}]
    """
    kind = type(dataset).__name__
    if kind == "DatasetDict" or kind == "IterableDatasetDict":
        raise ValueError(
            f"from_huggingface takes one split, got a {kind} of {list(dataset)}. "
            'HINT: from_huggingface(hf_dataset["train"])'
        )
    if kind == "IterableDataset":
        tables = list(dataset.with_format("arrow").iter(batch_size=65536))
        table = pa.concat_tables(tables) if tables else from_rows([], "from_huggingface")
    elif kind == "Dataset" and hasattr(dataset, "with_format"):
        table = dataset.with_format("arrow")[:]
    else:
        raise ValueError(
            f"from_huggingface takes a datasets.Dataset or IterableDataset, got {kind}. "
            "HINT: datasets.load_dataset(name, split='train')"
        )
    return Dataset(
        _blocks(table, num_blocks_arg(override_num_blocks, parallelism, "from_huggingface"))
    )


def range_tensor(
    n: int,
    *,
    shape: tuple[int, ...] = (1,),
    override_num_blocks: int | None = None,
    parallelism: int | None = None,
) -> Dataset:
    """A dataset of ``n`` arrays of ``shape`` in column ``data``, row ``i`` filled with ``i``.

    Example:
        >>> range_tensor(3, shape=(2,)).take(2)
        [{'data': array([0, 0])}, {'data': array([1, 1])}]
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"range_tensor(n) takes a non-negative int, got {n!r}")
    if not all(isinstance(d, int) and d >= 0 for d in shape):
        raise ValueError(f"range_tensor: shape must be a tuple of ints, got {shape!r}")
    blocks = _range_blocks(n, num_blocks_arg(override_num_blocks, parallelism, "range_tensor"))
    bounds = [n * i // blocks for i in builtins.range(blocks + 1)]
    return Dataset([RangeSource(a, b, tuple(shape)) for a, b in itertools.pairwise(bounds)])


def range(
    n: int, *, override_num_blocks: int | None = None, parallelism: int | None = None
) -> Dataset:
    """A dataset of the integers ``0 .. n - 1`` in column ``id``, generated when read.

    Example:
        >>> range(3).take_all()
        [{'id': 0}, {'id': 1}, {'id': 2}]
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"range(n) takes a non-negative int, got {n!r}")
    blocks = _range_blocks(n, num_blocks_arg(override_num_blocks, parallelism, "range"))
    bounds = [n * i // blocks for i in builtins.range(blocks + 1)]
    return Dataset([RangeSource(a, b) for a, b in itertools.pairwise(bounds)])


def _range_blocks(n: int, num_blocks: int | None) -> int:
    """Blocks of a range: as asked (one by default), never more than rows, at least one."""
    return max(1, min(num_blocks or 1, n))


def read_parquet(
    paths: Paths,
    *,
    filesystem: Any = None,
    columns: Sequence[str] | None = None,
    filter: Any = None,
    file_extensions: Sequence[str] | None = ("parquet",),
    partitioning: Partitioning | None = _HIVE,
    partition_filter: Callable[[dict[str, Any]], bool] | None = None,
    include_paths: bool = False,
    shuffle: str | FileShuffleConfig | None = None,
    batch_size: int | None = None,
    dataset_kwargs: dict[str, Any] | None = None,
    concurrency: int | None = None,
    override_num_blocks: int | None = None,
    parallelism: int | None = None,
) -> Dataset:
    """A dataset of parquet files: local paths, globs, directories or fsspec URLs.

    Only footers are read here (row counts, schema), so splitting across workers reads no
    data, and each worker later reads only its own files and row groups. ``columns`` and
    ``filter`` are given to pyarrow, which reads only those columns and skips row groups
    whose statistics rule the filter out.

    Args:
        paths: A path, glob, directory or URL (``s3://``, ``gs://``, ``memory://``), or a list.
        filesystem: A pyarrow or fsspec filesystem the paths are on.
        columns: The columns to read (all by default).
        filter: A ``pyarrow.compute`` expression, or a filter list ``[("x", ">", 3)]``;
            on partition columns it leaves out the files that cannot match, unread.
        file_extensions: Files found in directories must end with one of these.
        partitioning: Hive partitioning (``key=value`` directories, the default): their
            values become columns (strings unless ``Partitioning(field_types=...)``).
            None reads the files' own columns only.
        partition_filter: A function of a file's partition values (a dict of strings)
            that keeps the file when true; or ``PathPartitionFilter.of(fn)``.
        include_paths: Add each row's file in column ``path``.
        shuffle: ``"files"`` reads the files in a random order; a
            :class:`FileShuffleConfig` with a seed in the same order every time, or in a
            new one at every pass (``reseed_after_execution=True``).
        batch_size: Ray's rows per read batch: accepted; row groups are read one at a
            time, column by column (the least memory).
        dataset_kwargs: Ray's ``pyarrow.dataset`` options: accepted (``partitioning``
            is refused, as in Ray: use ``partitioning=``).
        concurrency: Ray's number of read tasks: accepted, no effect (a worker reads its
            own part).
        override_num_blocks: The number of blocks (cut at row groups, reading nothing).
        parallelism: Ray's deprecated name of ``override_num_blocks`` (a warning).

    Example:
        >>> import os, tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     range(10).write_parquet(d)
        ...     ds = read_parquet(d, columns=["id"], filter=[("id", ">=", 7)])
        ...     ds.take_all()
        [{'id': 7}, {'id': 8}, {'id': 9}]
    """
    _check_dataset_kwargs(dataset_kwargs)
    files = find_files(
        paths, filesystem=filesystem, extensions=file_extensions, where="read_parquet"
    )
    if shuffle is not None and shuffle != "files":
        ordered([], shuffle, "read_parquet")  # checks it before any footer is read
    expression = to_filter_expression(filter)
    sources = parquet_sources(
        files,
        list(columns) if columns is not None else None,
        expression,
        partitioning=partitioning,
        partition_filter=partition_filter,
        include_paths=include_paths,
    )
    return rebalance(
        num_blocks_arg(override_num_blocks, parallelism, "read_parquet"),
        Dataset(ordered(sources, shuffle, "read_parquet")),
    )


def _check_dataset_kwargs(dataset_kwargs: Any) -> None:
    if dataset_kwargs is not None and "partitioning" in dataset_kwargs:
        raise ValueError(
            "The 'partitioning' parameter isn't supported in 'dataset_kwargs'. Use the "
            "top-level 'partitioning' parameter instead. HINT: "
            "read_parquet(path, partitioning=Partitioning('hive'))"
        )


def read_csv(
    paths: Paths,
    *,
    filesystem: Any = None,
    file_extensions: Sequence[str] | None = ("csv",),
    read_options: Any = None,
    parse_options: Any = None,
    convert_options: Any = None,
    override_num_blocks: int | None = None,
    parallelism: int | None = None,
) -> Dataset:
    """A dataset of CSV files, parsed block by block by ``pyarrow.csv``.

    Args:
        paths: A path, glob, directory or URL, or a list of them.
        filesystem: A pyarrow or fsspec filesystem the paths are on.
        file_extensions: Files found in directories must end with one of these.
        read_options: A ``pyarrow.csv.ReadOptions``.
        parse_options: A ``pyarrow.csv.ParseOptions`` (delimiter, quoting).
        convert_options: A ``pyarrow.csv.ConvertOptions`` (column types, nulls).
        override_num_blocks: The number of blocks (see ``lockstep.data.range``).
        parallelism: Ray's deprecated name of ``override_num_blocks`` (a warning).

    Example:
        >>> import os, tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     with open(os.path.join(d, "a.csv"), "w") as f:
        ...         _ = f.write("x,y\\n1,a\\n2,b\\n")
        ...     read_csv(d).take_all()
        [{'x': 1, 'y': 'a'}, {'x': 2, 'y': 'b'}]
    """
    files = find_files(paths, filesystem=filesystem, extensions=file_extensions, where="read_csv")
    options = {
        k: v
        for k, v in (
            ("read_options", read_options),
            ("parse_options", parse_options),
            ("convert_options", convert_options),
        )
        if v is not None
    }
    return rebalance(
        num_blocks_arg(override_num_blocks, parallelism, "read_csv"),
        Dataset(
            [CsvSource(files.filesystem, p, files.display(p), options or None) for p in files.paths]
        ),
    )


def read_json(
    paths: Paths,
    *,
    filesystem: Any = None,
    file_extensions: Sequence[str] | None = ("json", "jsonl"),
    read_options: Any = None,
    parse_options: Any = None,
    lines: bool = False,
    arrow_open_stream_args: dict[str, Any] | None = None,
    override_num_blocks: int | None = None,
    parallelism: int | None = None,
) -> Dataset:
    """A dataset of JSON-lines files (one object per line), or files holding one JSON array.

    Args:
        paths: A path, glob, directory or URL, or a list of them.
        filesystem: A pyarrow or fsspec filesystem the paths are on.
        file_extensions: Files found in directories must end with one of these.
        read_options: A ``pyarrow.json.ReadOptions``.
        parse_options: A ``pyarrow.json.ParseOptions`` (e.g. an explicit schema).
        lines: Read every file as JSON lines (as Ray's ``lines=True``); otherwise a file
            holding one JSON array is recognised too.
        arrow_open_stream_args: Options of ``open_input_stream`` (e.g.
            ``{"compression": "gzip"}``; compression is told from the file name otherwise).
        override_num_blocks: The number of blocks (see ``lockstep.data.range``).
        parallelism: Ray's deprecated name of ``override_num_blocks`` (a warning).

    Example:
        >>> import os, tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     with open(os.path.join(d, "a.jsonl"), "w") as f:
        ...         _ = f.write('{"x": 1}\\n{"x": 2}\\n')
        ...     read_json(d).take_all()
        [{'x': 1}, {'x': 2}]
    """
    files = find_files(paths, filesystem=filesystem, extensions=file_extensions, where="read_json")
    options = {
        k: v for k, v in (("read_options", read_options), ("parse_options", parse_options)) if v
    }
    return rebalance(
        num_blocks_arg(override_num_blocks, parallelism, "read_json"),
        Dataset(
            [
                JsonSource(
                    files.filesystem,
                    p,
                    files.display(p),
                    options or None,
                    lines,
                    arrow_open_stream_args,
                )
                for p in files.paths
            ]
        ),
    )


def read_text(
    paths: Paths,
    *,
    encoding: str = "utf-8",
    drop_empty_lines: bool = False,
    filesystem: Any = None,
    file_extensions: Sequence[str] | None = None,
    override_num_blocks: int | None = None,
    parallelism: int | None = None,
) -> Dataset:
    """A dataset of text files, one row per line in column ``text``.

    Example:
        >>> import os, tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     with open(os.path.join(d, "a.txt"), "w") as f:
        ...         _ = f.write("hello\\nworld\\n")
        ...     [row["text"] for row in read_text(d).take_all()]
        ['hello', 'world']
    """
    files = find_files(paths, filesystem=filesystem, extensions=file_extensions, where="read_text")
    return rebalance(
        num_blocks_arg(override_num_blocks, parallelism, "read_text"),
        Dataset(
            [
                TextSource(files.filesystem, p, files.display(p), encoding, drop_empty_lines)
                for p in files.paths
            ]
        ),
    )


def read_numpy(
    paths: Paths,
    *,
    filesystem: Any = None,
    file_extensions: Sequence[str] | None = ("npy",),
    override_num_blocks: int | None = None,
    parallelism: int | None = None,
) -> Dataset:
    """A dataset of ``.npy`` files: column ``data``, one row per entry along the first axis.

    Example:
        >>> import os, tempfile
        >>> import numpy as np
        >>> with tempfile.TemporaryDirectory() as d:
        ...     np.save(os.path.join(d, "a.npy"), np.arange(6).reshape(3, 2))
        ...     read_numpy(d).take(1)
        [{'data': array([0, 1])}]
    """
    files = find_files(paths, filesystem=filesystem, extensions=file_extensions, where="read_numpy")
    sources: list[Source] = []
    for p in files.paths:
        shape = numpy_shape(files.filesystem, p)
        if not shape:
            raise ValueError(
                f"read_numpy: {files.display(p)} holds a single value (0-d array), not rows. "
                "HINT: save arrays with at least one axis"
            )
        sources.append(NumpySource(files.filesystem, p, files.display(p), shape))
    return rebalance(
        num_blocks_arg(override_num_blocks, parallelism, "read_numpy"), Dataset(sources)
    )
