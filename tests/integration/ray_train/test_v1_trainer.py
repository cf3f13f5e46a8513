"""Ported from Ray 1.x's python/ray/train/tests/test_trainer.py, the ``Trainer`` API
(imports changed to lockstep, Ray's cluster fixtures dropped, every assertion kept; runs
write into the test's directory).

Left out, for needing Ray's internals (``ray.available_resources``, patched
``BackendExecutor``/``WorkerGroup``, ``trainer._backend_executor``, ``ray.kill``,
``StartTraceback``, fake GPUs): test_start_shutdown, test_env_var, test_fast_slow,
test_mismatch_report, test_mismatch_checkpoint(_report), test_run_iterator_error,
test_user_error, test_worker_failure_*, test_worker_start_failure, test_max_failures,
test_worker_kill(_checkpoint), test_run_after_user_error, test_dataset_fault_tolerance,
test_resources, test_gpu_requests, test_to_worker_group. Not applicable: the assertions on
Ray 1.x's ``checkpoints`` directory (lockstep keeps checkpoints in the run's directory),
test_torch_auto_unwrap (reports a model as a metric: metrics are JSON here), and the
dataset tests, written for Ray 1.x's datasets of plain integers (``range(n)`` has an
``id`` column now).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import lockstep.train as train
from lockstep.air import CheckpointConfig
from lockstep.train import Trainer
from lockstep.train.backend import Backend, BackendConfig
from lockstep.train.callbacks.callback import TrainingCallback


class TestConfig(BackendConfig):
    @property
    def backend_cls(self):
        return TestBackend


class TestBackend(Backend):
    def on_start(self, worker_group, backend_config):
        pass

    def on_shutdown(self, worker_group, backend_config):
        pass


class TestCallback(TrainingCallback):
    def __init__(self):
        self.result_list = []

    def handle_result(self, results, **info):
        self.result_list.append(results)


@pytest.fixture
def started(tmp_path):
    """A started Trainer of two workers, with the test backend."""
    trainer = Trainer(TestConfig(), num_workers=2, logdir=str(tmp_path / "logdir"))
    trainer.start()
    yield trainer
    trainer.shutdown()


def test_run(started):
    assert started.run(lambda: 1) == [1, 1]


def test_run_config(started):
    assert started.run(lambda config: config["fruit"], {"fruit": "banana"}) == ["banana"] * 2


def test_report(started):
    def train_func():
        for i in range(3):
            train.report(index=i)
        return 1

    callback = TestCallback()
    assert started.run(train_func, callbacks=[callback]) == [1, 1]
    assert len(callback.result_list) == 3
    for index, results in enumerate(callback.result_list):
        assert [r["index"] for r in results] == [index, index]


def reports_three_times():
    for i in range(3):
        train.report(index=i)
    return 1


def test_run_iterator(started):
    iterator = started.run_iterator(reports_three_times)
    count = 0
    for results in iterator:
        assert all(value["index"] == count for value in results)
        count += 1
    assert count == 3
    assert iterator.is_finished()
    assert iterator.get_final_results() == [1, 1]
    with pytest.raises(StopIteration):
        next(iterator)


def test_run_iterator_returns(started):
    iterator = started.run_iterator(reports_three_times)
    assert iterator.get_final_results() is None  # not finished: Ray 1.x says so and returns None
    assert iterator.get_final_results(force=True) == [1, 1]
    with pytest.raises(StopIteration):
        next(iterator)


def test_no_exhaust(started):
    def train_func():
        for _ in range(2):
            train.report(loss=1)
        return 2

    assert started.run_iterator(train_func).get_final_results(force=True) == [2, 2]


def test_checkpoint(started):
    def train_func():
        assert train.load_checkpoint() is None
        for i in range(3):
            train.save_checkpoint(epoch=i)
        return 1

    started.run(train_func)
    assert started.latest_checkpoint == started.best_checkpoint
    checkpoint = started.latest_checkpoint
    assert checkpoint is not None and checkpoint["epoch"] == 2

    def train_func_checkpoint():
        checkpoint = train.load_checkpoint()
        assert checkpoint is not None and checkpoint["epoch"] == 2
        for i in range(checkpoint["epoch"], 5):
            train.save_checkpoint(epoch=i)
        return 1

    started.run(train_func_checkpoint, checkpoint=checkpoint)
    assert started.latest_checkpoint == started.best_checkpoint
    assert started.latest_checkpoint["epoch"] == 4


def test_load_checkpoint(started):
    def train_func_checkpoint():
        checkpoint = train.load_checkpoint()
        assert checkpoint is not None and checkpoint["epoch"] == 3
        return list(range(checkpoint["epoch"], 5))

    assert started.run(train_func_checkpoint, checkpoint={"epoch": 3}) == [[3, 4], [3, 4]]


@pytest.mark.parametrize("logdir", [None, "trainer/test_persisted_checkpoint", "~"])
def test_persisted_checkpoint(tmp_path, monkeypatch, logdir):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # "~" and the default storage in here
    monkeypatch.setenv("LOCKSTEP_STORAGE_PATH", str(tmp_path / "default"))
    if logdir == "~":
        logdir = "~/tmp/test/trainer/test_persisted_checkpoint"
    elif logdir is not None:
        logdir = str(tmp_path / logdir)

    def train_func():
        for i in range(2):
            train.save_checkpoint(epoch=i)

    trainer = Trainer(TestConfig(), num_workers=2, logdir=logdir)
    trainer.start()
    trainer.run(train_func)
    assert trainer.best_checkpoint_path is not None
    if logdir is not None:
        assert trainer.logdir == Path(logdir).expanduser().resolve()
    assert trainer.latest_checkpoint_dir.is_dir()
    assert trainer.best_checkpoint_path.is_dir()
    assert trainer.best_checkpoint_path.name == f"checkpoint_{2:06d}"
    # Ray 1.x's `best_checkpoint_path.parent.name == "checkpoints"`: here the run's directory
    assert trainer.best_checkpoint_path.parent == trainer.latest_run_dir
    assert trainer.best_checkpoint == trainer.latest_checkpoint
    latest_checkpoint = trainer.latest_checkpoint

    def validate():
        assert train.load_checkpoint() == latest_checkpoint

    trainer.run(validate, checkpoint=trainer.best_checkpoint_path)
    trainer.shutdown()


def test_persisted_checkpoint_strategy(tmp_path):
    logdir = tmp_path / "test_persisted_checkpoint_strategy"
    strategy = CheckpointConfig(
        num_to_keep=2, checkpoint_score_attribute="loss", checkpoint_score_order="min"
    )

    def train_func():
        train.save_checkpoint(loss=float("nan"))  # nan, deleted
        train.save_checkpoint(loss=3)  # best
        train.save_checkpoint(loss=7)  # worst, deleted
        train.save_checkpoint(loss=5)

    trainer = Trainer(TestConfig(), num_workers=2, logdir=str(logdir))
    trainer.start()
    trainer.run(train_func, checkpoint_strategy=strategy)
    assert trainer.logdir == logdir.resolve()
    assert trainer.latest_checkpoint_dir.is_dir()
    assert trainer.best_checkpoint_path.is_dir()
    assert trainer.best_checkpoint_path.name == f"checkpoint_{2:06d}"
    assert trainer.latest_checkpoint["loss"] == 5
    assert trainer.best_checkpoint["loss"] == 3
    names = [f.name for f in trainer.latest_checkpoint_dir.iterdir() if f.is_dir()]
    assert sorted(names) == [f"checkpoint_{2:06d}", f"checkpoint_{4:06d}"]

    def validate():
        assert train.load_checkpoint()["loss"] == 3

    trainer.run(validate, checkpoint=trainer.best_checkpoint_path)
    trainer.shutdown()


def test_load_checkpoint_from_path(started):
    def train_func_checkpoint():
        train.save_checkpoint(loss=3)
        train.save_checkpoint(loss=7)

    strategy = CheckpointConfig(checkpoint_score_attribute="loss", checkpoint_score_order="min")
    started.run(train_func_checkpoint, checkpoint_strategy=strategy)
    assert started.best_checkpoint["loss"] == 3
    assert (
        Trainer.load_checkpoint_from_path(started.best_checkpoint_path) == started.best_checkpoint
    )


def test_persisted_checkpoint_strategy_failure(started):
    with pytest.raises(ValueError):
        started.run(
            lambda: train.save_checkpoint(epoch=0),
            checkpoint_strategy=CheckpointConfig(num_to_keep=-1),
        )
    with pytest.raises(ValueError):
        CheckpointConfig(checkpoint_score_order="invalid_order")
    # Ray 1.x also raised a ValueError for a score attribute missing from the saved state;
    # here the run fails with the worker's misuse as the cause
    with pytest.raises(train.WorkerGroupError) as raised:
        started.run(
            lambda: train.save_checkpoint(epoch=0),
            checkpoint_strategy=CheckpointConfig(checkpoint_score_attribute="missing_attribute"),
        )
    assert isinstance(raised.value.__cause__, ValueError)


def test_world_rank(started):
    assert set(started.run(train.world_rank)) == {0, 1}


def test_torch_amp(tmp_path):
    def train_fn():
        train.torch.accelerate(amp=True)
        model = train.torch.prepare_model(torch.nn.Linear(1, 1))
        return model.module  # a model prepared with amp pickles

    trainer = Trainer("torch", 2, logdir=str(tmp_path))
    trainer.start()
    (first, second) = trainer.run(train_fn)
    trainer.shutdown()
    assert isinstance(first, torch.nn.Linear) and isinstance(second, torch.nn.Linear)


def test_torch_amp_with_custom_get_state(tmp_path):
    def train_fn():
        train.torch.accelerate(amp=True)

        class CustomLinear(torch.nn.Linear):
            def __getstate__(self):
                return self.__dict__.copy()

        return train.torch.prepare_model(CustomLinear(1, 1)).module

    trainer = Trainer("torch", 2, logdir=str(tmp_path))
    trainer.start()
    models = trainer.run(train_fn)
    trainer.shutdown()
    assert [type(m).__name__ for m in models] == ["CustomLinear", "CustomLinear"]


@pytest.mark.slow
def test_horovod_simple(tmp_path):
    import horovod.torch as hvd_torch

    def simple_fn():
        hvd_torch.init()
        return hvd_torch.rank()

    trainer = Trainer("horovod", 2, logdir=str(tmp_path))
    trainer.start()
    result = trainer.run(simple_fn)
    trainer.shutdown()
    assert result == [0, 1]


def test_init_failure():
    with pytest.raises(TypeError):
        Trainer(5, num_workers=2)
    with pytest.raises(ValueError):
        Trainer("invalid", num_workers=2)


def test_start_failure():
    with pytest.raises(ValueError):
        Trainer("torch", num_workers=0).start()


def test_run_failure(tmp_path):
    trainer = Trainer(TestConfig(), num_workers=2, logdir=str(tmp_path))
    with pytest.raises(RuntimeError):
        trainer.run(lambda: 1)  # not started
    trainer.start()
    with pytest.raises(ValueError):
        trainer.run(lambda a, b: None)
    trainer.shutdown()


def test_start_max_failures(tmp_path):
    def init_hook_fail():
        import sys

        sys.exit(0)

    trainer = Trainer(TestConfig(), num_workers=2, logdir=str(tmp_path))
    with pytest.raises(RuntimeError):
        trainer.start(initialization_hook=init_hook_fail)


def test_initialization_hook_runs_before_each_function(tmp_path):
    """Not in Ray's file: what the hook set is there when the function runs."""
    import os

    trainer = Trainer(TestConfig(), num_workers=2, logdir=str(tmp_path))
    trainer.start(initialization_hook=lambda: os.environ.update(LST_HOOK="ran"))
    assert trainer.run(lambda: os.environ.get("LST_HOOK")) == ["ran", "ran"]
    trainer.shutdown()


def test_multiple_run(started):
    assert started.run(lambda: 1) == [1, 1]
    assert started.run(lambda: 2) == [2, 2]


def test_dataset_pipeline_epochs_in_native_format(started):
    """Ray's test_dataset_pipeline, on the tabular ``range``: each epoch of the pipeline
    shard reads in Ray 2.0's ``native`` format (the block), every row once per epoch."""
    import lockstep.data as ld

    def get_dataset():
        epochs = train.get_dataset_shard().iter_epochs()
        data = []
        for _ in range(2):
            batches = next(epochs).iter_batches(batch_format="native")
            data.append([i for batch in batches for i in batch.column("id").to_pylist()])
        return data

    results = started.run(get_dataset, dataset=ld.range(10).repeat())
    for epoch in range(2):
        assert sorted(i for worker in results for i in worker[epoch]) == list(range(10))
