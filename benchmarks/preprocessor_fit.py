"""Fitting StandardScaler on a parquet dataset, streaming over its blocks.

Data: 2M rows x 16 float32 columns in 8 parquet files (as benchmarks/ingest.py).
Baseline, measured in the same run and process: ``pyarrow.parquet.read_table`` of the same
files (multi-threaded) and ``pyarrow.compute`` mean and stddev over every column.
Target: the fit at no less than 0.5x the baseline's speed (time ratio baseline / fit >= 0.5),
with the same statistics.

    python benchmarks/preprocessor_fit.py [--rows 2000000] [--files 8] [--repeats 3]
"""

from __future__ import annotations

import math
import os
import statistics
import tempfile
import time

import bench
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import lockstep.data as ld
from lockstep.data.preprocessors import StandardScaler

COLUMNS = [f"f{c}" for c in range(16)]


def write_dataset(directory: str, rows: int, files: int) -> list[str]:
    rng = np.random.default_rng(0)
    paths = []
    for i in range(files):
        table = pa.table({c: rng.random(rows // files, dtype=np.float32) for c in COLUMNS})
        paths.append(os.path.join(directory, f"part-{i:03d}.parquet"))
        pq.write_table(table, paths[-1])
    return paths


def baseline_once(paths: list[str]) -> tuple[float, dict[str, float]]:
    start = time.perf_counter()
    table = pq.read_table(paths)
    stats = {}
    for c in COLUMNS:
        stats[f"mean({c})"] = pc.mean(table[c]).as_py()
        stats[f"std({c})"] = pc.stddev(table[c]).as_py()
    return time.perf_counter() - start, stats


def fit_once(paths: list[str]) -> tuple[float, dict[str, float]]:
    start = time.perf_counter()
    scaler = StandardScaler(COLUMNS).fit(ld.read_parquet(paths))
    return time.perf_counter() - start, scaler.stats_


def main() -> None:
    args = bench.options(__doc__, rows=2_000_000, files=8, repeats=3).parse_args()
    with tempfile.TemporaryDirectory(prefix="lockstep-bench-") as tmp:
        paths = write_dataset(tmp, args.rows, args.files)
        baseline_once(paths)  # warm the page cache
        base = [baseline_once(paths) for _ in range(args.repeats)]
        ours = [fit_once(paths) for _ in range(args.repeats)]
    base_s = statistics.median(s for s, _ in base)
    ours_s = statistics.median(s for s, _ in ours)
    expected, got = base[0][1], ours[0][1]
    worst = max(abs(got[k] - v) / abs(v) for k, v in expected.items())
    assert math.isfinite(worst) and worst < 1e-6, f"statistics differ by {worst:.2e}"
    print(f"data: {args.rows:,} rows x {len(COLUMNS)} float32 columns in {args.files} files")
    print(
        f"baseline (read_table + pyarrow.compute mean/stddev), median of {args.repeats}: "
        f"{base_s:.3f} s"
    )
    print(
        f"StandardScaler.fit (streaming, block by block), median of {args.repeats}: {ours_s:.3f} s"
    )
    print(f"statistics agree to {worst:.1e} relative")
    print(f"speed ratio fit / baseline: {base_s / ours_s:.2f}x (target >= 0.5x)")


if __name__ == "__main__":
    main()
