"""Cost of train.report() without a checkpoint, measured inside the workers.

2 workers x 2000 reports; each worker times every call. Baseline, in the same run: a
spawned process timing 2000 round trips of the same dict over a multiprocessing pipe to
this process, which answers each (report() is one such round trip through the driver).
Target: p50 under 0.2 ms, though report() is a barrier: a round trip through the driver.

    python benchmarks/report_latency.py [--reports 2000]
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import tempfile
import time

import bench

from lockstep import train
from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig


def timed_reports(config: dict) -> None:
    timings = []
    for i in range(config["reports"]):
        start = time.perf_counter()
        train.report({"step": i, "loss": 1.0 / (i + 1), "lr": 0.001})
        timings.append(time.perf_counter() - start)
    train.report({"timings": timings})


def timed_round_trips(conn, n: int) -> None:  # type: ignore[no-untyped-def]
    timings = []
    for i in range(n):
        start = time.perf_counter()
        conn.send({"step": i, "loss": 1.0 / (i + 1), "lr": 0.001})
        conn.recv()
        timings.append(time.perf_counter() - start)
    conn.send(timings)


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1]


class LastStep(train.UserCallback):
    """Keeps every rank's metrics of the last step: each worker's timings."""

    def after_report(self, run_context, metrics, checkpoint):  # type: ignore[no-untyped-def]
        self.metrics = metrics


def main() -> None:
    args = bench.options(__doc__, reports=2000).parse_args()
    with tempfile.TemporaryDirectory(prefix="lockstep-bench-") as storage:
        last = LastStep()
        trainer = DataParallelTrainer(
            timed_reports,
            train_loop_config={"reports": args.reports},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(storage_path=storage, verbose=0, callbacks=[last]),
        )
        start = time.perf_counter()
        trainer.fit()
        wall = time.perf_counter() - start
    ours = [t for rank in last.metrics for t in rank["timings"]]
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=timed_round_trips, args=(child, args.reports))
    proc.start()
    for _ in range(args.reports):
        parent.send(parent.recv() is not None)
    base = parent.recv()
    proc.join()
    p50, p99 = percentile(ours, 50) * 1e3, percentile(ours, 99) * 1e3
    b50, b99 = percentile(base, 50) * 1e3, percentile(base, 99) * 1e3
    print(f"report() on 2 workers, {len(ours)} calls: p50 {p50:.4f} ms, p99 {p99:.4f} ms")
    print(f"baseline pipe round trip: p50 {b50:.4f} ms, p99 {b99:.4f} ms")
    print(f"ratio p50 report / round trip: {p50 / b50:.2f}x")
    print(f"whole fit() with 2 x {args.reports} reports: {wall:.3f} s")
    print(f"p50 under 0.2 ms: {'yes' if p50 < 0.2 else 'NO'}")


if __name__ == "__main__":
    main()
