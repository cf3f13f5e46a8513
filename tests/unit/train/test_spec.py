"""Trainers are built from a frozen spec of their arguments."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from lockstep.train import DataParallelTrainer
from lockstep.train.sklearn import SklearnTrainer
from lockstep.train.torch import TorchConfig, TorchTrainer
from lockstep.train.xgboost import XGBoostTrainer


def train_func(config):
    return config


def test_the_spec_is_frozen_and_gives_back_its_arguments():
    spec = TorchTrainer.Spec.of(
        train_loop_per_worker=train_func, train_loop_config={"lr": 1}, torch_config=TorchConfig()
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.train_loop_config = {}  # type: ignore[misc]
    assert TorchTrainer.Spec.of(**spec.arguments()) == spec


def test_arguments_a_trainer_does_not_take_are_refused():
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['backend_config'\]"):
        TorchTrainer(train_func, backend_config=TorchConfig())
    with pytest.raises(TypeError, match=r"\['lr'\]"):
        DataParallelTrainer(train_func, lr=0.1)


def test_extra_keywords_go_to_the_frameworks_own_call():
    spec = XGBoostTrainer.Spec.of(label_column="y", params={}, verbose_eval=True)
    assert spec.train_kwargs == {"verbose_eval": True}
    assert spec.arguments()["verbose_eval"] is True


def test_signatures_list_each_trainers_arguments():
    torch = inspect.signature(TorchTrainer).parameters
    assert "torch_config" in torch and "backend_config" not in torch
    assert torch["train_loop_config"].kind is inspect.Parameter.KEYWORD_ONLY
    sklearn = inspect.signature(SklearnTrainer).parameters
    assert "estimator" in sklearn and "train_loop_per_worker" not in sklearn
    assert sklearn["fit_params"].kind is inspect.Parameter.VAR_KEYWORD


@pytest.mark.parametrize(
    ("module", "trainer", "config", "field"),
    [
        ("lockstep.train.tensorflow", "TensorflowTrainer", "TensorflowConfig", "tensorflow_config"),
        ("lockstep.train.horovod", "HorovodTrainer", "HorovodConfig", "horovod_config"),
    ],
)
def test_framework_trainers_take_their_own_config_and_round_trip(module, trainer, config, field):
    # what Tune and restore() rebuild a trainer from: its spec's arguments
    import importlib

    package = importlib.import_module(module)
    cls, config_cls = getattr(package, trainer), getattr(package, config)
    spec = cls.Spec.of(train_loop_per_worker=train_func, **{field: config_cls()})
    assert cls.Spec.of(**spec.arguments()) == spec
    parameters = inspect.signature(cls).parameters
    assert field in parameters and "backend_config" not in parameters
    with pytest.raises(ValueError, match=f"{field} must be a {config}"):
        cls(train_func, **{field: object()})
