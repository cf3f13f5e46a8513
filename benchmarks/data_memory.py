"""Memory of datasets built in memory: no constructor or transform above 2x the raw bytes.

Cases (2,000 samples of 28 x 28 float32 by default, 6.3 MB raw): ``from_torch`` of a
``TensorDataset`` (each sample a view of one big tensor), ``from_items`` of dicts of
arrays, ``from_numpy``, and ``map`` returning arrays (materialized). Each case runs in a
fresh process; the figures, against the raw bytes of the samples measured in the same run:
the dataset's table size (Arrow ``nbytes``), and the growth of the peak resident set size
from just before the dataset is built (the input already in memory, and a dataset of a
quarter of the samples built and dropped once, so that imports and what the allocators
reserve once per process do not count) to the end. The full dataset is built twice, the
first dropped before the second; both peaks are printed (the peak is reset in between).
Target: the table and both peak growths <= 2.0x for every case.

    python benchmarks/data_memory.py [--samples 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from typing import Any

import bench
import numpy as np

CASES = ("from_torch", "from_items", "from_numpy", "map")


def _rss_bytes() -> int:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _reset_peak() -> None:
    """Linux: the peak RSS (VmHWM) starts again from the current RSS."""
    with open(f"/proc/{os.getpid()}/clear_refs", "w") as f:
        f.write("5")


def _peak_bytes() -> int:
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _build(case: str, images: np.ndarray[Any, Any]) -> Any:
    import lockstep.data as ld

    if case == "from_torch":
        import torch

        samples = torch.utils.data.TensorDataset(torch.from_numpy(images))
        return ld.from_torch(samples)
    if case == "from_items":
        return ld.from_items([{"image": image, "label": i} for i, image in enumerate(images)])
    if case == "from_numpy":
        return ld.from_numpy(images)
    base = ld.range(len(images))
    return base.map(lambda row: {"image": images[row["id"]]}).materialize()


def measure(case: str, samples: int) -> dict[str, float]:
    """In this process: build the case's dataset and return its figures."""
    import torch  # noqa: F401

    import lockstep.data  # noqa: F401  # imported before the baseline, as a user would

    images = np.random.default_rng(0).random((samples, 28, 28), dtype=np.float32)
    raw = images.nbytes
    _build(case, images[: samples // 4]).take_all()  # imports and per-process allocator setup
    growths = []
    for _ in range(2):
        _reset_peak()
        before = _rss_bytes()
        dataset = _build(case, images)
        table_bytes = sum(s.table.nbytes for s in dataset._plan.sources)
        growths.append(max(0, _peak_bytes() - before))
        del dataset
    return {
        "raw_mb": raw / 1e6,
        "table_ratio": table_bytes / raw,
        "first_rss_ratio": growths[0] / raw,
        "rss_ratio": growths[1] / raw,
    }


def main() -> None:
    parser = bench.options(__doc__, samples=2000)
    parser.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(measure(args.case, args.samples)))
        return
    worst = 0.0
    for case in CASES:
        out = subprocess.run(
            [sys.executable, __file__, "--case", case, "--samples", str(args.samples)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        figures = json.loads(out.strip().splitlines()[-1])
        ratios = ("table_ratio", "first_rss_ratio", "rss_ratio")
        worst = max(worst, *(figures[r] for r in ratios))
        print(
            f"{case:>11}: raw {figures['raw_mb']:.1f} MB, table {figures['table_ratio']:.2f}x, "
            f"peak RSS growth {figures['first_rss_ratio']:.2f}x, "
            f"built again {figures['rss_ratio']:.2f}x"
        )
    print(f"worst ratio {worst:.2f}x (target <= 2.0x): {'PASS' if worst <= 2.0 else 'FAIL'}")


if __name__ == "__main__":
    main()
