"""Breast-cancer data for the GBDT tests, and their trainers in the classic form."""

from __future__ import annotations

import pandas as pd
from sklearn.datasets import load_breast_cancer

import lockstep.data as ld
from lockstep.train import BatchPredictor, RunConfig, ScalingConfig

NUM_TRAIN = 400
TWO = ScalingConfig(num_workers=2)


def breast_cancer() -> tuple[pd.DataFrame, pd.DataFrame]:
    """The 569 rows, shuffled once: 400 to train on, 169 to validate."""
    frame = load_breast_cancer(as_frame=True)["frame"].sample(frac=1.0, random_state=0)
    frame = frame.reset_index(drop=True)
    return frame.iloc[:NUM_TRAIN], frame.iloc[NUM_TRAIN:].reset_index(drop=True)


def datasets() -> dict[str, ld.Dataset]:
    train_frame, valid_frame = breast_cancer()
    return {"train": ld.from_pandas(train_frame), "valid": ld.from_pandas(valid_frame)}


def run(tmp_path, name="run", **kwargs) -> RunConfig:
    return RunConfig(name=name, storage_path=str(tmp_path / "runs"), verbose=0, **kwargs)


def classic_trainer(trainer_cls, params, tmp_path, **kwargs):
    """``trainer_cls`` in the classic form on 2 workers, on the breast-cancer datasets."""
    defaults = {
        "datasets": datasets(),
        "label_column": "target",
        "params": params,
        "scaling_config": TWO,
        "run_config": run(tmp_path),
    }
    return trainer_cls(**{**defaults, **kwargs})


def fit_resumed(classic, tmp_path, first, num_boost_round, name):
    """The result of ``classic`` resuming from ``first``'s checkpoint, as run ``name``."""
    return classic(
        tmp_path,
        num_boost_round=num_boost_round,
        resume_from_checkpoint=first.checkpoint,
        run_config=run(tmp_path, name),
    ).fit()


def fit_then_resume(classic, tmp_path, first_rounds, total_rounds):
    """The results of ``classic`` fitting ``first_rounds`` rounds (run "first"), then resuming
    from its checkpoint to ``total_rounds`` (run "second"), which reports only the rounds
    that were missing."""
    first = classic(tmp_path, num_boost_round=first_rounds, run_config=run(tmp_path, "first")).fit()
    resumed = fit_resumed(classic, tmp_path, first, total_rounds, "second")
    assert len(resumed.metrics_dataframe) == total_rounds - first_rounds
    return first, resumed


def batch_predicted_accuracy(checkpoint, predictor_cls) -> float:
    """The accuracy on the validation rows of BatchPredictor with ``predictor_cls``."""
    _, valid_frame = breast_cancer()
    predicted = BatchPredictor.from_checkpoint(checkpoint, predictor_cls).predict(
        ld.from_pandas(valid_frame.drop(columns=["target"]))
    )
    return accuracy(predicted.to_pandas()["predictions"], valid_frame["target"])


def accuracy(predictions: pd.Series, labels: pd.Series) -> float:
    return float(((predictions.to_numpy() > 0.5) == labels.to_numpy()).mean())
