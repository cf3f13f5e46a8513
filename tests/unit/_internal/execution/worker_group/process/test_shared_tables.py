"""A worker start's in-memory tables travel as shared memory files."""

from __future__ import annotations

import os
import pickle

import pyarrow as pa

from lockstep._internal.execution.worker_group.process import shared_tables
from lockstep.data._sources import TableSource


def test_a_slice_travels_as_a_file_that_the_reader_removes():
    table = pa.table({"x": list(range(100))})
    written: list[str] = []
    payload = shared_tables.dumps({"shard": TableSource(table.slice(10, 5))}, written)
    assert len(written) == 1 and os.path.exists(written[0])
    assert len(payload) < 1000  # the rows are in the file, not in the pickle
    assert os.path.getsize(written[0]) < table.nbytes  # only the slice's rows

    shard = pickle.loads(payload)["shard"]
    assert shard.table.column("x").to_pylist() == list(range(10, 15))
    assert not os.path.exists(written[0])
    shared_tables.remove(written)  # nothing left to remove
    assert written == []


def test_remove_deletes_the_files_no_reader_opened():
    written: list[str] = []
    shared_tables.dumps(TableSource(pa.table({"x": [1.0]})), written)
    path = written[0]
    shared_tables.remove(written)
    assert not os.path.exists(path) and written == []


def test_only_this_user_may_read_the_file():
    written: list[str] = []
    shared_tables.dumps(TableSource(pa.table({"x": [1.0]})), written)
    try:
        assert os.stat(written[0]).st_mode & 0o777 == 0o600
    finally:
        shared_tables.remove(written)


def test_without_shared_memory_the_rows_go_in_the_pickle(monkeypatch, tmp_path):
    monkeypatch.setattr(shared_tables, "_SHM", str(tmp_path / "no-such-dir"))
    table = pa.table({"x": list(range(1000))})
    written: list[str] = []
    payload = shared_tables.dumps(TableSource(table), written)
    assert written == [] and len(payload) > table.nbytes
    assert pickle.loads(payload).table.equals(table)
