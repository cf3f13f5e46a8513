"""Overhead of a trivial run: fit() of 2 workers that report 10 times.

Baseline, measured in the same run: two processes started with multiprocessing's spawn
method that each send 10 messages back over a pipe.
Targets: fit() within 1.5x the baseline, and under 0.5 s.

    python benchmarks/overhead.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import tempfile
import time

from lockstep import train
from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig


def report_ten_times() -> None:
    for i in range(10):
        train.report({"i": i})


def send_ten(conn) -> None:  # type: ignore[no-untyped-def]
    for i in range(10):
        conn.send({"i": i})
    conn.close()


def baseline_once() -> float:
    ctx = mp.get_context("spawn")
    start = time.perf_counter()
    pipes, procs = [], []
    for _ in range(2):
        ours, theirs = ctx.Pipe()
        proc = ctx.Process(target=send_ten, args=(theirs,))
        proc.start()
        theirs.close()
        pipes.append(ours)
        procs.append(proc)
    for ours in pipes:
        for _ in range(10):
            ours.recv()
    for proc in procs:
        proc.join()
    return time.perf_counter() - start


def lockstep_once(storage: str, executor: str) -> float:
    trainer = DataParallelTrainer(
        report_ten_times,
        scaling_config=ScalingConfig(num_workers=2, executor=executor),  # type: ignore[arg-type]
        run_config=RunConfig(storage_path=storage, verbose=0),
    )
    start = time.perf_counter()
    result = trainer.fit()
    elapsed = time.perf_counter() - start
    assert result.metrics == {"i": 9}
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--executor", choices=["process", "ray"], default="process")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lockstep-bench-") as storage:
        first = lockstep_once(storage, args.executor)
        ours = [lockstep_once(storage, args.executor) for _ in range(args.repeats)]
        base = [baseline_once() for _ in range(args.repeats)]
    ours_median, base_median = statistics.median(ours), statistics.median(base)
    print(f"lockstep fit(), {args.executor} executor, first in this process: {first:.3f} s")
    print(f"lockstep fit(), median of {args.repeats}: {ours_median:.3f} s")
    print(f"baseline (spawn 2 processes, 10 messages each), median: {base_median:.3f} s")
    print(f"ratio lockstep / baseline: {ours_median / base_median:.2f}x (target <= 1.5x)")
    print(f"under 0.5 s: {'yes' if ours_median < 0.5 else 'NO'}")


if __name__ == "__main__":
    main()
