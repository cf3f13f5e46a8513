"""How long report() takes with a 256 MiB checkpoint: SYNC against ASYNC.

One worker writes a 256 MiB file (not timed) and reports it, alternately with
CheckpointUploadMode.SYNC (report returns once the checkpoint is committed) and ASYNC
(report returns once every worker reported; the driver uploads and commits while the
function goes on), each after os.sync() so that both start from the same page-cache state.
The ASYNC run then waits for its commits (get_all_reported_checkpoints, also timed).
Baseline in the same run: SYNC. Target: ASYNC's report time a small fraction of SYNC's.

    python benchmarks/checkpoint_upload_modes.py [--mib 256] [--repeats 3]
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

import bench

from lockstep import train
from lockstep.train import (
    Checkpoint,
    CheckpointUploadMode,
    DataParallelTrainer,
    RunConfig,
    ScalingConfig,
)


def write_file(path: str, mib: int) -> None:
    block = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(block)


def timed_reports(config: dict) -> dict[str, list[float]]:
    timings: dict[str, list[float]] = {"SYNC": [], "ASYNC": [], "ASYNC committed": []}
    for _ in range(config["repeats"]):
        for mode in (CheckpointUploadMode.SYNC, CheckpointUploadMode.ASYNC):
            with tempfile.TemporaryDirectory(dir=config["scratch"]) as d:
                write_file(os.path.join(d, "weights.bin"), config["mib"])
                os.sync()
                start = time.perf_counter()
                train.report(
                    {"mode": mode.value},
                    checkpoint=Checkpoint.from_directory(d),
                    checkpoint_upload_mode=mode,
                )
                timings[mode.value].append(time.perf_counter() - start)
            if mode is CheckpointUploadMode.ASYNC:
                train.get_all_reported_checkpoints()
                timings["ASYNC committed"].append(time.perf_counter() - start)
    return timings


def main() -> None:
    args = bench.options(__doc__, mib=256, repeats=3).parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="lockstep-bench-") as storage,
        tempfile.TemporaryDirectory(prefix="lockstep-bench-scratch-") as scratch,
    ):
        timings = (
            DataParallelTrainer(
                timed_reports,
                train_loop_config={"mib": args.mib, "repeats": args.repeats, "scratch": scratch},
                scaling_config=ScalingConfig(num_workers=1),
                run_config=RunConfig(storage_path=storage, verbose=0),
            )
            .fit()
            .return_value
        )
    sync = statistics.median(timings["SYNC"])
    for mode, values in timings.items():
        median = statistics.median(values)
        print(f"{mode:>16}: median {median * 1e3:8.1f} ms  ({median / sync:.3f}x SYNC)")


if __name__ == "__main__":
    main()
