"""The demo and every example that resumes from its checkpoints: a run with failures ends
bitwise as a run without them (final checkpoint, every rank's return value, the rows)."""

from __future__ import annotations

import importlib
import pathlib
import sys

import cloudpickle
import pytest

from lockstep.testing import Fault, assert_resume_equivalent
from lockstep.train import RunConfig, ScalingConfig

pytestmark = [pytest.mark.processes, pytest.mark.slow]

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def example(monkeypatch):
    """Import an example by name; its functions travel to the workers by value."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    loaded = []

    def load(name: str):
        module = importlib.import_module(name)
        cloudpickle.register_pickle_by_value(module)
        loaded.append(module)
        return module

    yield load
    for module in loaded:
        cloudpickle.unregister_pickle_by_value(module)
        sys.modules.pop(module.__name__, None)


def run_config(tmp_path) -> RunConfig:
    return RunConfig(storage_path=str(tmp_path), verbose=0)


def test_the_demo_resumes_bitwise_after_failures_and_a_preemption(tmp_path):
    from lockstep.cli._demo import train_func
    from lockstep.train.torch import TorchTrainer

    faults = [
        Fault(kind="raise", rank=1, at_epoch=1),
        Fault(kind="kill", rank=0, at_epoch=3, seconds=0.01),
        Fault(kind="preempt", rank=0, at_epoch=4),
    ]
    result = assert_resume_equivalent(
        train_func,
        faults,
        trainer_cls=TorchTrainer,
        train_loop_config={"epochs": 6, "lr": 0.003, "batch_size": 32, "limit": 300, "seed": 0},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=run_config(tmp_path),
    )
    assert result.metrics["epoch"] == 5
    # every rank's generators are in the checkpoint (each draws its own dropout masks)
    assert sorted(
        p.name for p in (pathlib.Path(result.checkpoint.path) / "rng_state").iterdir()
    ) == ["rank_0.json", "rank_1.json"]


def test_the_convnet_example_resumes_bitwise(tmp_path, example):
    from lockstep.train.torch import TorchTrainer

    convnet = example("torch_convnet_checkpoint")
    assert_resume_equivalent(
        convnet.train_loop_per_worker,
        [Fault(kind="raise", rank=0, at_epoch=1), Fault(kind="exit", rank=1, at_epoch=2)],
        trainer_cls=TorchTrainer,
        train_loop_config={"batch_size": 64, "lr": 1.0, "epochs": 3},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=run_config(tmp_path),
    )


def test_the_quickstart_resumes_bitwise(tmp_path, example):
    quickstart = example("quickstart")
    result = assert_resume_equivalent(
        quickstart.train_func,
        [Fault(kind="raise", rank=1, at_epoch=3), Fault(kind="kill", rank=0, at_epoch=5)],
        train_loop_config={"epochs": 8, "lr": 0.5},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=run_config(tmp_path),
    )
    assert abs(result.return_value["weight"] - 3) < 0.5
