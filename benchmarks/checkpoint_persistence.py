"""Persisting a 256 MiB checkpoint: report(checkpoint=...) until it is committed.

Rank 0 writes one 256 MiB file (not timed), then, alternately and each after os.sync() so
that both start from the same page-cache state:
  - baseline: shutil.copyfile of that file to a new path on the same disk;
  - lockstep: train.report(..., checkpoint=...), which returns once the checkpoint is
    committed in the run directory.
Target: throughput at least 0.7x the plain copy (medians).

    python benchmarks/checkpoint_persistence.py [--mib 256] [--repeats 5]
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time

import bench

from lockstep import train
from lockstep.train import Checkpoint, DataParallelTrainer, RunConfig, ScalingConfig


def write_file(path: str, mib: int) -> None:
    block = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(block)


def timed(fn) -> float:  # type: ignore[no-untyped-def]
    os.sync()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def save_checkpoints(config: dict) -> dict[str, list[float]]:
    rank = train.get_context().get_world_rank()
    ours, copies = [], []
    for i in range(config["repeats"]):
        with tempfile.TemporaryDirectory(prefix="lockstep-bench-", dir=config["dir"]) as d:
            if rank == 0:
                model = os.path.join(d, "model.bin")
                write_file(model, config["mib"])
                # a fresh path each time, as each checkpoint gets a fresh directory
                copy = os.path.join(config["dir"], f"copy{i}.bin")
                copies.append(timed(lambda: shutil.copyfile(model, copy)))  # noqa: B023
            checkpoint = Checkpoint.from_directory(d)
            ours.append(timed(lambda: train.report({"i": i}, checkpoint=checkpoint)))  # noqa: B023
    return {"lockstep": ours, "copy": copies}


def main() -> None:
    args = bench.options(__doc__, mib=256, repeats=5).parse_args()
    with tempfile.TemporaryDirectory(prefix="lockstep-bench-", dir=os.getcwd()) as root:
        result = DataParallelTrainer(
            save_checkpoints,
            train_loop_config={"mib": args.mib, "repeats": args.repeats, "dir": root},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(storage_path=os.path.join(root, "runs"), verbose=0),
        ).fit()
    print("lockstep:", [round(x, 3) for x in result.return_value["lockstep"]])
    print("copy:    ", [round(x, 3) for x in result.return_value["copy"]])
    ours = statistics.median(result.return_value["lockstep"])
    base = statistics.median(result.return_value["copy"])
    print(
        f"report() with a {args.mib} MiB checkpoint, median of {args.repeats}: {ours:.3f} s "
        f"({args.mib / ours:.0f} MiB/s)"
    )
    print(f"plain file copy, median: {base:.3f} s ({args.mib / base:.0f} MiB/s)")
    print(f"throughput ratio lockstep / copy: {base / ours:.2f}x (target >= 0.7x)")


if __name__ == "__main__":
    main()
