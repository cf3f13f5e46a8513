"""SklearnTrainer in a real worker: fitted, scored on every dataset, cross-validated,
checkpointed, and the estimator predicting from the checkpoint."""

from __future__ import annotations

import pytest
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import KFold

import lockstep.data as ld
from lockstep.data.preprocessors import StandardScaler
from lockstep.train import BatchPredictor, RunConfig, ScalingConfig
from lockstep.train.sklearn import SklearnPredictor, SklearnTrainer
from tests.integration.gbdt_data import accuracy, breast_cancer, datasets


def run(tmp_path, name="run"):
    return RunConfig(name=name, storage_path=str(tmp_path / "runs"), verbose=0)


def test_breast_cancer_fit_scores_and_cross_validation(tmp_path):
    result = SklearnTrainer(
        estimator=RandomForestClassifier(n_estimators=20, random_state=0),
        datasets=datasets(),
        label_column="target",
        scoring=["accuracy", "f1"],
        cv=KFold(3),
        return_train_score_cv=True,
        run_config=run(tmp_path),
    ).fit()
    metrics = result.metrics  # nested as Ray nests them
    assert metrics["valid"]["test_accuracy"] > 0.9 and metrics["train"]["test_accuracy"] > 0.95
    assert {"test_f1", "score_time"} <= set(metrics["valid"]) and "fit_time" in metrics
    cv = metrics["cv"]
    for name in ("test_accuracy", "test_f1", "train_accuracy", "fit_time", "score_time"):
        assert {name, f"{name}_mean", f"{name}_std"} <= set(cv)
        assert len(cv[name]) == 3  # one value per fold
    assert 0.85 < cv["test_accuracy_mean"] <= 1.0

    model = SklearnTrainer.get_model(result.checkpoint)
    assert model.n_jobs == 1  # set from the worker's CPUs
    _, valid_frame = breast_cancer()
    predicted = BatchPredictor.from_checkpoint(result.checkpoint, SklearnPredictor).predict(
        ld.from_pandas(valid_frame)  # the label column is left out by the predictor
    )
    assert accuracy(predicted.to_pandas()["predictions"], valid_frame["target"]) > 0.9


def test_default_scoring_is_the_estimators_score(tmp_path):
    result = SklearnTrainer(
        estimator=LogisticRegression(max_iter=5000),
        datasets=datasets(),
        label_column="target",
        cv=2,
        preprocessor=StandardScaler([c for c in breast_cancer()[0].columns if c != "target"]),
        run_config=run(tmp_path),
    ).fit()
    metrics = result.metrics
    assert "test_score" in metrics["train"] and {"test_score_mean", "test_score_std"} <= set(
        metrics["cv"]
    )
    assert metrics["valid"]["test_score"] > 0.9
    predictor = SklearnPredictor.from_checkpoint(result.checkpoint)
    _, valid_frame = breast_cancer()
    assert predictor.get_preprocessor() is not None
    predicted = predictor.predict(valid_frame.drop(columns=["target"]))["predictions"]
    assert accuracy(predicted, valid_frame["target"]) > 0.9


def test_parallel_cross_validation_over_the_workers_cpus(tmp_path):
    result = SklearnTrainer(
        estimator=LogisticRegression(max_iter=5000),
        datasets={"train": datasets()["train"]},
        label_column="target",
        scoring={"acc": "accuracy"},
        cv=2,
        parallelize_cv=True,
        params={"C": 0.5},
        scaling_config=ScalingConfig(num_workers=1, resources_per_worker={"CPU": 2}),
        run_config=run(tmp_path),
    ).fit()
    assert result.metrics["cv"]["test_acc_mean"] > 0.85
    assert SklearnTrainer.get_model(result.checkpoint).C == 0.5


def test_unsupervised_estimator_without_label(tmp_path):
    from sklearn.cluster import KMeans

    features = breast_cancer()[0].drop(columns=["target"])
    result = SklearnTrainer(
        estimator=KMeans(n_clusters=2, n_init=2, random_state=0),
        datasets={"train": ld.from_pandas(features)},
        run_config=run(tmp_path),
    ).fit()
    assert result.metrics["train"]["test_score"] < 0  # KMeans.score: minus the inertia
    assert SklearnTrainer.get_model(result.checkpoint).cluster_centers_.shape == (2, 30)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"estimator": RandomForestClassifier}, "estimator instance"),
        ({"scaling_config": ScalingConfig(num_workers=2)}, "fits in one worker.*HINT"),
        ({"scaling_config": ScalingConfig(num_workers=(1, 2))}, r"\(1, 2\).*HINT"),
        ({"datasets": {"valid": None}}, r"fits on datasets\['train'\].*\['valid'\]"),
        ({"datasets": {"train": None, "cv": None}}, "may not be called 'cv'.*HINT"),
        ({"label_column": "label"}, r"'label' is not a column of datasets\['train'\]"),
        ({"scoring": 3}, "scoring must be"),
        ({"cv": 1}, "cv must be a number of folds >= 2"),
        ({"params": [1]}, "params must be a dict"),
    ],
)
def test_bad_arguments_fail_at_construction(kwargs, message):
    defaults = {
        "estimator": RandomForestClassifier(),
        "datasets": {"train": ld.from_pandas(breast_cancer()[0])},
        "label_column": "target",
    }
    with pytest.raises(ValueError, match=message):
        SklearnTrainer(**{**defaults, **kwargs})
