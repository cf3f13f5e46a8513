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

import time

import gbdt_data as gbdt
import lightgbm
import pandas as pd

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
    return gbdt.trainer_once(LightGBMTrainer, PARAMS, "binary_logloss", source, rounds, storage)


def main() -> None:
    args, timings = gbdt.compare(__doc__, plain_once, trainer_once)
    gbdt.print_comparison(args, timings, "lightgbm.train(num_threads=2)", "LightGBMTrainer")


if __name__ == "__main__":
    main()
