"""Cost of train.report() without a checkpoint, measured inside the workers.

2 workers x 2000 reports; each worker times every call. Baselines, in the same run: a
spawned process timing 2000 round trips of the same dict over a multiprocessing pipe to
this process, which answers each; and the bare barrier, 2 spawned processes doing the
same while this process answers both once both have sent (what report() promises: a
barrier, plus the run record's row; local workers keep it among themselves, the last to
arrive writing the row, and the driver takes the reports in batches, off their way).
Targets: p50 at most 1.5x the bare barrier measured in the same run, p99 at most 3x its
p99 (the two alternate, ``--repeats`` runs of each, and the median runs are compared);
the time ledger's own work per report (timed alone, the run's noise would hide it) at
most 5% of the p50.
With ``--hang-timeout-s S``, the same run also times report() with hang detection on
(``FailureConfig(hang_timeout_s=S)``) and prints its p50 against the run without it.

With ``--shard ordered|shuffled`` each worker takes one batch of its dataset shard before
every report, so each report also carries the shard's position (kept for a mid-epoch
resume); ``shuffled`` uses a local shuffle over whole blocks, the most scattered case.

    python benchmarks/report_latency.py [--reports 2000] [--shard ordered|shuffled]
        [--hang-timeout-s 600] [--repeats 3]
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import tempfile
import time
from typing import NamedTuple

import bench

from lockstep import train
from lockstep._internal.controller.hang import HangPolicy
from lockstep.train import DataParallelTrainer, FailureConfig, RunConfig, ScalingConfig


def timed_reports(config: dict) -> None:
    timings = []
    batches = None
    if config["shard"] != "none":
        shuffle = 10_000 if config["shard"] == "shuffled" else None
        shard = train.get_dataset_shard("train")
        batches = iter(shard.iter_batches(batch_size=32, local_shuffle_buffer_size=shuffle))
    cpu = time.process_time()
    for i in range(config["reports"]):
        if batches is not None:
            next(batches)
        start = time.perf_counter()
        train.report({"step": i, "loss": 1.0 / (i + 1), "lr": 0.001})
        timings.append(time.perf_counter() - start)
    train.report({"timings": timings, "cpu_s": time.process_time() - cpu})


def timed_round_trips(conn, n: int) -> None:  # type: ignore[no-untyped-def]
    timings = []
    cpu = time.process_time()
    for i in range(n):
        start = time.perf_counter()
        conn.send({"step": i, "loss": 1.0 / (i + 1), "lr": 0.001})
        conn.recv()
        timings.append(time.perf_counter() - start)
    conn.send((timings, time.process_time() - cpu))


def pipe_round_trips(n: int) -> list[float]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=timed_round_trips, args=(child, n))
    proc.start()
    for _ in range(n):
        parent.send(parent.recv() is not None)
    timings: list[float] = parent.recv()[0]
    proc.join()
    return timings


def bare_barrier(n: int, workers: int = 2) -> tuple[list[float], CpuPerStep]:
    """What report() is without lockstep: each worker's round trip, answered once every
    worker has sent the same step; and the CPU each side spent per step."""
    ctx = mp.get_context("spawn")
    conns, procs = [], []
    for _ in range(workers):
        parent, child = ctx.Pipe()
        procs.append(ctx.Process(target=timed_round_trips, args=(child, n)))
        procs[-1].start()
        conns.append(parent)
    cpu = time.process_time()
    bench.answer_barrier(conns, n)
    driver_s = time.process_time() - cpu
    answers = [conn.recv() for conn in conns]
    for proc in procs:
        proc.join()
    workers_s = [cpu_s for _, cpu_s in answers]
    return [t for timings, _ in answers for t in timings], CpuPerStep(driver_s, workers_s, n)


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1]


class CpuPerStep(NamedTuple):
    """The CPU seconds the driver and each worker spent over ``steps`` steps."""

    driver_s: float
    workers_s: list[float]
    steps: int

    def describe(self) -> str:
        driver = self.driver_s / self.steps * 1e6
        workers = [w / self.steps * 1e6 for w in self.workers_s]
        total = driver + sum(workers)
        listed = " + ".join(f"{w:.1f}" for w in workers)
        return f"driver {driver:.1f} us + workers {listed} us = {total:.1f} us"


class LastStep(train.UserCallback):
    """Keeps every rank's metrics of the last step (each worker's timings), and the
    driver's CPU time from the first step to the last."""

    def __init__(self) -> None:
        self.cpu: list[float] = []

    def after_report(self, run_context, metrics, checkpoint):  # type: ignore[no-untyped-def]
        self.metrics = metrics
        self.cpu[1:] = [time.process_time()]
        if len(self.cpu) == 1:
            self.cpu.append(self.cpu[0])


def run_reports(
    reports: int, shard: str = "none", hang_timeout_s: float | None = None
) -> tuple[list[float], float, CpuPerStep]:
    """Every worker's report() timings, the whole fit()'s seconds, and the CPU each side
    spent per step."""
    datasets = {}
    if shard != "none":
        import lockstep.data as ld

        datasets = {"train": ld.range(2 * 32 * (reports + 1))}
    with tempfile.TemporaryDirectory(prefix="lockstep-bench-") as storage:
        last = LastStep()
        trainer = DataParallelTrainer(
            timed_reports,
            train_loop_config={"reports": reports, "shard": shard},
            datasets=datasets,
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(
                storage_path=storage,
                verbose=0,
                callbacks=[last],
                failure_config=FailureConfig(hang_timeout_s=hang_timeout_s),
            ),
        )
        start = time.perf_counter()
        trainer.fit()
        wall = time.perf_counter() - start
    cpu = CpuPerStep(last.cpu[1] - last.cpu[0], [rank["cpu_s"] for rank in last.metrics], reports)
    return [t for rank in last.metrics for t in rank["timings"]], wall, cpu


def compare_hang_detection(reports: int, hang_timeout_s: float, repeats: int) -> None:
    """p50 of report() with hang detection on, against off, alternating runs; the
    median over the runs of each (one run's p50 moves by 10-20% on a loaded machine)."""
    off, on = [], []
    for _ in range(repeats):
        off.append(percentile(run_reports(reports)[0], 50) * 1e3)
        on.append(percentile(run_reports(reports, hang_timeout_s=hang_timeout_s)[0], 50) * 1e3)
    for name, runs in (("off", off), ("on: ", on)):
        listed = ", ".join(f"{x:.4f}" for x in runs)
        print(f"hang detection {name} p50 {statistics.median(runs):.4f} ms (runs: {listed})")
    cost = statistics.median(on) / statistics.median(off) - 1
    print(f"cost of hang detection: {cost * 100:+.1f}% of report latency (target under 5%)")
    # The machine's noise can hide a cost this small: time the watchdog's own work per
    # step of 2 workers (2 reports seen as progress, 2 polls checking the clock) alone.
    watch = HangPolicy(hang_timeout_s)
    watch.reset(num_workers=0)
    n = 200_000
    start = time.perf_counter()
    for _ in range(n):
        watch.progress()
        watch.decide()
        watch.progress()
        watch.decide()
    per_step = (time.perf_counter() - start) / n * 1e3
    print(
        f"the watchdog's own work per step: {per_step * 1e3:.2f} us, "
        f"{per_step / statistics.median(off) * 100:.2f}% of the p50 without it"
    )


def ledger_cost_per_report(reports: int = 200_000) -> float:
    """The time ledger's own work per report of 2 workers, in seconds: the driver's (each
    report's timings, each step's figures, and their pwrite to time.bin, which the driver
    makes once a batch of steps: here every 100th step, at least ten times as often as in
    a run of steps this short) and each worker's (timing its report, keeping its phase
    page)."""
    from lockstep._internal.controller.ledger import RUNNING, Ledger
    from lockstep._internal.execution.messages import Report
    from lockstep._internal.execution.worker.phases import REPORT, TRAINING, PhasePage

    ledger = Ledger()
    ledger.attempt_starting(2, from_checkpoint=False)
    ledger.enter(RUNNING)
    page = PhasePage.create()
    assert page is not None
    made = [Report(r, 0, {}, False, 0.0, timings=(0.001, 0.0, 0.0, "")) for r in (0, 1)]
    with tempfile.NamedTemporaryFile(prefix="lockstep-bench-") as hot:
        start = time.perf_counter()
        for step in range(reports // 2):
            for report in made:  # the driver, per report
                ledger.on_report(report, time.monotonic())
            ledger.on_step(step, 1, time.monotonic())  # per step
            if step % 100 == 0:  # per batch (ReportHandler.catch_up)
                os.pwrite(hot.fileno(), ledger.current(), 0)
            for _ in made:  # each worker, per report
                entered = time.monotonic()
                page.set(REPORT, step)
                timings = (entered - time.monotonic(), 0.0, 0.0, "")
                page.set(TRAINING)
        per_report = (time.perf_counter() - start) / reports
    page.close()
    del timings
    return per_report


def _median_index(values: list[float]) -> int:
    return sorted(range(len(values)), key=values.__getitem__)[len(values) // 2]


def _listed(values: list[float]) -> str:
    return ", ".join(f"{v:.4f}" for v in values)


def main() -> None:
    parser = bench.options(__doc__, reports=2000)
    parser.add_argument("--shard", choices=["none", "ordered", "shuffled"], default="none")
    parser.add_argument("--hang-timeout-s", type=float, default=None)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each, alternating")
    args = parser.parse_args()
    if args.hang_timeout_s is not None:
        compare_hang_detection(args.reports, args.hang_timeout_s, args.repeats)
        return
    # One run's p50 moves by 10-20% with the machine's noise, and the bare barrier's
    # between two levels (37 or 58 us here, by where the scheduler puts the processes):
    # alternate the two, and compare the runs' medians.
    runs, barriers = [], []
    for _ in range(args.repeats):
        runs.append(run_reports(args.reports, args.shard))
        barriers.append(bare_barrier(args.reports))
    base = pipe_round_trips(args.reports)
    p50s = [percentile(timings, 50) * 1e3 for timings, _, _ in runs]
    r50s = [percentile(timings, 50) * 1e3 for timings, _ in barriers]
    ours, wall, our_cpu = runs[_median_index(p50s)]
    barrier, bare_cpu = barriers[_median_index(r50s)]
    p50, p99 = percentile(ours, 50) * 1e3, percentile(ours, 99) * 1e3
    b50, b99 = percentile(base, 50) * 1e3, percentile(base, 99) * 1e3
    r50, r99 = percentile(barrier, 50) * 1e3, percentile(barrier, 99) * 1e3
    print(f"report() on 2 workers, {len(ours)} calls: p50 {p50:.4f} ms, p99 {p99:.4f} ms")
    print(f"baseline pipe round trip: p50 {b50:.4f} ms, p99 {b99:.4f} ms")
    print(f"baseline bare barrier of 2 processes: p50 {r50:.4f} ms, p99 {r99:.4f} ms")
    print(f"each run's p50 (ms), report(): {_listed(p50s)}; bare barrier: {_listed(r50s)}")
    print(f"ratio p50 report / round trip: {p50 / b50:.2f}x")
    print(f"ratio p50 report / bare barrier: {p50 / r50:.2f}x")
    print(f"whole fit() with 2 x {args.reports} reports: {wall:.3f} s")
    print(f"p50 within 1.5x the bare barrier: {'yes' if p50 <= 1.5 * r50 else 'NO'}")
    print(f"p99 within 3x the bare barrier's p99: {'yes' if p99 <= 3 * r99 else 'NO'}")
    # Three processes take turns on the machine's cores: where there are fewer than three,
    # a step cannot take less than the CPU all of them spend on it, shared out.
    print(f"CPU per step, report(): {our_cpu.describe()}")
    print(f"CPU per step, bare barrier: {bare_cpu.describe()}")
    ledger = ledger_cost_per_report() * 1e3
    print(
        f"the time ledger's own work per report: {ledger * 1e3:.2f} us, "
        f"{ledger / p50 * 100:.1f}% of this run's p50 (target: at most 5%)"
    )


if __name__ == "__main__":
    main()
