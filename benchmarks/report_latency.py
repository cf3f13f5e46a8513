"""Cost of train.report() without a checkpoint, measured inside the workers.

2 workers x 2000 reports; each worker times every call. Baselines, in the same run: a
spawned process timing 2000 round trips of the same dict over a multiprocessing pipe to
this process, which answers each (report() is one such round trip through the driver);
and the bare barrier, 2 spawned processes doing the same while this process answers
both once both have sent (report() is that barrier plus the run record's row).
Target: p50 under 0.2 ms, though report() is a barrier: a round trip through the driver.

With ``--shard ordered|shuffled`` each worker takes one batch of its dataset shard before
every report, so each report also carries the shard's position (kept for a mid-epoch
resume); ``shuffled`` uses a local shuffle over whole blocks, the most scattered case.

    python benchmarks/report_latency.py [--reports 2000] [--shard ordered|shuffled]
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection as mpc
import statistics
import tempfile
import time

import bench

from lockstep import train
from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig


def timed_reports(config: dict) -> None:
    timings = []
    batches = None
    if config["shard"] != "none":
        shuffle = 10_000 if config["shard"] == "shuffled" else None
        shard = train.get_dataset_shard("train")
        batches = iter(shard.iter_batches(batch_size=32, local_shuffle_buffer_size=shuffle))
    for i in range(config["reports"]):
        if batches is not None:
            next(batches)
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


def pipe_round_trips(n: int) -> list[float]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=timed_round_trips, args=(child, n))
    proc.start()
    for _ in range(n):
        parent.send(parent.recv() is not None)
    timings: list[float] = parent.recv()
    proc.join()
    return timings


def bare_barrier(n: int, workers: int = 2) -> list[float]:
    """What report() is without lockstep: each worker's round trip, answered once every
    worker has sent the same step."""
    ctx = mp.get_context("spawn")
    conns, procs = [], []
    for _ in range(workers):
        parent, child = ctx.Pipe()
        procs.append(ctx.Process(target=timed_round_trips, args=(child, n)))
        procs[-1].start()
        conns.append(parent)
    for _ in range(n):
        waiting = set(conns)
        while waiting:
            for conn in mpc.wait(list(waiting)):
                conn.recv()
                waiting.discard(conn)
        for conn in conns:
            conn.send(True)
    timings = [t for conn in conns for t in conn.recv()]
    for proc in procs:
        proc.join()
    return timings


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1]


class LastStep(train.UserCallback):
    """Keeps every rank's metrics of the last step: each worker's timings."""

    def after_report(self, run_context, metrics, checkpoint):  # type: ignore[no-untyped-def]
        self.metrics = metrics


def main() -> None:
    parser = bench.options(__doc__, reports=2000)
    parser.add_argument("--shard", choices=["none", "ordered", "shuffled"], default="none")
    args = parser.parse_args()
    datasets = {}
    if args.shard != "none":
        import lockstep.data as ld

        datasets = {"train": ld.range(2 * 32 * (args.reports + 1))}
    with tempfile.TemporaryDirectory(prefix="lockstep-bench-") as storage:
        last = LastStep()
        trainer = DataParallelTrainer(
            timed_reports,
            train_loop_config={"reports": args.reports, "shard": args.shard},
            datasets=datasets,
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(storage_path=storage, verbose=0, callbacks=[last]),
        )
        start = time.perf_counter()
        trainer.fit()
        wall = time.perf_counter() - start
    ours = [t for rank in last.metrics for t in rank["timings"]]
    base = pipe_round_trips(args.reports)
    barrier = bare_barrier(args.reports)
    p50, p99 = percentile(ours, 50) * 1e3, percentile(ours, 99) * 1e3
    b50, b99 = percentile(base, 50) * 1e3, percentile(base, 99) * 1e3
    r50, r99 = percentile(barrier, 50) * 1e3, percentile(barrier, 99) * 1e3
    print(f"report() on 2 workers, {len(ours)} calls: p50 {p50:.4f} ms, p99 {p99:.4f} ms")
    print(f"baseline pipe round trip: p50 {b50:.4f} ms, p99 {b99:.4f} ms")
    print(f"baseline bare barrier of 2 processes: p50 {r50:.4f} ms, p99 {r99:.4f} ms")
    print(f"ratio p50 report / round trip: {p50 / b50:.2f}x")
    print(f"ratio p50 report / bare barrier: {p50 / r50:.2f}x")
    print(f"whole fit() with 2 x {args.reports} reports: {wall:.3f} s")
    print(f"p50 under 0.2 ms: {'yes' if p50 < 0.2 else 'NO'}")


if __name__ == "__main__":
    main()
