"""Partition pruning: a read filtered to one of 10 hive partitions vs the full read.

Data: 10 partitions (``part=0`` .. ``part=9``) of 200,000 rows x 4 float64 columns each,
written with ``pyarrow.parquet.write_to_dataset``. Both reads go through
``lockstep.data.read_parquet(...)`` and pull every row into Arrow (``to_arrow()``), best of
``--repeats`` each, in the same run. Target: filtered / full <= 0.2.

    python benchmarks/partition_pruning.py [--rows 200000] [--repeats 3]
"""

from __future__ import annotations

import tempfile

import bench
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import lockstep.data as ld


def rows_read(root: str, **options: object) -> int:
    """The rows of ``read_parquet(root, **options)``, read to the end."""
    return ld.read_parquet(root, **options).to_arrow().num_rows  # type: ignore[arg-type]


def main() -> None:
    args = bench.options(__doc__, rows=200_000, repeats=3).parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as root:
        for part in range(10):
            columns = {f"f{c}": rng.random(args.rows) for c in range(4)}
            table = pa.table({**columns, "part": [str(part)] * args.rows})
            pq.write_to_dataset(table, root, partition_cols=["part"])
        full, full_rows = bench.best_of(args.repeats, lambda: rows_read(root))
        one, one_rows = bench.best_of(
            args.repeats, lambda: rows_read(root, filter=pc.field("part") == "3")
        )
    ratio = one / full
    print(
        f"full read: {full_rows} rows in {full:.3f}s; one partition: {one_rows} rows in {one:.3f}s"
    )
    print(f"filtered / full = {ratio:.3f} (target <= 0.2): {'PASS' if ratio <= 0.2 else 'FAIL'}")


if __name__ == "__main__":
    main()
