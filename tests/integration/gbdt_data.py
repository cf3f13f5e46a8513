"""Breast-cancer data for the GBDT tests, and a callback that sees every rank's metrics."""

from __future__ import annotations

import pandas as pd
from sklearn.datasets import load_breast_cancer

import lockstep.data as ld
from lockstep import train

NUM_TRAIN = 400


def breast_cancer() -> tuple[pd.DataFrame, pd.DataFrame]:
    """The 569 rows, shuffled once: 400 to train on, 169 to validate."""
    frame = load_breast_cancer(as_frame=True)["frame"].sample(frac=1.0, random_state=0)
    frame = frame.reset_index(drop=True)
    return frame.iloc[:NUM_TRAIN], frame.iloc[NUM_TRAIN:].reset_index(drop=True)


def datasets() -> dict[str, ld.Dataset]:
    train_frame, valid_frame = breast_cancer()
    return {"train": ld.from_pandas(train_frame), "valid": ld.from_pandas(valid_frame)}


def accuracy(predictions: pd.Series, labels: pd.Series) -> float:
    return float(((predictions.to_numpy() > 0.5) == labels.to_numpy()).mean())


class EveryRank(train.UserCallback):
    """Keeps every report's metrics of every rank."""

    def __init__(self) -> None:
        self.steps: list[list[dict]] = []

    def after_report(self, run_context, metrics, checkpoint):
        self.steps.append(metrics)
