"""Recovery after a worker failure: from the fault to the first report of the new attempt.

A 2-worker TorchTrainer run (DDP over gloo, a small MLP, a checkpoint every epoch) with a
worker fault every few epochs (an exception, ``os._exit``, SIGKILL from outside),
restarted from the latest checkpoint after each. Each fault's time is recorded when it
fires; each report carries its time and rank 0's pid, so the recovery is the time from
the fault to the first report made by a new process. Baseline, in the same run: the fresh
start, from ``fit()`` to the first report. Target: median recovery <= 0.15 s
(Ray Train: 8.8-13.5 s on these machines).

    python benchmarks/recovery.py [--runs 3] [--faults 8] [--kinds raise,exit,kill]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from lockstep.testing import Fault, _chaos, fired_faults


def one_run(storage: str, name: str, kinds: list[str], num_faults: int) -> tuple[float, dict]:
    """Fresh-start time and recovery times by kind of one run with ``num_faults`` faults,
    one every 2 epochs, alternating ranks and kinds."""
    epochs = 2 * num_faults + 2
    faults = [
        Fault(kind=kinds[i % len(kinds)], rank=i % 2, at_epoch=2 * i + 1)  # type: ignore[arg-type]
        for i in range(num_faults)
    ]
    trainer = _chaos.trainer(
        storage,
        name,
        {"epochs": epochs, "faults": faults, "scratch": storage},
        max_failures=num_faults,
    )
    start = time.time()
    result, _ = _chaos.fit(trainer)
    rows = _chaos._rows(result.path)
    recovery: dict[str, list[float]] = {}
    for fault in fired_faults(result.path):
        seconds = _chaos.recovery_time(rows, float(fault["time"]))
        if seconds is not None:
            recovery.setdefault(fault["kind"], []).append(seconds)
    return float(rows[0]["t"]) - start, recovery


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--faults", type=int, default=8, help="faults per run")
    parser.add_argument("--kinds", default="raise,exit,kill")
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    with tempfile.TemporaryDirectory(prefix="lockstep-bench-") as storage:
        _chaos.fit(_chaos.trainer(storage, "warm-up", {"epochs": 1, "scratch": storage}))
        fresh: list[float] = []
        recovery: dict[str, list[float]] = {}
        for n in range(args.runs):
            start, by_kind = one_run(storage, f"run{n}", kinds, args.faults)
            fresh.append(start)
            for kind, times in by_kind.items():
                recovery.setdefault(kind, []).extend(times)
    every = [t for times in recovery.values() for t in times]
    baseline = statistics.median(fresh)
    print(f"2-worker TorchTrainer, {args.runs} runs x {args.faults} faults ({args.kinds})")
    print(f"fresh start (fit() to first report), median      {baseline:.3f} s  (n={len(fresh)})")
    for kind, times in sorted(recovery.items()):
        median = statistics.median(times)
        print(
            f"recovery after {kind:<6} median {median:.3f} s  max {max(times):.3f} s  "
            f"(n={len(times)})  {median / baseline:.2f}x fresh start"
        )
    median = statistics.median(every)
    verdict = "OK" if median <= 0.15 else "over the 0.15 s target"
    print(
        f"recovery, all faults: median {median:.3f} s (n={len(every)}), "
        f"{median / baseline:.2f}x fresh start: {verdict}"
    )


if __name__ == "__main__":
    main()
