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

import multiprocessing
import os
import statistics
import time

import gbdt_data as gbdt
import numpy as np
import pandas as pd
import xgboost

from lockstep.train.xgboost import XGBoostTrainer

PARAMS = {"objective": "binary:logistic", "tree_method": "hist", "eval_metric": "logloss"}


def plain_once(source: pd.DataFrame | str, rounds: int) -> tuple[float, float]:
    """Seconds and final train logloss of xgboost.train(nthread=2) in this process."""
    start = time.perf_counter()
    frame = source if isinstance(source, pd.DataFrame) else pd.read_parquet(source)
    loss = train_logloss(frame, rounds, nthread=2)
    return time.perf_counter() - start, loss


def train_logloss(frame: pd.DataFrame, rounds: int, nthread: int) -> float:
    """xgboost.train on ``frame`` with ``nthread`` threads; the final train logloss."""
    data = xgboost.DMatrix(frame.drop(columns=["label"]), label=frame["label"], nthread=nthread)
    log: dict = {}
    xgboost.train(
        {**PARAMS, "nthread": nthread},
        data,
        num_boost_round=rounds,
        evals=[(data, "train")],
        evals_result=log,
        verbose_eval=False,
    )
    return log["train"]["logloss"][-1]


def _raw_worker(rank: int, args: dict, frame: pd.DataFrame, rounds: int, out) -> None:
    os.sched_setaffinity(0, [sorted(os.sched_getaffinity(0))[rank]])
    xgboost.set_config(nthread=1)
    with xgboost.collective.CommunicatorContext(**args, dmlc_task_id=f"rank-{rank}"):
        out.put(train_logloss(frame, rounds, nthread=1))


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
    return gbdt.trainer_once(XGBoostTrainer, PARAMS, "logloss", source, rounds, storage)


def main() -> None:
    raw: list[float] = []

    def time_raw(frame: pd.DataFrame, rounds: int) -> None:
        if len(os.sched_getaffinity(0)) >= 2:
            raw.append(raw_distributed_once(frame, rounds))

    args, timings = gbdt.compare(__doc__, plain_once, trainer_once, time_raw)
    gbdt.print_comparison(args, timings, "xgboost.train(nthread=2)", "XGBoostTrainer")
    if raw:
        plain_s = statistics.median(t for t, _ in timings.plain)
        ours_s = statistics.median(t for t, _ in timings.trainer)
        raw_s = statistics.median(raw)
        print(
            f"xgboost's distributed mode alone, 2 processes x 1 thread, median of "
            f"{len(raw)}: {raw_s:.2f} s ({raw_s / plain_s:.2f}x plain; trainer / it: "
            f"{ours_s / raw_s:.2f}x)"
        )


if __name__ == "__main__":
    main()
