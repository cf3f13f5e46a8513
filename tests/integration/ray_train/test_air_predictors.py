"""Ported from Ray AIR's python/ray/train/tests/test_predictor.py,
test_sklearn_predictor.py, test_lightgbm_predictor.py and test_torch_predictor.py (Ray 2.0
to 2.6; imports changed to lockstep, every assertion kept). Input batches are built as
Ray's tests build them (numpy, pandas, pyarrow, a dict of arrays).

Left out: test_predictor's test_predict (patches ``ray.train.predictor``'s private
conversion functions); ``use_gpu=True`` cases skip where no CUDA device exists; in
test_freeform_call_model_output, the error of a model that returns a list is raised when
the lazy dataset is read (Ray 2.3 and earlier ran ``BatchPredictor.predict`` eagerly).
"""

from __future__ import annotations

import os
import pickle
import re
import tempfile

import cloudpickle
import lightgbm as lgbm
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch
from sklearn.ensemble import RandomForestClassifier

import lockstep.data as ld
from lockstep.air.checkpoint import Checkpoint
from lockstep.data.preprocessor import Preprocessor
from lockstep.train.batch_predictor import BatchPredictor
from lockstep.train.lightgbm import LightGBMCheckpoint, LightGBMPredictor
from lockstep.train.predictor import Predictor, PredictorNotSerializableException
from lockstep.train.sklearn import SklearnCheckpoint, SklearnPredictor
from lockstep.train.torch import TorchCheckpoint, TorchPredictor
from tests.integration.ray_train.helpers import FlagPreprocessor

MAX_REPR_LENGTH = 120  # ray.air.constants
MODEL_KEY, PREPROCESSOR_KEY = "model", "_preprocessor"
gpu = pytest.param(
    True,
    marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
)

dummy_data = np.array([[1, 2], [3, 4], [5, 6]])
dummy_target = np.array([0, 1, 0])


def as_batch(frame: pd.DataFrame, kind: type):
    """``frame`` as a batch of ``kind``, as Ray's convert_pandas_to_batch_type makes it."""
    if kind is np.ndarray:
        return frame.to_numpy() if len(frame.columns) > 1 else frame.iloc[:, 0].to_numpy()
    if kind is dict:
        return {str(c): frame[c].to_numpy() for c in frame.columns}
    if kind is pa.Table:
        return pa.Table.from_pandas(frame.rename(columns=str))
    return frame


# test_predictor.py


class Doubler(Preprocessor):
    def transform_batch(self, df):
        return df * 2


class DummyPredictor(Predictor):
    def __init__(self, factor: float = 1.0):
        super().__init__(Doubler())
        self.factor = factor

    @classmethod
    def from_checkpoint(cls, checkpoint, **kwargs):
        return cls(**checkpoint.to_dict())

    def _predict_pandas(self, data, **kwargs):
        return data * self.factor


def test_predictor_serialization():
    cloudpickle.dumps(DummyPredictor)  # the class pickles
    with pytest.raises(PredictorNotSerializableException):
        pickle.dumps(DummyPredictor())


def test_predictor_from_checkpoint():
    assert DummyPredictor.from_checkpoint(Checkpoint.from_dict({"factor": 2.0})).factor == 2.0


def test_predictor_kwargs(monkeypatch):
    seen = {}

    def predict_pandas(self, data, **kwargs):
        seen.update(kwargs)
        return data

    monkeypatch.setattr(DummyPredictor, "_predict_pandas", predict_pandas)
    DummyPredictor.from_checkpoint(Checkpoint.from_dict({"factor": 2.0})).predict(
        pd.DataFrame({"x": [1, 2, 3]}), extra_arg=1
    )
    assert seen == {"extra_arg": 1}


# test_sklearn_predictor.py

forest = RandomForestClassifier(n_estimators=10, random_state=0).fit(dummy_data, dummy_target)


def test_sklearn_repr():
    representation = repr(SklearnPredictor(estimator=forest))
    assert len(representation) < MAX_REPR_LENGTH
    assert re.match("^SklearnPredictor\\((.*)\\)$", representation)


def sklearn_checkpoint() -> tuple[Checkpoint, Preprocessor]:
    preprocessor = FlagPreprocessor()
    with tempfile.TemporaryDirectory() as d:
        checkpoint = SklearnCheckpoint.from_estimator(forest, path=d, preprocessor=preprocessor)
        checkpoint = SklearnCheckpoint.from_dict(checkpoint.to_dict())  # outlives the directory
    return checkpoint, preprocessor


def test_sklearn_checkpoint():
    checkpoint, preprocessor = sklearn_checkpoint()
    predictor = SklearnPredictor(estimator=forest, preprocessor=preprocessor)
    from_checkpoint = SklearnPredictor.from_checkpoint(checkpoint)
    assert np.allclose(
        from_checkpoint.estimator.feature_importances_, predictor.estimator.feature_importances_
    )
    assert from_checkpoint.get_preprocessor() == predictor.get_preprocessor()


@pytest.mark.parametrize("batch_type", [np.ndarray, pd.DataFrame, dict])
def test_sklearn_predict(batch_type):
    predictor = SklearnPredictor(estimator=forest, preprocessor=FlagPreprocessor())
    predictions = predictor.predict(as_batch(pd.DataFrame(dummy_data), batch_type))
    assert len(predictions) == 3
    assert predictor.get_preprocessor().has_preprocessed


@pytest.mark.parametrize("batch_type", [np.ndarray, pd.DataFrame])
def test_sklearn_predict_batch(batch_type):
    checkpoint, _ = sklearn_checkpoint()
    predictor = BatchPredictor.from_checkpoint(checkpoint, SklearnPredictor)
    if batch_type is np.ndarray:
        dataset = ld.from_numpy(dummy_data)
    else:
        dataset = ld.from_pandas(pd.DataFrame(dummy_data, columns=["A", "B"]))
    assert predictor.predict(dataset).count() == 3


def test_sklearn_predict_set_cpus():
    predictor = SklearnPredictor(estimator=forest, preprocessor=FlagPreprocessor())
    assert len(predictor.predict(dummy_data, num_estimator_cpus=2)) == 3
    assert predictor.get_preprocessor().has_preprocessed
    assert predictor.estimator.n_jobs == 2


def predicts_on_two_of_three_columns(predictor: Predictor) -> None:
    """Ray's test_predict_feature_columns: a numpy batch, its columns 0 and 1 the features."""
    predictions = predictor.predict(
        np.array([[1, 2, 7], [3, 4, 8], [5, 6, 9]]), feature_columns=[0, 1]
    )
    assert len(predictions) == 3
    assert predictor.get_preprocessor().has_preprocessed


def test_sklearn_predict_feature_columns():
    predicts_on_two_of_three_columns(
        SklearnPredictor(estimator=forest, preprocessor=FlagPreprocessor())
    )


def test_sklearn_predict_feature_columns_pandas():
    model = RandomForestClassifier(n_estimators=10, random_state=0).fit(
        pd.DataFrame(dummy_data, columns=["A", "B"]), pd.Series(dummy_target)
    )
    predictor = SklearnPredictor(estimator=model, preprocessor=FlagPreprocessor())
    batch = pd.DataFrame(np.array([[1, 2, 7], [3, 4, 8], [5, 6, 9]]), columns=["A", "B", "C"])
    assert len(predictor.predict(batch, feature_columns=["A", "B"])) == 3
    assert predictor.get_preprocessor().has_preprocessed


def test_sklearn_predict_no_preprocessor():
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, MODEL_KEY), "wb") as f:  # Ray AIR's file name
            cloudpickle.dump(forest, f)
        predictor = SklearnPredictor.from_checkpoint(Checkpoint.from_directory(d))
    assert len(predictor.predict(dummy_data)) == 3


def test_sklearn_batch_prediction_with_set_cpus():
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, MODEL_KEY), "wb") as f:
            cloudpickle.dump(forest, f)
        batch_predictor = BatchPredictor.from_checkpoint(
            Checkpoint.from_directory(d), SklearnPredictor
        )
        dataset = ld.from_pandas(pd.DataFrame(dummy_data, columns=["A", "B"]))
        assert batch_predictor.predict(dataset, num_estimator_cpus=2).count() == 3


def test_sklearn_predictor_no_training():
    with tempfile.TemporaryDirectory() as d:
        checkpoint = SklearnCheckpoint.from_estimator(forest, path=d)
        batch_predictor = BatchPredictor.from_checkpoint(checkpoint, SklearnPredictor)
        dataset = ld.from_pandas(pd.DataFrame(dummy_data, columns=["A", "B"]))
        assert len(batch_predictor.predict(dataset).to_pandas()) == 3


# test_lightgbm_predictor.py


@pytest.fixture(scope="module")
def booster():
    # Trained when a test needs it, not at import: LightGBM's OpenMP pool, started in this
    # process before its first fit() forks the workers' server, hangs forked workers'
    # LightGBM (a resumed training waits forever).
    return lgbm.LGBMClassifier(n_estimators=10, verbose=-1).fit(dummy_data, dummy_target).booster_


def test_lightgbm_repr(booster):
    representation = repr(LightGBMPredictor(model=booster))
    assert len(representation) < MAX_REPR_LENGTH
    assert re.match("^LightGBMPredictor\\((.*)\\)$", representation)


def test_lightgbm_checkpoint(booster):
    preprocessor = FlagPreprocessor()
    checkpoint = LightGBMCheckpoint.from_model(booster=booster, preprocessor=preprocessor)
    try:
        from_checkpoint = LightGBMPredictor.from_checkpoint(checkpoint)
        predictor = LightGBMPredictor(model=booster, preprocessor=preprocessor)
        assert from_checkpoint.model.current_iteration() == predictor.model.current_iteration()
        assert from_checkpoint.get_preprocessor() == predictor.get_preprocessor()
    finally:
        import shutil

        shutil.rmtree(checkpoint.path)


@pytest.mark.parametrize("batch_type", [np.ndarray, pd.DataFrame, dict])
def test_lightgbm_predict(booster, batch_type):
    predictor = LightGBMPredictor(model=booster, preprocessor=FlagPreprocessor())
    predictions = predictor.predict(as_batch(pd.DataFrame(dummy_data), batch_type))
    assert len(predictions) == 3
    assert predictor.get_preprocessor().has_preprocessed


def test_lightgbm_predict_feature_columns(booster):
    predicts_on_two_of_three_columns(
        LightGBMPredictor(model=booster, preprocessor=FlagPreprocessor())
    )


@pytest.mark.parametrize("to_string", [True, False])
def test_lightgbm_predict_feature_columns_pandas_categorical(to_string):
    frame = pd.DataFrame(dummy_data, columns=["A", "B"])
    batch = pd.DataFrame(np.array([[1, 2, 2], [3, 4, 8], [5, 6, 9]]), columns=["A", "B", "C"])
    for data in (frame, batch):
        if to_string:
            data["A"] = [str(x) for x in data["A"]]
        data["A"] = data["A"].astype("category")
    model = lgbm.LGBMClassifier(n_estimators=10, verbose=-1).fit(frame, pd.Series(dummy_target))
    predictor = LightGBMPredictor(model=model.booster_, preprocessor=FlagPreprocessor())
    assert len(predictor.predict(batch, feature_columns=["A", "B"])) == 3
    assert predictor.get_preprocessor().has_preprocessed


def test_lightgbm_predict_no_preprocessor_no_training(booster):
    checkpoint = LightGBMCheckpoint.from_model(booster=booster)
    try:
        predictor = LightGBMPredictor.from_checkpoint(checkpoint)
    finally:
        import shutil

        shutil.rmtree(checkpoint.path)
    assert len(predictor.predict(dummy_data)) == 3


# test_torch_predictor.py


class Doubles(torch.nn.Module):
    def forward(self, input):
        return input * 2


class Sums(torch.nn.Module):
    def forward(self, input_dict):
        return sum(input_dict.values())


class TwoOutputs(torch.nn.Module):
    def forward(self, input_tensor):
        return {"a": input_tensor, "b": input_tensor}


def test_torch_repr():
    representation = repr(TorchPredictor(model=Doubles()))
    assert len(representation) < MAX_REPR_LENGTH
    assert re.match("^TorchPredictor\\((.*)\\)$", representation)


def test_torch_init():
    model, preprocessor = Doubles(), Doubler()
    predictor = TorchPredictor(model=model, preprocessor=preprocessor)
    checkpoint = Checkpoint.from_dict({MODEL_KEY: model, PREPROCESSOR_KEY: preprocessor})
    from_checkpoint = TorchPredictor.from_checkpoint(checkpoint)
    assert from_checkpoint.model == predictor.model
    assert from_checkpoint.get_preprocessor() == predictor.get_preprocessor()


@pytest.mark.parametrize("use_gpu", [False, gpu])
def test_torch_predict_model_not_training(use_gpu):
    predictor = TorchPredictor(model=Doubles(), use_gpu=use_gpu)
    predictor.predict(np.array([1]))
    assert not predictor.model.training


@pytest.mark.parametrize("batch_type", [np.ndarray, pd.DataFrame, pa.Table, dict])
def test_torch_predict(batch_type):
    predictor = TorchPredictor(model=Sums())
    raw = pd.DataFrame({"X0": [0.0, 0.0, 0.0], "X1": [1.0, 2.0, 3.0]})
    batch = as_batch(raw, batch_type)
    if batch_type is np.ndarray:  # Ray's numpy batch of a frame of two columns is a dict
        batch = as_batch(raw, dict)
    predictions = predictor.predict(batch, dtype=torch.float)
    if isinstance(predictions, pa.Table):
        predictions = predictions.to_pandas()
    assert np.asarray(
        predictions if not hasattr(predictions, "to_numpy") else predictions.to_numpy()
    ).flatten().tolist() == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("batch_type", [pd.DataFrame, pa.Table])
def test_torch_predict_batch(batch_type):
    checkpoint = TorchCheckpoint.from_dict({MODEL_KEY: {}})
    predictor = BatchPredictor.from_checkpoint(checkpoint, TorchPredictor, model=Sums())
    frame = pd.DataFrame([[0.0, 1.0], [0.0, 2.0], [0.0, 3.0]], columns=["X0", "X1"])
    dataset = (
        ld.from_pandas(frame)
        if batch_type is pd.DataFrame
        else ld.from_arrow(pa.Table.from_pandas(frame))
    )
    predictions = predictor.predict(dataset)
    assert predictions.count() == 3
    assert predictions.to_pandas().to_numpy().flatten().tolist() == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("use_gpu", [False, gpu])
def test_torch_predict_array(use_gpu):
    predictions = TorchPredictor(model=Doubles(), use_gpu=use_gpu).predict(np.asarray([1, 2, 3]))
    assert len(predictions) == 3
    assert predictions.flatten().tolist() == [2, 4, 6]


@pytest.mark.parametrize("use_gpu", [False, gpu])
def test_torch_predict_array_with_preprocessor(use_gpu):
    predictor = TorchPredictor(model=Doubles(), preprocessor=Doubler(), use_gpu=use_gpu)
    predictions = predictor.predict(np.array([1, 2, 3]))
    assert len(predictions) == 3
    assert predictions.flatten().tolist() == [4, 8, 12]


@pytest.mark.parametrize("use_gpu", [False, gpu])
def test_torch_predict_dataframe(use_gpu):
    predictor = TorchPredictor(model=Sums(), use_gpu=use_gpu)
    batch = pd.DataFrame({"X0": [0.0, 0.0, 0.0], "X1": [1.0, 2.0, 3.0]})
    predictions = predictor.predict(batch, dtype=torch.float)
    assert len(predictions) == 3
    assert predictions.to_numpy().flatten().tolist() == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("use_gpu", [False, gpu])
def test_torch_predict_multi_output(use_gpu):
    predictions = TorchPredictor(model=TwoOutputs(), use_gpu=use_gpu).predict(np.array([1, 2, 3]))
    assert len(predictions) == 2  # two outputs
    for v in predictions.values():
        assert len(v) == 3
        assert v.flatten().tolist() == [1, 2, 3]


@pytest.mark.parametrize("use_gpu", [False, gpu])
@pytest.mark.parametrize(
    ("input_dtype", "expected_output_dtype"),
    [
        (torch.float16, np.float16),
        (torch.float64, np.float64),
        (torch.int32, np.int32),
        (torch.int64, np.int64),
    ],
)
def test_torch_predict_array_with_different_dtypes(input_dtype, expected_output_dtype, use_gpu):
    predictor = TorchPredictor(model=Doubles(), use_gpu=use_gpu)
    assert predictor.predict(np.array([1, 2, 3]), dtype=input_dtype).dtype == expected_output_dtype


@pytest.mark.parametrize("use_gpu", [False, gpu])
def test_torch_predict_array_no_training(use_gpu):
    checkpoint = TorchCheckpoint.from_model(Doubles())
    try:
        predictor = TorchPredictor.from_checkpoint(checkpoint, use_gpu=use_gpu)
    finally:
        import shutil

        shutil.rmtree(checkpoint.path)
    predictions = predictor.predict(np.array([1, 2, 3]))
    assert len(predictions) == 3
    assert predictions.flatten().tolist() == [2, 4, 6]


@pytest.mark.parametrize("use_gpu", [False, gpu])
def test_torch_array_real_model(use_gpu):
    predictor = TorchPredictor(model=torch.nn.Linear(2, 1), use_gpu=use_gpu)
    assert len(predictor.predict(np.array([[1, 2], [3, 4]]), dtype=torch.float)) == 2


@pytest.mark.parametrize("use_gpu", [False, gpu])
def test_torch_multi_modal_real_model(use_gpu):
    class CustomModule(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear1 = torch.nn.Linear(1, 1)
            self.linear2 = torch.nn.Linear(1, 1)

        def forward(self, input_dict: dict):
            return self.linear1(input_dict["A"].unsqueeze(1)) + self.linear2(
                input_dict["B"].unsqueeze(1)
            )

    predictor = TorchPredictor(model=CustomModule(), use_gpu=use_gpu)
    predictions = predictor.predict(
        pd.DataFrame([[1, 2], [3, 4]], columns=["A", "B"]), dtype=torch.float
    )
    assert len(predictions) == 2
    assert next(predictor.model.parameters()).is_cuda == use_gpu


@pytest.mark.parametrize("use_gpu", [False, gpu])
def test_torch_freeform_call_model_output(use_gpu):
    class CannotConvert(TorchPredictor):
        def call_model(self, tensor):
            return [{"key": output} for output in super().call_model(tensor)]

    class PandasFallThrough(TorchPredictor):
        def call_model(self, tensor):
            return pd.DataFrame([{"key": output} for output in super().call_model(tensor)])

    images = [torch.rand(30, 30, 3).numpy() for _ in range(2)]
    dataset = ld.from_items([{"image": image} for image in images])
    checkpoint = TorchCheckpoint.from_model(model=Doubles())
    try:
        options = {"num_gpus_per_worker": 1 if use_gpu else 0, "feature_columns": ["image"]}
        predictions = BatchPredictor.from_checkpoint(checkpoint, CannotConvert).predict(
            dataset, **options
        )
        with pytest.raises(ValueError, match=r"a pandas.DataFrame as fallthrough"):
            predictions.count()  # the dataset is lazy: the error comes when it is read
        predictions = BatchPredictor.from_checkpoint(checkpoint, PandasFallThrough).predict(
            dataset, **options
        )
        assert predictions.count() == 2
        element = predictions.take(1)
        assert isinstance(element, list)
        assert element[0]["key"].shape == (30, 30, 3)
    finally:
        import shutil

        shutil.rmtree(checkpoint.path)
