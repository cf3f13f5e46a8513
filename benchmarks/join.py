"""Dataset.join against pyarrow.Table.join on the same tables, in the same run.

Data: 1,000,000 left rows x 100,000 right rows, an int64 key (each right key once, left keys
drawn from twice their range) and a float64 column each. lockstep: ``from_arrow(left)``
``.join(from_arrow(right), "inner", 1, on=("k",)).to_arrow()``; baseline:
``left.join(right, "k", join_type="inner")``; best of ``--repeats`` each.
Target: lockstep / pyarrow <= 2.0.

    python benchmarks/join.py [--left 1000000] [--right 100000] [--repeats 5]
"""

from __future__ import annotations

import bench
import numpy as np
import pyarrow as pa

import lockstep.data as ld


def main() -> None:
    args = bench.options(__doc__, left=1_000_000, right=100_000, repeats=5).parse_args()
    rng = np.random.default_rng(0)
    left = pa.table({"k": rng.integers(0, 2 * args.right, args.left), "x": rng.random(args.left)})
    right = pa.table({"k": rng.permutation(args.right), "y": rng.random(args.right)})
    baseline, base_rows = bench.best_of(
        args.repeats, lambda: left.join(right, "k", join_type="inner").num_rows
    )
    ours, our_rows = bench.best_of(
        args.repeats,
        lambda: (
            ld.from_arrow(left)
            .join(ld.from_arrow(right), "inner", 1, on=("k",))
            .to_arrow()
            .num_rows
        ),
    )
    assert our_rows == base_rows
    ratio = ours / baseline
    print(f"pyarrow join: {baseline:.3f}s; Dataset.join: {ours:.3f}s ({our_rows} rows)")
    print(f"lockstep / pyarrow = {ratio:.2f} (target <= 2.0): {'PASS' if ratio <= 2.0 else 'FAIL'}")


if __name__ == "__main__":
    main()
