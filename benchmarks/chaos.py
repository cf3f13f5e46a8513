"""Chaos, the long version of tests/integration/test_chaos.py.

A deterministic 2-worker TorchTrainer model (DDP over gloo, seeded, deterministic
algorithms, a checkpoint every epoch) trained under random faults, each run continued
until it completes:

- worker faults, in this process: an exception, ``os._exit``, a signal to itself, SIGKILL
  from another thread (while the loop goes on), a slow rank, and (when hang detection is
  there, ``FailureConfig(hang_timeout_s=...)``) a hung rank; and per run one SIGKILL of
  rank 0 from this process, after a random number of rows;
- driver deaths: the driver is a separate process, killed with SIGKILL at lockstep's named
  points (start-up, a row durable, mid-commit, a step complete) or from outside after a
  random number of rows, or sent SIGTERM (a scheduler's preemption), or preempted by a
  worker's ``Fault(kind="preempt")``; the run is then continued by running the driver
  again or by ``TorchTrainer.restore(path)``.

Every completed run is compared with an uninterrupted one: final checkpoint and every
rank's final weights bitwise, rows 1..N each once, every committed checkpoint still there,
no process, /dev/shm file or .staging directory left. Prints the table: faults injected by
kind, runs completed, lost checkpoints, runs not bitwise equal, leftovers, and the median
recovery time (from the fault to the first report of the new attempt) per kind.

Defaults: 25 runs x (8 worker faults + 1 kill from this process) (225) and 10 runs x 2
driver kills (20), 12 epochs.

    python benchmarks/chaos.py [--worker-runs 25] [--faults-per-run 8]
                               [--driver-runs 10] [--kills-per-run 2] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time

from lockstep.testing import Fault, _chaos


def driver_kill(rng: random.Random) -> str:
    """A random way to kill the driver."""
    how = rng.choice(["point", "point", "SIGKILL", "SIGTERM"])
    # small counts: a run continued from its checkpoint has few epochs left
    if how != "point":
        return f"{how}:{rng.randrange(1, 4)}"
    point = rng.choice(_chaos.DRIVER_POINTS)
    if point == "run_opened":
        return "point:run_opened"
    return f"point:{point}:{rng.randrange(1, 4)}"


def worker_runs(chaos: _chaos.Chaos, args: argparse.Namespace, rng: random.Random) -> None:
    kinds = list(_chaos.WORKER_KINDS)
    hang_timeout = args.hang_timeout
    if hang_timeout is not None:
        kinds.append("hang")
    for n in range(args.worker_runs):
        faults = _chaos.plan_faults(rng, count=args.faults_per_run, epochs=args.epochs, kinds=kinds)
        chaos.run_worker_faults(
            f"workers{n}",
            faults,
            hang_timeout_s=hang_timeout,
            outside_kills=[rng.randrange(1, 4)],
        )
        print(f"  worker-fault run {n + 1}/{args.worker_runs} done", flush=True)


def driver_runs(chaos: _chaos.Chaos, args: argparse.Namespace, rng: random.Random) -> None:
    for n in range(args.driver_runs):
        kills = [driver_kill(rng) for _ in range(args.kills_per_run)]
        faults = _chaos.plan_faults(rng, count=2, epochs=args.epochs, kinds=_chaos.WORKER_KINDS)
        if n % 3 == 0:  # a worker's preemption of its driver, in every third run
            at = rng.randrange(1, args.epochs - 1)
            faults.append(Fault(kind="preempt", rank=rng.randrange(2), at_epoch=at))
        chaos.run_driver_kills(f"driver{n}", kills, faults, restore=n % 2 == 0)
        print(f"  driver run {n + 1}/{args.driver_runs} ({', '.join(kills)}) done", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker-runs", type=int, default=25)
    parser.add_argument("--faults-per-run", type=int, default=8)
    parser.add_argument("--driver-runs", type=int, default=10)
    parser.add_argument("--kills-per-run", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--hang-timeout", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lockstep-bench-") as storage:
        chaos = _chaos.Chaos(storage, epochs=args.epochs, seed=args.seed)
        worker_runs(chaos, args, rng)
        driver_runs(chaos, args, rng)
    print(f"\nchaos: seed {args.seed}, {time.perf_counter() - start:.0f} s\n")
    print(chaos.tally.table())
    if chaos.tally.problems:
        print("\nproblems:")
        for problem in chaos.tally.problems:
            print(f"- {problem}")


if __name__ == "__main__":
    main()
