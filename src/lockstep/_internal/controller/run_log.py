"""The run's human-readable record: params.json, result.json (JSON lines) and progress.csv.

A row survives the driver once :meth:`RunLog.append` returns: locally its result.json line
is one ``os.write`` on a file opened with ``O_APPEND`` (no buffer in this process: the line
is in the kernel's page cache, which a killed driver cannot lose, and it cannot be torn),
and fsync'd when asked; on an object store, which cannot append, it goes the same way to a
local journal kept until the row is uploaded, which the next driver of the run reads back
if this one dies first.

progress.csv is the same rows as a table, derived from result.json: its lines follow in
batches (:meth:`RunLog.catch_up`, which the driver calls when a later moment comes, off
the workers' way), and whole at every flush and at the end; the next driver of a run
rebuilds it from result.json, so a killed driver's last lines are not lost either.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from lockstep._core import flags, storage
from lockstep._core.json_text import readable_json
from lockstep._core.mappings import flatten_dict
from lockstep._core.result import iter_result_lines, parse_result_lines, read_results
from lockstep._core.storage import open_append, write_all


class _CsvLines:
    """progress.csv's lines of flat rows, by the csv module's rules, with one reused buffer
    (``csv.DictWriter`` checks every key of every row in Python)."""

    def __init__(self) -> None:
        self._out = io.StringIO()
        self._writer = csv.writer(self._out)

    def __call__(self, flat: list[dict[str, Any]], columns: list[str]) -> str:
        self._out.seek(0)
        self._out.truncate()
        self._writer.writerows([row.get(c) for c in columns] for row in flat)
        return self._out.getvalue()


class RunLog:
    """Appends one line per step to result.json and progress.csv.

    Locally each result.json line is written as it comes, progress.csv's at
    :meth:`catch_up`. Elsewhere (an object store cannot append) the lines go to the local
    :class:`Journal` and both files are rewritten at :meth:`flush` (on each checkpoint
    commit and at the end of the run).
    """

    def __init__(self, run_dir: storage.StorageDir, *, scan: bool = True) -> None:
        """``scan=False``: the caller reconciles at once, which reads every row
        (locally, the rows are not read twice)."""
        self._run_dir = run_dir
        local = isinstance(run_dir, storage.LocalDir)
        self._journal = None if local else Journal.of(run_dir)
        if self._journal is None:
            # Locally the rows stay in result.json: only the last is read into memory (and
            # every row's columns), so opening a long run does not hold all its rows.
            last, self._columns = _last_row_and_columns(run_dir) if scan else (None, [])
            self._rows = [last] if last is not None else []
        else:
            self._rows = _merged(read_results(run_dir), self._journal.rows())
            self._columns = _columns(self._rows)
        self._known = set(self._columns)
        self._csv_lines = _CsvLines()
        self._behind: list[dict[str, Any]] = []  # flat rows progress.csv has not got yet
        self._json: int | None = None  # file descriptors, open while the run appends
        self._csv: int | None = None
        # Locally, once the files are whole (reconcile(), or the first append), every row is
        # appended to them as it comes and only the last is kept in memory: a long run's
        # rows would grow the driver without bound.
        self._rows_on_disk = False
        # Where result.json's rows taken so far end: what follows, others appended (the
        # workers ending their steps themselves, see execution.step_page), read with
        # ``_reading`` from there; ``_unread`` holds what was read of it, not taken yet.
        self._end = 0
        self._reading: int | None = None
        self._unread = b""

    def reconcile(self, keep: Callable[[dict[str, Any]], bool]) -> int:
        """Keep only the rows ``keep`` accepts and write both files whole from them.

        Run when a driver opens the run: whatever the last one left (a line cut short, a
        progress.csv behind result.json, rows still in the journal, rows of checkpoints
        never committed) becomes one consistent record. Returns how many rows were dropped.
        """
        if self._journal is None:
            return self._rewrite_local(keep)
        before = len(self._rows)
        self._rows = [row for row in self._rows if keep(row)]
        self._rows_on_disk = False
        self._columns = _columns(self._rows)
        self._known = set(self._columns)
        if self._rows or self._run_dir.exists(storage.RESULTS_FILE):
            self._write_whole()
        self._journal.clear()
        return before - len(self._rows)

    @property
    def last_row(self) -> dict[str, Any] | None:
        return self._rows[-1] if self._rows else None

    def write_params(self, params: Mapping[str, Any]) -> None:
        data = readable_json(params, sort_keys=True, default=repr)
        self._run_dir.write_atomic(storage.PARAMS_FILE, data)

    def append(self, row: dict[str, Any], *, sync: bool = True) -> None:
        """Add one line. When this returns its result.json line is in the operating
        system's hands, which a killed driver cannot lose; with ``sync`` also on disk
        (fsync), which a crash of the machine cannot lose either. Its progress.csv line
        waits for :meth:`catch_up`."""
        line = json.dumps(row) + "\n"  # first: a row JSON cannot write is not kept
        if self._journal is not None:
            self._rows.append(row)
            self._journal.append(line, sync=sync)
            return
        if not self._rows_on_disk:
            if not self._run_dir.exists(storage.RESULTS_FILE):
                self._start_files(row, sync=sync)  # a new run's first line
                return
            self._rewrite_local(sync=sync)  # opened without reconcile(): both files whole
        if self._json is None:
            self._open_files()  # the files hold every row
        fd = self._json
        assert fd is not None
        assert not self._unread, "the rows others appended are taken first"
        self._rows[:] = [row]
        data = line.encode()
        write_all(fd, data)
        self._end += len(data)
        if sync:
            # result.json is the record; progress.csv is rebuilt from it by the next driver.
            os.fsync(fd)
        self._behind.append(row)

    def shared_path(self) -> str | None:
        """result.json's path, where other processes may append rows to it now (the file
        is open here: see :meth:`take_appended`); None where they may not."""
        if self._json is None or self._journal is not None:
            return None
        return os.path.abspath(self._run_dir.join(storage.RESULTS_FILE))

    def take_appended(self) -> dict[str, Any] | None:
        """The next row another process appended to result.json, taken as one appended
        here (the last row, progress.csv's next line); None if there is none."""
        line = self._next_appended()
        if line is None:
            return None
        row: dict[str, Any] = json.loads(line)
        self._rows[:] = [row]
        self._behind.append(row)
        return row

    def _next_appended(self) -> bytes | None:
        while True:
            newline = self._unread.find(b"\n")
            if newline >= 0:
                line, self._unread = self._unread[:newline], self._unread[newline + 1 :]
                self._end += newline + 1
                return line
            if self._reading is None:
                if self._json is None:
                    return None
                path = self._run_dir.join(storage.RESULTS_FILE)
                self._reading = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            more = os.pread(self._reading, 1 << 16, self._end + len(self._unread))
            if not more:
                return None  # (a line cut short stays unread)
            self._unread += more

    @property
    def behind(self) -> bool:
        """Whether progress.csv lacks lines result.json has."""
        return bool(self._behind)

    def catch_up(self) -> None:
        """Write the progress.csv lines of the rows appended since the last call, in one
        write (the whole file again where a row brings a new column)."""
        if not self._behind:
            return
        rows, self._behind = self._behind, []
        assert self._csv is not None
        flat = [flatten_dict(row) for row in rows]
        if not all(self._known.issuperset(f) for f in flat):
            self._rewrite_csv()  # a new column: the table's header changes
            return
        write_all(self._csv, self._csv_lines(flat, self._columns).encode())

    def _rewrite_csv(self) -> None:
        """progress.csv whole again, from every row of result.json taken so far (not the
        ones others appended since), then open for appending again."""
        assert self._csv is not None
        os.close(self._csv)
        self._csv = None
        _, self._columns = _last_row_and_columns(self._run_dir, end=self._end)
        self._known = set(self._columns)
        self._write_csv(end=self._end)
        self._csv = open_append(self._run_dir.join(storage.PROGRESS_FILE))

    def sync(self) -> None:
        """Put every row appended so far on disk (fsync), as ``append(sync=True)`` does."""
        if self._journal is not None:
            self._journal.sync()
        elif self._json is not None:
            os.fsync(self._json)

    def flush(self) -> None:
        """Upload the journal's rows (object stores), or write progress.csv's lines still
        to come (locally, where result.json has every row already)."""
        self.catch_up()
        if self._journal is not None:
            self._write_whole()
            self._journal.clear()

    def close(self) -> None:
        """Upload what the journal holds, or put the rows on disk (a run's end; where the
        run directory's writes are not fsync'd, its owner puts them on disk later)."""
        self.flush()
        if self._run_dir.fsync_writes:
            self.sync()
        self._close_files()

    def _close_files(self) -> None:
        for fd in (self._json, self._csv, self._reading):
            if fd is not None:
                os.close(fd)
        self._json = self._csv = self._reading = None
        self._unread = b""

    def _write_whole(self, *, sync: bool = False) -> None:
        # (an object store's files, from the rows in memory) result.json is the record
        # (fsync'd when asked); progress.csv is rebuilt from it.
        self._run_dir.write_atomic(
            storage.RESULTS_FILE, _json_lines(self._rows).encode(), fsync=sync or None
        )
        self._run_dir.write_atomic(storage.PROGRESS_FILE, _csv_text(self._rows).encode())

    def _rewrite_local(
        self, keep: Callable[[dict[str, Any]], bool] | None = None, *, sync: bool = False
    ) -> int:
        """Write both files whole again from the rows of result.json that ``keep`` accepts
        (all by default), a row at a time: the rows are never all in memory. Returns how
        many were dropped."""
        self._behind = []  # written whole from every row
        self._close_files()
        if not self._run_dir.exists(storage.RESULTS_FILE):
            return 0
        run_dir, columns = self._run_dir, dict[str, None]()
        assert isinstance(run_dir, storage.LocalDir)
        last, dropped = None, 0
        with run_dir.writing_atomic(storage.RESULTS_FILE, fsync=sync or None) as out:
            for row in _rows_of(run_dir):
                if keep is not None and not keep(row):
                    dropped += 1
                    continue
                out.write((json.dumps(row) + "\n").encode())
                columns.update(dict.fromkeys(flatten_dict(row)))
                last = row
        self._columns = list(columns)
        self._known = set(columns)
        self._write_csv()
        self._rows = [last] if last is not None else []
        self._rows_on_disk = True
        return dropped

    def _write_csv(self, end: int | None = None) -> None:
        """progress.csv whole, from result.json's rows read a line at a time (those
        before byte ``end``, if given)."""
        run_dir = self._run_dir
        assert isinstance(run_dir, storage.LocalDir)
        with run_dir.writing_atomic(storage.PROGRESS_FILE) as out:
            text = io.TextIOWrapper(out, encoding="utf-8", newline="")
            writer = csv.DictWriter(text, self._columns)
            writer.writeheader()
            writer.writerows(flatten_dict(row) for row in _rows_of(run_dir, end))
            text.flush()
            text.detach()  # the file is closed by writing_atomic

    def _open_files(self) -> None:
        # Both stay open for the run: a step costs one write, a batch of csv lines another.
        self._json = open_append(self._run_dir.join(storage.RESULTS_FILE))
        self._csv = open_append(self._run_dir.join(storage.PROGRESS_FILE))
        self._end = os.fstat(self._json).st_size

    def _start_files(self, row: dict[str, Any], *, sync: bool) -> None:
        """A new run's first line: both files created by opening them for appending, so
        that the first step costs no more than the others (a driver killed before the
        line is written leaves an empty file, which holds no row)."""
        self._behind = []
        self._close_files()
        self._rows = [row]
        self._columns = _columns(self._rows)
        self._known = set(self._columns)
        self._json = open_append(self._run_dir.join(storage.RESULTS_FILE))
        first = _json_lines(self._rows).encode()
        write_all(self._json, first)
        self._end = os.fstat(self._json).st_size
        if sync:
            os.fsync(self._json)
            storage.fsync_dir(self._run_dir.path)  # the new file's name, on the disk too
        self._csv = open_append(self._run_dir.join(storage.PROGRESS_FILE))
        write_all(self._csv, _csv_text(self._rows).encode())
        self._rows_on_disk = True


def _csv_text(rows: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, _columns(rows))
    writer.writeheader()
    writer.writerows(flatten_dict(r) for r in rows)
    return out.getvalue()


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(flatten_dict(row)))
    return list(columns)


def _rows_of(run_dir: storage.StorageDir, end: int | None = None) -> Iterator[dict[str, Any]]:
    """The rows of a local run's result.json, read a line at a time (those before byte
    ``end``, if given)."""
    with open(run_dir.join(storage.RESULTS_FILE), "rb") as f:
        yield from iter_result_lines(f if end is None else _lines_before(f, end))


def _lines_before(lines: Iterable[bytes], end: int) -> Iterator[bytes]:
    at = 0
    for line in lines:
        at += len(line)
        if at > end:
            return
        yield line


def _last_row_and_columns(
    run_dir: storage.StorageDir, end: int | None = None
) -> tuple[dict[str, Any] | None, list[str]]:
    """A local run's last row and every row's columns, reading a row at a time (those
    before byte ``end``, if given)."""
    if not run_dir.exists(storage.RESULTS_FILE):
        return None, []
    last, columns = None, dict[str, None]()
    for row in _rows_of(run_dir, end):
        columns.update(dict.fromkeys(flatten_dict(row)))
        last = row
    return last, list(columns)


def _json_lines(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


class Journal:
    """A remote run's rows not yet uploaded, in a local file (JSON lines).

    Named by the run's URI, so that the next driver of the run on this machine finds the
    rows a dead driver could not upload. ``LOCKSTEP_JOURNAL_DIR`` says where it is kept.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None

    @classmethod
    def of(cls, run_dir: storage.StorageDir) -> Journal:
        digest = hashlib.sha256(run_dir.uri.encode("utf-8")).hexdigest()[:20]
        folder = flags.JOURNAL_DIR.get() or tempfile.gettempdir()
        return cls(os.path.join(folder, f"lockstep-journal-{digest}.jsonl"))

    def rows(self) -> list[dict[str, Any]]:
        if not os.path.exists(self.path):
            return []
        with open(self.path, encoding="utf-8") as f:
            return parse_result_lines(f.read())

    def append(self, line: str, *, sync: bool = True) -> None:
        """Append one row's JSON line (with its newline)."""
        if self._fd is None:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            self._fd = open_append(self.path)
        write_all(self._fd, line.encode())
        if sync:
            os.fsync(self._fd)

    def sync(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def clear(self) -> None:
        """Everything in it is uploaded."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if os.path.exists(self.path):
            os.remove(self.path)


def _merged(uploaded: list[dict[str, Any]], journal: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The uploaded rows, then the journal's rows that came after them (a driver that died
    between an upload and clearing its journal leaves rows in both)."""
    last = max((_iteration(r) for r in uploaded), default=0)
    return uploaded + [r for r in journal if _iteration(r) > last]


def _iteration(row: Mapping[str, Any]) -> int:
    return int(row.get("training_iteration", 0))
