"""Sources narrow to row windows without reading."""

import pyarrow as pa

from lockstep.data._sources import RangeSource, SlicedSource, TableSource, window


def rows(source):
    return [v for block in source.read() for v in block.column(0).to_pylist()]


def test_window_of_a_stream():
    blocks = [pa.table({"x": list(range(i, i + 3))}) for i in (0, 3, 6)]
    assert [v for b in window(iter(blocks), 2, 5) for v in b.column(0).to_pylist()] == [
        2,
        3,
        4,
        5,
        6,
    ]
    assert [b.num_rows for b in window(iter(blocks), 0, 0)] == [0]  # schema kept, no rows


def test_slices_compose_and_count():
    source = RangeSource(0, 100)
    assert rows(source.slice(10, 5)) == list(range(10, 15))
    sliced = SlicedSource(TableSource(pa.table({"x": list(range(10))})), 2, 6)
    assert sliced.num_rows() == 6
    assert rows(sliced.slice(1, 10)) == [3, 4, 5, 6, 7]
    assert SlicedSource(source, 95, 10).num_rows() == 5
