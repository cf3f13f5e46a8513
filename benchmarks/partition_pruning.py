"""Filters and column selections pushed into parquet reads, each against the full read.

Data: 10 hive partitions (``part=0`` .. ``part=9``) of 200,000 rows x 4 float64 columns and
a sorted int64 ``key`` each, written with ``pyarrow.parquet.write_to_dataset`` with
``row_group_size=20,000`` (it cuts its 32,768-row batches, so the groups hold 20,000 and
12,768 rows in turn). Every read goes through
``lockstep.data.read_parquet(root)`` and pulls every row into Arrow (``to_arrow()``), best of
``--repeats`` each, in the same run as the full read:

- ``read_parquet(filter=)``: the filter given to the read;
- ``.filter(expr="part == '3'")`` and ``.filter(expr=pc.field("part") == "3")``: the filter
  after the read, pushed into it (one partition in ten);
- ``.filter(expr=pc.field("key") < k)`` for a tenth of each partition's keys: row groups
  ruled out by their statistics;
- ``.select_columns(["f0"])``: one column of five.

Target for each: filtered / full <= 0.2 (``select_columns``: <= 0.35, one column of five).

    python benchmarks/partition_pruning.py [--rows 200000] [--repeats 3]
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable

import bench
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import lockstep.data as ld


def rows_read(make: Callable[[], ld.Dataset]) -> int:
    """The rows of the dataset ``make()`` builds, read to the end."""
    return int(make().to_arrow().num_rows)


def write(root: str, rows: int) -> None:
    rng = np.random.default_rng(0)
    for part in range(10):
        columns = {f"f{c}": rng.random(rows) for c in range(4)}
        table = pa.table({**columns, "key": np.arange(rows), "part": [str(part)] * rows})
        pq.write_to_dataset(table, root, partition_cols=["part"], row_group_size=max(1, rows // 10))


def main() -> None:
    args = bench.options(__doc__, rows=200_000, repeats=3).parse_args()
    with tempfile.TemporaryDirectory() as root:
        write(root, args.rows)
        cases: dict[str, tuple[Callable[[], ld.Dataset], float]] = {
            "read_parquet(filter=part == '3')": (
                lambda: ld.read_parquet(root, filter=pc.field("part") == "3"),
                0.2,
            ),
            ".filter(expr=\"part == '3'\")": (
                lambda: ld.read_parquet(root).filter(expr="part == '3'"),
                0.2,
            ),
            ".filter(expr=pc.field('part') == '3')": (
                lambda: ld.read_parquet(root).filter(expr=pc.field("part") == "3"),
                0.2,
            ),
            ".filter(expr=pc.field('key') < rows/10)": (
                lambda: ld.read_parquet(root).filter(expr=pc.field("key") < args.rows // 10),
                0.2,
            ),
            ".select_columns(['f0'])": (
                lambda: ld.read_parquet(root).select_columns(["f0"]),
                0.35,
            ),
        }
        full, full_rows = bench.best_of(
            args.repeats, lambda: rows_read(lambda: ld.read_parquet(root))
        )
        print(f"full read: {full_rows} rows in {full:.3f}s")
        for name, (make, target) in cases.items():
            took, rows = bench.best_of(args.repeats, lambda make=make: rows_read(make))
            ratio = took / full
            verdict = "PASS" if ratio <= target else "FAIL"
            print(
                f"{name:42s} {rows:>9} rows {took:.3f}s  / full = {ratio:.3f} "
                f"(target <= {target}): {verdict}"
            )


if __name__ == "__main__":
    main()
