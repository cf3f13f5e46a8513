"""Writing a dataset's rows to files, streaming, with Ray's write options.

By default each block becomes one file. ``min_rows_per_file`` keeps adding blocks to a file
until it holds that many rows; ``max_rows_per_file`` starts a new file when one is full;
``partition_cols`` writes hive directories (``col=value/``) without those columns in the
files, as Ray does. ``mode`` says what to do when the directory exists: ``append`` (Ray's
default), ``overwrite`` (its contents are deleted first), ``ignore`` (nothing is written)
or ``error``. Only options the underlying writer takes reach it: any other keyword is a
TypeError naming lockstep's function.
"""

from __future__ import annotations

import enum
import inspect
import os
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lockstep.data._convert import to_pandas
from lockstep.data._files import output_filesystem
from lockstep.data._partitioning import NULL_VALUE
from lockstep.data._sources import Source


class SaveMode(str, enum.Enum):
    """What a write does when its directory exists (Ray's ``SaveMode``).

    Example:
        >>> from lockstep.data import SaveMode
        >>> SaveMode("overwrite") is SaveMode.OVERWRITE
        True
    """

    APPEND = "append"
    OVERWRITE = "overwrite"
    IGNORE = "ignore"
    ERROR = "error"


class FilenameProvider:
    """Names the files a write creates (Ray's ``FilenameProvider``); subclass and override.

    Example:
        >>> import os, tempfile, lockstep.data as ld
        >>> from lockstep.data.datasource import FilenameProvider
        >>> class Numbered(FilenameProvider):
        ...     def get_filename_for_block(self, block, write_uuid, task_index, block_index):
        ...         return f"part-{block_index}.parquet"
        >>> with tempfile.TemporaryDirectory() as d:
        ...     ld.range(4, override_num_blocks=2).write_parquet(d, filename_provider=Numbered())
        ...     sorted(os.listdir(d))
        ['part-0.parquet', 'part-1.parquet']
    """

    def get_filename_for_block(
        self, block: Any, write_uuid: str, task_index: int, block_index: int
    ) -> str:
        """The name of the file that starts with ``block``."""
        raise NotImplementedError


@dataclass
class WriteRequest:
    """What one ``write_*`` call asked for, checked."""

    kind: str
    options: dict[str, Any]
    partition_cols: list[str] = field(default_factory=list)
    min_rows_per_file: int | None = None
    max_rows_per_file: int | None = None
    mode: SaveMode = SaveMode.APPEND
    filename_provider: FilenameProvider | None = None
    partitioning_flavor: str | None = "hive"


_FLAVORS = ("hive", None, "filename")


def _writer_parameters(kind: str) -> set[str]:
    if kind == "parquet":
        import pyarrow.parquet as pq

        names = set(inspect.signature(pq.ParquetWriter.__init__).parameters)
        return (names - {"self", "where", "options"}) | {"row_group_size"}
    if kind == "csv":
        return {"write_options", "memory_pool"}
    import pandas as pd

    names = set(inspect.signature(pd.DataFrame.to_json).parameters)
    return names - {"self", "path_or_buf", "mode", "storage_options"}


# Ray's arguments with no meaning for a local, in-process write: accepted, not passed on.
_RAY_ONLY = {
    "try_create_dir",
    "arrow_open_stream_args",
    "ray_remote_args",
    "concurrency",
    "num_rows_per_file",
}


def make_request(
    kind: str,
    where: str,
    options: Mapping[str, Any],
    *,
    options_fn: Callable[[], Mapping[str, Any]] | None = None,
    partition_cols: Sequence[str] | None = None,
    min_rows_per_file: int | None = None,
    max_rows_per_file: int | None = None,
    mode: str | SaveMode = SaveMode.APPEND,
    filename_provider: FilenameProvider | None = None,
    partitioning_flavor: str | None = "hive",
) -> WriteRequest:
    """The checked request; a TypeError for a keyword the writer does not take.

    ``options_fn``'s options override ``options`` with the same name, as in Ray.
    """
    given = {k: v for k, v in options.items() if k not in _RAY_ONLY}
    if "num_rows_per_file" in options and min_rows_per_file is None:
        min_rows_per_file = options["num_rows_per_file"]  # Ray's older name
    if partitioning_flavor not in _FLAVORS:
        raise ValueError(
            f"{where}: partitioning_flavor must be 'hive', None or 'filename', got "
            f"{partitioning_flavor!r}. HINT: 'hive' writes col=value directories"
        )
    merged = {**given, **(dict(options_fn()) if options_fn is not None else {})}
    unknown = sorted(set(merged) - _writer_parameters(kind))
    if unknown:
        raise TypeError(
            f"{where}() got unexpected keyword arguments {unknown}. HINT: lockstep passes "
            f"only the options its {kind} writer takes; see help(Dataset.{where})"
        )
    try:
        save_mode = SaveMode(mode)
    except ValueError:
        raise ValueError(
            f"{where}: unknown mode {mode!r}. HINT: one of "
            f"{[m.value for m in SaveMode]} (Ray's SaveMode)"
        ) from None
    for name, value in (
        ("min_rows_per_file", min_rows_per_file),
        ("max_rows_per_file", max_rows_per_file),
    ):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be a positive integer. HINT: {where} got {value!r}")
    if min_rows_per_file and max_rows_per_file and min_rows_per_file > max_rows_per_file:
        raise ValueError(
            f"min_rows_per_file ({min_rows_per_file}) cannot be greater than "
            f"max_rows_per_file ({max_rows_per_file}). HINT: {where}: min <= max"
        )
    return WriteRequest(
        kind,
        merged,
        list(partition_cols or []),
        min_rows_per_file,
        max_rows_per_file,
        save_mode,
        filename_provider,
        partitioning_flavor,
    )


def write_blocks(
    sources: list[Source],
    path: str | os.PathLike[str],
    *,
    filesystem: Any,
    request: WriteRequest,
) -> list[str]:
    """Write the sources' rows under ``path`` as ``request`` says; return the files written."""
    where = f"write_{request.kind}"
    fs, directory = output_filesystem(path, filesystem, where, create=False)
    if not _prepare(fs, directory, request.mode, where):
        return []
    files = _OpenFiles(fs, directory.rstrip("/"), request)
    try:
        for source in sources:
            for block in source.read():
                if block.num_rows:
                    files.add(block)
            files.end_of_block()
    finally:
        files.close_all()
    return files.written


def _prepare(fs: Any, directory: str, mode: SaveMode, where: str) -> bool:
    """Apply ``mode`` to an existing directory; False when nothing is to be written."""
    import pyarrow.fs as pafs

    exists = fs.get_file_info(directory).type != pafs.FileType.NotFound
    if exists and mode is SaveMode.ERROR:
        raise ValueError(
            f"{where}: {directory!r} already exists and mode='error'. HINT: mode='append', "
            "'overwrite' or 'ignore'"
        )
    if exists and mode is SaveMode.IGNORE:
        return False
    if exists and mode is SaveMode.OVERWRITE:
        fs.delete_dir_contents(directory)
    return True  # the directory is made with its first file: no rows, no directory


class _OpenFiles:
    """The files being written, one per partition directory at a time."""

    def __init__(self, fs: Any, directory: str, request: WriteRequest) -> None:
        self.fs, self.directory, self.request = fs, directory, request
        self.write_id = uuid.uuid4().hex[:12]
        self.open: dict[str, _File] = {}
        self.written: list[str] = []
        self.count = 0

    def add(self, block: Any) -> None:
        for subdir, table in _partitions(block, self.request.partition_cols):
            while table.num_rows:
                file = self.open.get(subdir) or self._new(subdir, table)
                room = self.request.max_rows_per_file
                take = table.num_rows if room is None else min(table.num_rows, room - file.rows)
                file.write(table.slice(0, take))
                table = table.slice(take)
                if room is not None and file.rows >= room:
                    self._close(subdir)

    def end_of_block(self) -> None:
        """A block ends: its files close unless they still need rows (min_rows_per_file)."""
        least = self.request.min_rows_per_file
        for subdir in list(self.open):
            if least is None or self.open[subdir].rows >= least:
                self._close(subdir)

    def close_all(self) -> None:
        for subdir in list(self.open):
            self._close(subdir)

    def _new(self, subdir: str, table: Any) -> _File:
        provider = self.request.filename_provider
        if provider is not None:
            name = provider.get_filename_for_block(table, self.write_id, 0, self.count)
        else:
            name = f"{self.write_id}_{self.count:06d}.{self.request.kind}"
        self.count += 1
        subdir, name = _placed(subdir, name, self.request.partitioning_flavor)
        parent = f"{self.directory}/{subdir}" if subdir else self.directory
        self.fs.create_dir(parent, recursive=True)
        file = _File(self.fs, f"{parent}/{name}", table.schema, self.request)
        self.open[subdir] = file
        return file

    def _close(self, subdir: str) -> None:
        file = self.open.pop(subdir)
        file.close()
        self.written.append(file.path)


def _placed(subdir: str, name: str, flavor: str | None) -> tuple[str, str]:
    """Where a partition's file goes for pyarrow's partitioning ``flavor``: ``a=1/b=x/``
    directories (hive), ``1/x/`` directories (None), or ``1_x_name`` files (filename)."""
    if not subdir or flavor == "hive":
        return subdir, name
    values = [part.split("=", 1)[1] for part in subdir.split("/")]
    if flavor is None:
        return "/".join(values), name
    return "", "_".join([*values, name])


def _partitions(block: Any, columns: list[str]) -> Iterator[tuple[str, Any]]:
    """``(hive sub-directory, rows)`` per distinct value of ``columns``, without them."""
    if not columns:
        yield "", block
        return
    missing = [c for c in columns if c not in block.column_names]
    if missing:
        raise ValueError(
            f"write: partition_cols {missing} are not columns of the dataset "
            f"{block.column_names}. HINT: partition by existing columns"
        )
    import pyarrow.compute as pc

    keys = block.select(columns).group_by(columns, use_threads=False).aggregate([]).to_pylist()
    for key in keys:
        mask = None
        for name, value in key.items():
            match = pc.is_null(block[name]) if value is None else pc.equal(block[name], value)
            mask = match if mask is None else pc.and_(mask, match)
        rows = block.filter(mask).drop_columns(columns)
        subdir = "/".join(
            f"{name}={NULL_VALUE if value is None else value}" for name, value in key.items()
        )
        yield subdir, rows


class _File:
    """One output file, open for writing tables of one schema."""

    def __init__(self, fs: Any, path: str, schema: Any, request: WriteRequest) -> None:
        self.path, self.schema, self.kind, self.rows = path, schema, request.kind, 0
        self.stream = fs.open_output_stream(path)
        options = dict(request.options)
        self.write_options: dict[str, Any] = {}
        if self.kind == "parquet":
            import pyarrow.parquet as pq

            if "row_group_size" in options:  # an option of write_table, as pq.write_table's
                self.write_options["row_group_size"] = options.pop("row_group_size")
            self.schema = options.pop("schema", None) or schema  # Ray's schema=: cast to it
            self.writer: Any = pq.ParquetWriter(self.stream, self.schema, **options)
        elif self.kind == "csv":
            import pyarrow.csv as pcsv

            self.writer = pcsv.CSVWriter(self.stream, schema, **options)
        else:
            self.writer = None
            self.json_options = {"orient": "records", "lines": True, **options}

    def write(self, table: Any) -> None:
        if table.schema != self.schema:
            table = table.cast(self.schema)  # a later block may infer a wider type
        self.rows += table.num_rows
        if self.writer is not None:
            self.writer.write_table(table, **self.write_options)
        else:
            text = to_pandas(table).to_json(**self.json_options)
            self.stream.write(text.rstrip("\n").encode("utf-8") + b"\n")

    def close(self) -> None:
        try:
            if self.writer is not None:
                self.writer.close()
        finally:
            self.stream.close()
