"""LightGBMTrainer with 2 workers of 1 thread each vs plain lightgbm.train(num_threads=2).

Synthetic binary classification, 400k rows x 30 features (the data of
benchmarks/xgboost_scale.py), 50 rounds; both sides evaluate the train logloss every
round. The baseline builds one Dataset and trains in this process; the trainer starts 2
workers that each build a Dataset of their half and train one model together (LightGBM's
data-parallel learner over its sockets). Where the data starts:

* ``--source memory`` (default): a pandas DataFrame in this process; the trainer gets
  ``lockstep.data.from_pandas(frame)`` and ships each worker its half.
* ``--source parquet``: 8 parquet files written once before timing; the baseline reads
  them with pandas, the trainer's workers each read their own half.

Targets: wall-time ratio trainer / baseline <= 1.2; final train logloss within 1%.

    python benchmarks/lightgbm_scale.py [--source memory|parquet] [--rows 400000]
        [--rounds 50] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import lightgbm
import pandas as pd
from gbdt_data import make_data, write_parquet

import lockstep.data as ld
from lockstep.train import RunConfig, ScalingConfig
from lockstep.train.lightgbm import LightGBMTrainer

PARAMS = {"objective": "binary", "metric": "binary_logloss", "verbose": -1}


def plain_once(source: pd.DataFrame | str, rounds: int) -> tuple[float, float]:
    """Seconds and final train logloss of lightgbm.train(num_threads=2) in this process."""
    start = time.perf_counter()
    frame = source if isinstance(source, pd.DataFrame) else pd.read_parquet(source)
    params = {**PARAMS, "num_threads": 2}
    data = lightgbm.Dataset(frame.drop(columns=["label"]), label=frame["label"], params=params)
    log: dict = {}
    lightgbm.train(
        params,
        data,
        num_boost_round=rounds,
        valid_sets=[data],
        valid_names=["train"],
        callbacks=[lightgbm.record_evaluation(log)],
    )
    return time.perf_counter() - start, log["train"]["binary_logloss"][-1]


def trainer_once(source: pd.DataFrame | str, rounds: int, storage: str) -> tuple[float, float]:
    """Seconds and final train logloss of LightGBMTrainer, 2 workers x 1 thread."""
    start = time.perf_counter()
    in_memory = isinstance(source, pd.DataFrame)
    dataset = ld.from_pandas(source) if in_memory else ld.read_parquet(source)
    trainer = LightGBMTrainer(
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
    return elapsed, result.metrics["train-binary_logloss"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", choices=["memory", "parquet"], default="memory")
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    frame = make_data(args.rows)
    plain, ours = [], []
    with tempfile.TemporaryDirectory(prefix="lockstep-bench-") as tmp:
        storage = os.path.join(tmp, "runs")
        os.makedirs(os.path.join(tmp, "data"))
        source = frame if args.source == "memory" else write_parquet(frame, f"{tmp}/data")
        first = trainer_once(source, args.rounds, storage)[0]  # starts the fork server
        for _ in range(args.repeats):  # alternate, so that load changes hit both alike
            plain.append(plain_once(source, args.rounds))
            ours.append(trainer_once(source, args.rounds, storage))
    plain_s = statistics.median(t for t, _ in plain)
    ours_s = statistics.median(t for t, _ in ours)
    plain_loss, ours_loss = plain[-1][1], ours[-1][1]
    gap = abs(ours_loss - plain_loss) / plain_loss
    print(f"data: {args.rows} rows x 30 features from {args.source}, {args.rounds} rounds")
    print(f"plain lightgbm.train(num_threads=2), median of {args.repeats}: {plain_s:.2f} s")
    print(f"LightGBMTrainer, 2 workers x 1 thread, median of {args.repeats}: {ours_s:.2f} s")
    print(f"LightGBMTrainer, first fit in this process: {first:.2f} s")
    print(f"wall-time ratio trainer / plain: {ours_s / plain_s:.2f}x (target <= 1.2x)")
    print(
        f"final train logloss: plain {plain_loss:.5f}, trainer {ours_loss:.5f}, "
        f"difference {100 * gap:.2f}% (target <= 1%)"
    )


if __name__ == "__main__":
    main()
