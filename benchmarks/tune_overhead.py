"""Overhead of Tune on trivial trials: 8 function trials of 5 reports each, 2 at a time.

Target: Tuner.fit() under 1 s on a 2-core machine (Ray Tune 2.60 takes 10.2 s there). The
baseline, measured in the same run, is the same 8 functions called one after the other
with a report that does nothing: the ratio is Tune's cost per experiment over the work.

    python benchmarks/tune_overhead.py [--repeats 5]
"""

from __future__ import annotations

import statistics
import tempfile
import time

import bench

from lockstep import tune


def objective(config, report=tune.report):  # type: ignore[no-untyped-def]
    for step in range(5):
        report({"score": config["x"] * step})


def tuner_once() -> float:
    with tempfile.TemporaryDirectory() as storage:
        start = time.perf_counter()
        tune.Tuner(
            objective,
            param_space={"x": tune.grid_search(list(range(8)))},
            tune_config=tune.TuneConfig(max_concurrent_trials=2),
            run_config=tune.RunConfig(storage_path=storage, verbose=0),
        ).fit()
        return time.perf_counter() - start


def baseline_once() -> float:
    start = time.perf_counter()
    for x in range(8):
        objective({"x": x}, report=lambda metrics: None)
    return time.perf_counter() - start


def main() -> None:
    args = bench.options(__doc__, repeats=5).parse_args()
    tuner_once()  # warm the imports
    tuner = [tuner_once() for _ in range(args.repeats)]
    baseline = [baseline_once() for _ in range(args.repeats)]
    median = statistics.median(tuner)
    print(
        f"Tuner.fit, 8 trials x 5 reports, 2 at a time: median {median:.3f} s "
        f"(min {min(tuner):.3f} s) over {args.repeats} repeats"
    )
    print(f"baseline (the functions alone): median {statistics.median(baseline) * 1e3:.3f} ms")
    print(f"target: under 1 s -> {'met' if median < 1.0 else 'NOT met'} ({median / 1.0:.2f}x)")


if __name__ == "__main__":
    main()
