"""XGBoostTrainer with 2 workers of 1 thread each vs plain xgboost.train(nthread=2).

Synthetic binary classification, 400k rows x 30 features, 50 rounds of ``hist``; both
sides evaluate the train logloss every round. The baseline builds one DMatrix and trains
in this process; the trainer starts 2 workers that each build a DMatrix of their half and
train one model together (xgboost's collective). Where the data starts:

* ``--source memory`` (default): a pandas DataFrame in this process; the trainer gets
  ``lockstep.data.from_pandas(frame)`` and ships each worker its half.
* ``--source parquet``: 8 parquet files written once before timing; the baseline reads
  them with pandas, the trainer's workers each read their own half.

Targets: wall-time ratio trainer / baseline <= 1.2; final train logloss within 1%.

Also timed, for reference: xgboost's own distributed mode without lockstep (2 forked
processes of 1 thread, each bound to a CPU, in one collective with a tracker in this
process), which is the floor for any data-parallel trainer: the ratio of lockstep to it is
lockstep's own cost.

    python benchmarks/xgboost_scale.py [--source memory|parquet] [--rows 400000]
        [--rounds 50] [--repeats 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import tempfile
import time

import numpy as np
import pandas as pd
import xgboost
from gbdt_data import make_data, write_parquet

import lockstep.data as ld
from lockstep.train import RunConfig, ScalingConfig
from lockstep.train.xgboost import XGBoostTrainer

PARAMS = {"objective": "binary:logistic", "tree_method": "hist", "eval_metric": "logloss"}


def plain_once(source: pd.DataFrame | str, rounds: int) -> tuple[float, float]:
    """Seconds and final train logloss of xgboost.train(nthread=2) in this process."""
    start = time.perf_counter()
    frame = source if isinstance(source, pd.DataFrame) else pd.read_parquet(source)
    data = xgboost.DMatrix(frame.drop(columns=["label"]), label=frame["label"], nthread=2)
    log: dict = {}
    xgboost.train(
        {**PARAMS, "nthread": 2},
        data,
        num_boost_round=rounds,
        evals=[(data, "train")],
        evals_result=log,
        verbose_eval=False,
    )
    return time.perf_counter() - start, log["train"]["logloss"][-1]


def _raw_worker(rank: int, args: dict, frame: pd.DataFrame, rounds: int, out) -> None:
    os.sched_setaffinity(0, [sorted(os.sched_getaffinity(0))[rank]])
    xgboost.set_config(nthread=1)
    with xgboost.collective.CommunicatorContext(**args, dmlc_task_id=f"rank-{rank}"):
        data = xgboost.DMatrix(frame.drop(columns=["label"]), label=frame["label"], nthread=1)
        log: dict = {}
        xgboost.train(
            {**PARAMS, "nthread": 1},
            data,
            num_boost_round=rounds,
            evals=[(data, "train")],
            evals_result=log,
            verbose_eval=False,
        )
        out.put(log["train"]["logloss"][-1])


def raw_distributed_once(frame: pd.DataFrame, rounds: int) -> float:
    """Seconds of xgboost's distributed mode on 2 forked processes, no framework."""
    start = time.perf_counter()
    tracker = xgboost.tracker.RabitTracker(n_workers=2, host_ip="127.0.0.1", port=0)
    tracker.start()
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    halves = np.array_split(np.arange(len(frame)), 2)
    workers = [
        context.Process(
            target=_raw_worker, args=(r, tracker.worker_args(), frame.iloc[h], rounds, out)
        )
        for r, h in enumerate(halves)
    ]
    for worker in workers:
        worker.start()
    losses = [out.get() for _ in workers]
    for worker in workers:
        worker.join()
    tracker.wait_for()
    tracker.free()
    assert len(set(losses)) == 1
    return time.perf_counter() - start


def trainer_once(source: pd.DataFrame | str, rounds: int, storage: str) -> tuple[float, float]:
    """Seconds and final train logloss of XGBoostTrainer, 2 workers x 1 thread."""
    start = time.perf_counter()
    in_memory = isinstance(source, pd.DataFrame)
    dataset = ld.from_pandas(source) if in_memory else ld.read_parquet(source)
    trainer = XGBoostTrainer(
        datasets={"train": dataset},
        label_column="label",
        params=PARAMS,
        num_boost_round=rounds,
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(storage_path=storage, verbose=0),
    )
    result = trainer.fit()
    elapsed = time.perf_counter() - start
    assert result.metrics is not None
    return elapsed, result.metrics["train-logloss"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", choices=["memory", "parquet"], default="memory")
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    frame = make_data(args.rows)
    plain, ours, raw = [], [], []
    with tempfile.TemporaryDirectory(prefix="lockstep-bench-") as tmp:
        storage = os.path.join(tmp, "runs")
        os.makedirs(os.path.join(tmp, "data"))
        source = frame if args.source == "memory" else write_parquet(frame, f"{tmp}/data")
        first = trainer_once(source, args.rounds, storage)[0]  # starts the fork server
        for _ in range(args.repeats):  # alternate, so that load changes hit both alike
            plain.append(plain_once(source, args.rounds))
            ours.append(trainer_once(source, args.rounds, storage))
            if args.source == "memory" and len(os.sched_getaffinity(0)) >= 2:
                raw.append(raw_distributed_once(frame, args.rounds))
    plain_s = statistics.median(t for t, _ in plain)
    ours_s = statistics.median(t for t, _ in ours)
    plain_loss, ours_loss = plain[-1][1], ours[-1][1]
    gap = abs(ours_loss - plain_loss) / plain_loss
    print(f"data: {args.rows} rows x 30 features from {args.source}, {args.rounds} rounds of hist")
    print(f"plain xgboost.train(nthread=2), median of {args.repeats}: {plain_s:.2f} s")
    print(f"XGBoostTrainer, 2 workers x 1 thread, median of {args.repeats}: {ours_s:.2f} s")
    print(f"XGBoostTrainer, first fit in this process: {first:.2f} s")
    print(f"wall-time ratio trainer / plain: {ours_s / plain_s:.2f}x (target <= 1.2x)")
    if raw:
        raw_s = statistics.median(raw)
        print(
            f"xgboost's distributed mode alone, 2 processes x 1 thread, median of "
            f"{len(raw)}: {raw_s:.2f} s ({raw_s / plain_s:.2f}x plain; trainer / it: "
            f"{ours_s / raw_s:.2f}x)"
        )
    print(
        f"final train logloss: plain {plain_loss:.5f}, trainer {ours_loss:.5f}, "
        f"difference {100 * gap:.2f}% (target <= 1%)"
    )


if __name__ == "__main__":
    main()
