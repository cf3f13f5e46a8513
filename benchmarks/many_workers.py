"""Many local workers: N workers of a trivial function x 50 reports, start included.

For N = 8, 32, 64, 128 (and 256 with --max 256) the table gives fit()'s wall time per
rank-report (target: at most 150 us at N = 128), the driver's CPU time per message
(a report or a worker's start, end: flat in N when the driver's work per message does
not grow with the number of workers), and each idle worker's memory: its proportional
set size (PSS: pages shared with the fork server and the other workers count a share),
read from /proc/self/smaps_rollup when the function starts (target: under 40 MiB without
torch), in a run of its own that is not timed: the read walks the worker's page tables,
about 0.7 ms of CPU a worker, 5% of the figure at N = 128. The baseline, in the same
run: N processes forked with multiprocessing that each send 50 messages to this process
and get an answer to each once all N sent theirs (the bare barrier at N).

    python benchmarks/many_workers.py [--reports 50] [--max 128] [--repeats 3]
"""

from __future__ import annotations

import multiprocessing as mp
import resource
import statistics
import sys
import tempfile
import time

import bench

from lockstep import train
from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig


def pss_mib() -> float:
    """This process's proportional set size, in MiB."""
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def trivial(config: dict) -> float:
    memory = pss_mib() if config["memory"] else 0.0
    for i in range(config["reports"]):
        train.report({"i": i})
    return memory


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def lockstep_once(
    num_workers: int, reports: int, storage: str, *, memory: bool = False
) -> tuple[float, float, float]:
    """fit()'s wall seconds, the driver's CPU seconds, and (with ``memory``) the mean idle
    PSS (MiB)."""
    from lockstep.testing import fit_all_ranks

    trainer = DataParallelTrainer(
        trivial,
        train_loop_config={"reports": reports, "memory": memory},
        scaling_config=ScalingConfig(num_workers=num_workers),
        run_config=RunConfig(storage_path=storage, verbose=0),
    )
    cpu, start = cpu_s(), time.perf_counter()
    memories = fit_all_ranks(trainer)
    wall = time.perf_counter() - start
    return wall, cpu_s() - cpu, statistics.mean(memories)


def bare_worker(conn, reports: int) -> None:  # type: ignore[no-untyped-def]
    for i in range(reports):
        conn.send({"i": i})
        conn.recv()


def bare_once(num_workers: int, reports: int) -> float:
    """N forked processes, each 50 round trips answered once all N sent: the wall time."""
    ctx = mp.get_context("fork")
    start = time.perf_counter()
    conns, procs = [], []
    for _ in range(num_workers):
        ours, theirs = ctx.Pipe()
        proc = ctx.Process(target=bare_worker, args=(theirs, reports))
        proc.start()
        conns.append(ours)
        procs.append(proc)
    bench.answer_barrier(conns, reports)
    for proc in procs:
        proc.join()
    return time.perf_counter() - start


def main() -> None:
    parser = bench.options(__doc__, reports=50, max=128, repeats=3)
    args = parser.parse_args()
    sizes = [n for n in (8, 32, 64, 128, 256) if n <= args.max]
    print(
        f"{'N':>4} {'fit() s':>8} {'us/rank-report':>15} {'bare s':>7} {'ratio':>6} "
        f"{'driver us/msg':>14} {'PSS MiB/worker':>15}"
    )
    with tempfile.TemporaryDirectory(prefix="lockstep-bench-") as storage:
        lockstep_once(2, args.reports, storage)  # the fork server, started once
        for n in sizes:
            runs = [lockstep_once(n, args.reports, storage) for _ in range(args.repeats)]
            wall = statistics.median(r[0] for r in runs)
            cpu = statistics.median(r[1] for r in runs)
            memory = lockstep_once(n, args.reports, storage, memory=True)[2]
            bare = statistics.median(bare_once(n, args.reports) for _ in range(args.repeats))
            messages = n * (args.reports + 2)  # the reports, each start and each end
            per = wall / (n * args.reports) * 1e6
            print(
                f"{n:>4} {wall:>8.3f} {per:>15.0f} {bare:>7.3f} {wall / bare:>6.2f} "
                f"{cpu / messages * 1e6:>14.1f} {memory:>15.1f}",
                flush=True,
            )
    print("targets: at most 150 us per rank-report at N = 128; PSS under 40 MiB per worker")


if __name__ == "__main__":
    sys.exit(main())
