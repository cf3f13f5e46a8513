"""The run's human-readable record: params.json, result.json (JSON lines) and progress.csv."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from typing import IO, Any

from lockstep._core import storage
from lockstep._core.result import read_results


def flatten(row: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts become ``outer/inner`` columns, as Ray Train's progress.csv has them."""
    flat: dict[str, Any] = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}/"))
        else:
            flat[name] = value
    return flat


class RunLog:
    """Appends one line per step to result.json and progress.csv.

    Locally each line is written as it comes. An object store cannot append, so there the
    lines are kept in memory and both files rewritten at :meth:`flush` (on each checkpoint
    commit and at the end of the run).
    """

    def __init__(self, run_dir: storage.StorageDir) -> None:
        self._run_dir = run_dir
        self._rows = read_results(run_dir)
        self._columns = _columns(self._rows)
        self._json: IO[str] | None = None
        self._csv: IO[str] | None = None

    @property
    def last_row(self) -> dict[str, Any] | None:
        return self._rows[-1] if self._rows else None

    def write_params(self, params: Mapping[str, Any]) -> None:
        data = json.dumps(params, indent=2, sort_keys=True, default=repr).encode("utf-8")
        self._run_dir.write_atomic(storage.PARAMS_FILE, data)

    def append(self, row: dict[str, Any]) -> None:
        self._rows.append(row)
        if not self._run_dir.can_append:
            return
        flat = flatten(row)
        if self._csv is None or any(k not in self._columns for k in flat):
            self._rewrite_local()
            return
        assert self._json is not None
        self._json.write(json.dumps(row) + "\n")
        self._json.flush()
        csv.DictWriter(self._csv, self._columns).writerow(flat)
        self._csv.flush()

    def flush(self) -> None:
        if not self._run_dir.can_append:
            self._run_dir.write_atomic(storage.RESULTS_FILE, _json_lines(self._rows).encode())
            self._run_dir.write_atomic(storage.PROGRESS_FILE, self._csv_text().encode())

    def close(self) -> None:
        self.flush()
        for stream in (self._json, self._csv):
            if stream is not None:
                stream.close()
        self._json = self._csv = None

    def _rewrite_local(self) -> None:
        """(Re)write both files whole: at the first line, or when a new column appears."""
        self.close()
        self._columns = _columns(self._rows)
        self._run_dir.write_atomic(storage.RESULTS_FILE, _json_lines(self._rows).encode())
        self._run_dir.write_atomic(storage.PROGRESS_FILE, self._csv_text().encode())
        # Both stay open for the run, so that each step costs one buffered write.
        self._json = self._run_dir.open_append(storage.RESULTS_FILE)
        self._csv = self._run_dir.open_append(storage.PROGRESS_FILE)

    def _csv_text(self) -> str:
        out = io.StringIO()
        writer = csv.DictWriter(out, _columns(self._rows))
        writer.writeheader()
        writer.writerows(flatten(r) for r in self._rows)
        return out.getvalue()


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(flatten(row)))
    return list(columns)


def _json_lines(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)
