"""A worker start's in-memory tables travel in an anonymous shared memory file (memfd)."""

from __future__ import annotations

import gc
import os
import pickle

import pyarrow as pa

from lockstep._internal.execution.worker_group.process import shared_tables
from lockstep.data._sources import TableSource


def shm_names() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def test_the_tables_of_a_start_travel_in_one_nameless_file_mapped_by_the_reader():
    table = pa.table({"x": list(range(100))})
    before = shm_names()
    written: list[str] = []
    start = {"a": TableSource(table.slice(10, 5)), "b": TableSource(pa.table({"y": ["s"] * 3}))}
    payload = shared_tables.dumps(start, written)
    assert len(written) == 1 and shm_names() == before  # nothing with a name in /dev/shm
    assert len(payload) < 1000  # the rows are in the file, not in the pickle
    assert os.path.getsize(written[0]) < table.nbytes  # only the slice's rows

    shard = pickle.loads(payload)
    assert shard["a"].table.column("x").to_pylist() == list(range(10, 15))
    assert shard["b"].table.column("y").to_pylist() == ["s"] * 3
    shared_tables.remove(written)  # the driver lets go; the reader's map keeps the rows
    assert written == []
    gc.collect()
    assert shard["a"].table.column("x").to_pylist() == list(range(10, 15))
    shared_tables._mapped.clear()


def test_remove_closes_the_file():
    written: list[str] = []
    shared_tables.dumps(TableSource(pa.table({"x": [1.0]})), written)
    path = written[0]
    shared_tables.remove(written)
    assert not os.path.exists(path) and written == []


def test_without_memfd_the_rows_go_in_the_pickle(monkeypatch):
    monkeypatch.delattr(os, "memfd_create")
    table = pa.table({"x": list(range(1000))})
    written: list[str] = []
    payload = shared_tables.dumps(TableSource(table), written)
    assert written == [] and len(payload) > table.nbytes
    assert pickle.loads(payload).table.equals(table)
