"""Overhead of a trivial run: fit() of 2 workers that report 10 times.

Local processes (default): the baseline, measured in the same run, is two processes started
with multiprocessing's spawn method that each send 10 messages back over a pipe.
Targets: fit() within 1.5x the baseline, and under 0.5 s.

On Ray (--executor ray): on a running Ray instance (RAY_ADDRESS, else a local one is
started), against the same job with Ray Train 2.x (V2) when it is installed.
Target: lockstep's fit() under 0.25x Ray Train's.

    python benchmarks/overhead.py [--repeats 5] [--executor ray]
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import tempfile
import time

import bench

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


def ray_train_once(storage: str) -> float:
    """The same job with Ray Train's own DataParallelTrainer (V2)."""
    from ray import train as ray_train
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer as RayTrainer

    def report_ten_times_on_ray_train() -> None:
        for i in range(10):
            ray_train.report({"i": i})

    trainer = RayTrainer(
        report_ten_times_on_ray_train,
        scaling_config=ray_train.ScalingConfig(num_workers=2),
        run_config=ray_train.RunConfig(storage_path=storage),
    )
    start = time.perf_counter()
    trainer.fit()
    return time.perf_counter() - start


def on_ray(repeats: int) -> None:
    import ray

    ray.init(log_to_driver=False)
    with tempfile.TemporaryDirectory(prefix="lockstep-bench-") as storage:
        first = lockstep_once(storage, "ray")
        ours = statistics.median([lockstep_once(storage, "ray") for _ in range(repeats)])
        try:
            theirs = ray_train_once(storage)
        except ImportError:
            theirs = None
    print(f"lockstep fit() on Ray, first: {first:.3f} s, median of {repeats}: {ours:.3f} s")
    if theirs is None:
        print("Ray Train is not installed: pip install 'ray[train]' to compare")
        return
    print(f"Ray Train 2.x fit() of the same job: {theirs:.3f} s")
    print(f"ratio lockstep / Ray Train: {ours / theirs:.3f}x (target < 0.25x)")


def main() -> None:
    parser = bench.options(__doc__, repeats=5)
    parser.add_argument("--executor", choices=["process", "ray"], default="process")
    args = parser.parse_args()
    if args.executor == "ray":
        on_ray(args.repeats)
        return
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
