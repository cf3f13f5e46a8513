"""Tune with OptunaSearch against plain Optuna: the same trivial objective, 100 trials.

Both use TPE with the same seed. Target: Tuner.fit() at most 2x plain ``study.optimize``
measured in the same run, for 100 and for 10,000 trials (Ray Tune's users measured 22.7 s
against 0.10 s for 100, ray#11004). Tuner.fit() includes writing every trial's run
directory (params.json, result.json, progress.csv, run_state.json), the experiment state
and the study's SQLite copy (``optuna.db``), which is also timed on its own.

The runs alternate (Tune, Optuna, Tune, ...), so that a change in the machine's load
falls on both; the medians are compared, wall clock and CPU time (all threads, and the
process OptunaSearch's study runs in while the experiment runs). Every
experiment directory is kept until the last run has ended: deleting thousands of files
just before the next run makes ext4 scan the inodes it just freed at every file it
creates (several times a trial's own cost), which measures the benchmark's cleanup.

A function trial's run creates 5 files (its directory, params.json, result.json,
progress.csv, run_state.json). What creating one costs depends on the filesystem
more than on lockstep: on ext4 without a journal, a directory whose block group holds many
recently deleted inodes (a shared /tmp) takes 0.3-0.9 ms a file where another takes 20 us.
So the cost of creating a file where the experiment is written is printed too, measured in
the same run; ``--storage DIR`` puts the experiments in DIR (a temporary directory by
default).

    python benchmarks/tune_vs_optuna.py [--trials 100] [--repeats 5] [--storage DIR]
    python benchmarks/tune_vs_optuna.py --trials 10000 --repeats 1   # about 10 min each
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time

import bench
import optuna

from lockstep import tune
from lockstep.tune.search.optuna import OptunaSearch

TARGET = 2.0


def loss(x: float, y: float) -> float:
    return (x - 2.0) ** 2 + (y + 1.0) ** 2


def objective(config):  # type: ignore[no-untyped-def]
    tune.report({"loss": loss(config["x"], config["y"])})


def timed(run):  # type: ignore[no-untyped-def]
    """``run()``'s wall clock and CPU time (every thread of this process, and of the
    child processes it waited for: the search process), in seconds."""
    before, start = os.times(), time.perf_counter()
    value = run()
    after = os.times()
    cpu = sum(after[i] - before[i] for i in range(4))  # user, system, children's
    return time.perf_counter() - start, cpu, value


def tuner_once(trials: int, storage: str, name: str) -> tuple[float, float, float]:
    """Wall and CPU time of one Tuner.fit(), and of copying its study to SQLite again."""
    search = OptunaSearch(seed=0)
    tuner = tune.Tuner(
        objective,
        param_space={"x": tune.uniform(-5, 5), "y": tune.uniform(-5, 5)},
        tune_config=tune.TuneConfig(
            metric="loss", mode="min", search_alg=search, num_samples=trials
        ),
        run_config=tune.RunConfig(storage_path=storage, name=name, verbose=0),
    )
    wall, cpu, results = timed(tuner.fit)
    check_written(results, trials, os.path.join(storage, name))
    copy, _, _ = timed(lambda: search.save_to_sqlite(os.path.join(storage, f"{name}.db")))
    return wall, cpu, copy


def check_written(results, trials: int, path: str) -> None:  # type: ignore[no-untyped-def]
    """Every trial's result, its row on disk, and the experiment state are there."""
    assert len(results) == trials and results.num_errors == 0
    for result in results:
        assert "loss" in result.metrics
    rows = [os.path.join(r.path, "result.json") for r in results]
    assert all(os.path.getsize(row) > 0 for row in rows)
    for name in ("experiment_state.pkl", "optuna.db", "trial_events.jsonl"):
        assert os.path.exists(os.path.join(path, name)), name


def optuna_once(trials: int) -> tuple[float, float]:
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def run() -> None:
        study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0))
        study.optimize(
            lambda t: loss(t.suggest_float("x", -5, 5), t.suggest_float("y", -5, 5)),
            n_trials=trials,
        )

    wall, cpu, _ = timed(run)
    return wall, cpu


def file_creation_us(storage: str, count: int = 200) -> float:
    """Microseconds to create (and write 100 bytes to) one file in a new directory of
    ``storage``, as a trial's run does; the files stay until the end, as the trials'."""
    folder = tempfile.mkdtemp(prefix="files-", dir=storage)
    start = time.perf_counter()
    for n in range(count):
        with open(os.path.join(folder, f"f{n}"), "wb") as f:
            f.write(b"x" * 100)
    return (time.perf_counter() - start) / count * 1e6


def main() -> None:
    parser = bench.options(__doc__, trials=100, repeats=5)
    parser.add_argument("--storage", default=None, help="where the experiments go")
    args = parser.parse_args()
    storage = tempfile.mkdtemp(prefix="lockstep-bench-tune-", dir=args.storage)
    try:
        tuner_once(5, storage, "warm")  # the imports, Optuna's SQLite template
        optuna_once(5)
        creation = file_creation_us(storage)
        ours, plain = [], []
        for repeat in range(args.repeats):
            ours.append(tuner_once(args.trials, storage, f"run{repeat}"))
            plain.append(optuna_once(args.trials))
    finally:
        shutil.rmtree(storage, ignore_errors=True)
    wall, cpu, copy = (statistics.median(r[i] for r in ours) for i in range(3))
    base_wall, base_cpu = (statistics.median(r[i] for r in plain) for i in range(2))
    print(bench.machine_load())
    print(f"creating a file in {os.path.dirname(storage)}: {creation:.0f} us (a trial creates 5)")
    print(
        f"plain optuna, {args.trials} trials: median {base_wall:.3f} s "
        f"(CPU {base_cpu:.3f} s) over {args.repeats} runs"
    )
    print(
        f"Tuner + OptunaSearch, {args.trials} trials: median {wall:.3f} s (CPU {cpu:.3f} s; "
        f"the SQLite copy of the study alone: {copy:.3f} s)"
    )
    ratio = wall / base_wall
    print(
        f"ratio {ratio:.2f}x wall clock, {cpu / base_cpu:.2f}x CPU (target: at most "
        f"{TARGET:g}x wall clock) -> {'met' if ratio <= TARGET else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
