"""How busy Tune keeps its trial slots: 64 trials that each sleep 1 s, 32 at a time.

Ideal: two waves of 32, 2 s. Target: at least 90% of the 32 slots busy over the whole
Tuner.fit(), i.e. 64 trial-seconds in at most 2.22 s (Ray Tune's users measured under 25%
busy at 32 workers, ray#15504). The baseline measured in the same run is 32 plain threads
doing the same 64 sleeps (what a thread pool costs), besides the ideal 2 s.

Each trial asks for 1/32 of a CPU, as a Ray user asks for trials that only wait: a trial
asks for 1 CPU by default, in lockstep as in Ray, so ``max_concurrent_trials=32`` alone
would run 2 at a time on 2 CPUs (the Tuner warns so).

    python benchmarks/tune_busy_slots.py [--repeats 3]
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import bench

from lockstep import tune

TRIALS, SLOTS, SLEEP_S = 64, 32, 1.0
TARGET = 0.90


def nap(config):  # type: ignore[no-untyped-def]
    time.sleep(config["sleep_s"])
    tune.report({"slept": config["sleep_s"]})


def tuner_once(storage: str, name: str, trials: int = TRIALS, sleep_s: float = SLEEP_S) -> float:
    start = time.perf_counter()
    results = tune.Tuner(
        tune.with_resources(nap, {"cpu": 1 / SLOTS}),
        param_space={"sleep_s": sleep_s, "i": tune.grid_search(list(range(trials)))},
        tune_config=tune.TuneConfig(max_concurrent_trials=SLOTS),
        run_config=tune.RunConfig(storage_path=storage, name=name, verbose=0),
    ).fit()
    took = time.perf_counter() - start
    assert len(results) == trials and results.num_errors == 0
    return took


def threads_once() -> float:
    start = time.perf_counter()
    with ThreadPoolExecutor(SLOTS) as pool:
        list(pool.map(lambda _: time.sleep(SLEEP_S), range(TRIALS)))
    return time.perf_counter() - start


def main() -> None:
    args = bench.options(__doc__, repeats=3).parse_args()
    ideal = TRIALS / SLOTS * SLEEP_S
    storage = tempfile.mkdtemp(prefix="lockstep-bench-busy-")
    try:
        tuner_once(storage, "warm", trials=4, sleep_s=0.0)  # the imports
        walls, plain = [], []
        for repeat in range(args.repeats):
            walls.append(tuner_once(storage, f"run{repeat}"))
            plain.append(threads_once())
    finally:
        shutil.rmtree(storage, ignore_errors=True)
    wall, base = statistics.median(walls), statistics.median(plain)
    busy = ideal / wall
    print(bench.machine_load())
    print(f"ideal: {ideal:.2f} s; {SLOTS} plain threads: median {base:.3f} s")
    print(
        f"Tuner.fit, {TRIALS} trials of {SLEEP_S:g} s, {SLOTS} at a time: median {wall:.3f} s "
        f"over {args.repeats} runs ({', '.join(f'{w:.3f}' for w in walls)})"
    )
    print(
        f"slots busy {busy:.1%} of the wall clock ({wall / ideal:.3f}x the ideal, "
        f"{wall / base:.3f}x the threads) (target: at least {TARGET:.0%}) -> "
        f"{'met' if busy >= TARGET else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
