"""How fast a driver stopped by SIGTERM exits: told, one more checkpoint, every process gone.

A 2-worker run (a step every 50 ms, a checkpoint reported on the preemption notice) is
sent SIGTERM at its fifth step; the time from the signal to the driver's exit is measured
from outside. Baseline, in the same run: the time from starting the same script to its
first report (a fresh start). Target: the exit well within the deadline (30 s by default).

    python benchmarks/preemption.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

SCRIPT = textwrap.dedent("""
    import os, sys, tempfile, time
    from lockstep import train
    from lockstep.train import Checkpoint, DataParallelTrainer, RunConfig, ScalingConfig

    def train_func():
        saved = False
        for step in range(10_000):
            time.sleep(0.05)
            if train.get_preemption_info() is not None and not saved:
                saved = True
                with tempfile.TemporaryDirectory() as d:
                    open(os.path.join(d, "step"), "w").write(str(step))
                    train.report({"step": step}, checkpoint=Checkpoint.from_directory(d))
            else:
                train.report({"step": step})

    DataParallelTrainer(
        train_func, scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="bench", storage_path=sys.argv[1]),
    ).fit()
""")


def one_run(script: str, storage: str) -> tuple[float, float]:
    """(seconds from start to the first report, seconds from SIGTERM to exit)."""
    env = {**os.environ, "LOCKSTEP_PROGRESS_INTERVAL_S": "0"}
    started = time.perf_counter()
    driver = subprocess.Popen(
        [sys.executable, script, storage], stderr=subprocess.PIPE, text=True, env=env
    )
    assert driver.stderr is not None
    first = None
    for line in driver.stderr:
        if first is None and "| iter 1 |" in line:
            first = time.perf_counter() - started
        if "| iter 5 |" in line:
            break
    sent = time.perf_counter()
    driver.send_signal(signal.SIGTERM)
    driver.communicate(timeout=120)
    assert driver.returncode == 130, driver.returncode
    assert first is not None
    return first, time.perf_counter() - sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lockstep-bench-") as tmp:
        script = os.path.join(tmp, "driver.py")
        with open(script, "w") as f:
            f.write(SCRIPT)
        runs = [one_run(script, os.path.join(tmp, f"runs{i}")) for i in range(args.repeats)]
    start = statistics.median(r[0] for r in runs)
    stop = statistics.median(r[1] for r in runs)
    print(f"fresh start to first report (baseline): {start:.2f} s (median of {len(runs)})")
    print(f"SIGTERM to driver exit, checkpoint included: {stop:.2f} s")
    print(f"ratio exit / fresh start: {stop / start:.2f}; deadline 30 s")


if __name__ == "__main__":
    main()
