"""Filters and column selections after read_parquet are pushed into the read: partitions
and row groups they rule out are never read, and the rows are the same as without."""

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lockstep.data as ld
from tests.unit.data.strategies import SETTINGS, tables


def write_partitioned(root, table, row_group_size):
    pq.write_to_dataset(
        table.append_column("p", pc.cast(table.column("k"), pa.string())),
        str(root),
        partition_cols=["p"],
        row_group_size=row_group_size,
    )


def predicates():
    """pyarrow expressions over the partition column ``p`` and data columns ``i``, ``s``."""
    leaf = st.one_of(
        st.sampled_from(["0", "1", "2", "3", "9"]).map(lambda v: pc.field("p") == v),
        st.integers(-1000, 1000).map(lambda v: pc.field("i") > v),
        st.sampled_from(["a", "b"]).map(lambda v: pc.field("s") == v),
        st.just(pc.field("i").is_null()),
    )
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.tuples(inner, inner).map(lambda ab: ab[0] & ab[1]),
            st.tuples(inner, inner).map(lambda ab: ab[0] | ab[1]),
            inner.map(lambda a: ~a),
        ),
        max_leaves=4,
    )


def unpushed(ds):
    """``ds`` with an op first, so that a filter after it is not pushed into the read."""
    return ds.map_batches(lambda batch: batch, batch_format="pyarrow")


def rows(ds):
    return sorted(ds.take_all(), key=lambda r: r["row"])


@settings(**SETTINGS, max_examples=25)
@given(table=tables(min_rows=1), predicate=predicates(), group=st.integers(1, 7))
def test_the_same_rows_with_and_without_pushdown(tmp_path_factory, table, predicate, group):
    root = tmp_path_factory.mktemp("pushdown")
    write_partitioned(root, table, group)
    ds = ld.read_parquet(str(root))
    pushed = ds.filter(expr=predicate)
    assert not pushed._plan.ops  # in the read
    assert rows(pushed) == rows(unpushed(ds).filter(expr=predicate))
    columns = ["row", "s"]
    assert rows(pushed.select_columns(columns)) == rows(
        unpushed(ds).filter(expr=predicate).select_columns(columns)
    )


def test_a_partition_filter_leaves_the_other_partitions_unread(tmp_path):
    table = pa.table({"row": range(40), "k": [i % 4 for i in range(40)], "i": range(40)})
    write_partitioned(tmp_path, table, 5)
    ds = ld.read_parquet(str(tmp_path)).filter(expr="p == '2'")
    read = [s for s in ds._plan.sources if s.row_groups]
    assert [s.partition_row.column("p")[0].as_py() for s in read] == ["2"]
    assert sorted(r["row"] for r in ds.take_all()) == list(range(2, 40, 4))
    nothing = ld.read_parquet(str(tmp_path)).filter(expr=pc.field("p") == "7")
    assert nothing.count() == 0
    assert nothing.to_arrow().schema.names == ["row", "k", "i", "p"]


def test_row_groups_ruled_out_by_their_statistics_are_not_read(tmp_path):
    pq.write_table(pa.table({"x": range(100)}), tmp_path / "f.parquet", row_group_size=10)
    ds = ld.read_parquet(str(tmp_path)).filter(pc.field("x") >= 95)  # expression as fn
    blocks = list(ds._plan.sources[0].read())
    assert [b.num_rows for b in blocks] == [5]  # nine row groups skipped by their max
    assert [r["x"] for r in ds.take_all()] == [95, 96, 97, 98, 99]


def test_a_filter_on_a_column_not_selected_fails_as_without_pushdown(tmp_path):
    pq.write_table(pa.table({"x": [1, 2], "y": [3, 4]}), tmp_path / "f.parquet")
    ds = ld.read_parquet(str(tmp_path)).select_columns(["x"]).filter(expr=pc.field("y") > 3)
    assert ds._plan.ops  # not pushed: y is not read
    with pytest.raises(pa.ArrowInvalid, match="y"):
        ds.take_all()


def test_a_filter_after_a_split_is_not_pushed_into_the_window(tmp_path):
    pq.write_table(pa.table({"x": range(10)}), tmp_path / "f.parquet", row_group_size=3)
    first, _ = ld.read_parquet(str(tmp_path)).split(2)
    assert [r["x"] for r in first.filter(expr=pc.field("x") >= 3).take_all()] == [3, 4]


def test_a_filter_is_checked_once_per_schema_not_once_per_file(tmp_path):
    from lockstep.data import _parquet

    for part in range(10):
        pq.write_table(pa.table({"x": [part]}), tmp_path / f"f{part}.parquet")
    _parquet._applies_to.cache_clear()
    ds = ld.read_parquet(str(tmp_path)).filter(expr=pc.field("x") >= 5)
    assert not ds._plan.ops  # pushed into every file
    info = _parquet._applies_to.cache_info()
    assert (info.misses, info.hits) == (1, 9)
    assert sorted(r["x"] for r in ds.take_all()) == [5, 6, 7, 8, 9]


def test_the_check_of_a_filter_answers_for_each_schema_apart():
    from lockstep.data import _parquet

    expression = pc.field("y") > 0
    with_y = pa.schema([("x", pa.int64()), ("y", pa.int64())])
    without_y = pa.schema([("x", pa.int64())])
    assert _parquet._applies(expression, with_y)
    assert not _parquet._applies(expression, without_y)
    assert _parquet._applies(expression, with_y)
    assert not _parquet._applies(pc.field("y") > "text", with_y)  # the types do not compare
