"""Behaviour that follows Ray where lockstep used to differ (each found by Ray's tests)."""

from __future__ import annotations

import functools
import os
import tempfile
import threading

import pytest

from lockstep import train
from lockstep.train import (
    Backend,
    BackendConfig,
    Checkpoint,
    CheckpointConfig,
    DataParallelTrainer,
    FailureConfig,
    Result,
    RunConfig,
    ScalingConfig,
    SyncConfig,
    TrainingFailedError,
)
from tests.helpers import fit_on

fit = functools.partial(fit_on, DataParallelTrainer)


def test_best_checkpoints_are_the_num_to_keep_best_only(tmp_path):
    def train_func():
        for loss in [5.0, 1.0, 4.0, 3.0]:
            with tempfile.TemporaryDirectory(prefix="lockstep-test-") as d:
                train.report({"loss": loss}, checkpoint=Checkpoint.from_directory(d))

    config = RunConfig(
        name="best",
        storage_path=str(tmp_path),
        verbose=0,
        checkpoint_config=CheckpointConfig(
            num_to_keep=1, checkpoint_score_attribute="loss", checkpoint_score_order="min"
        ),
    )
    result = fit(train_func, config)
    for r in (result, Result.from_path(result.path)):
        assert [(os.path.basename(c.path), m) for c, m in r.best_checkpoints] == [
            ("checkpoint_000001", {"loss": 1.0})
        ]
        # the latest stays on disk (a restart resumes from it) and is result.checkpoint
        assert os.path.basename(r.checkpoint.path) == "checkpoint_000003"
    on_disk = sorted(n for n in os.listdir(result.path) if n.startswith("checkpoint_"))
    assert on_disk == ["checkpoint_000001", "checkpoint_000003"]


def test_tensor_and_numpy_metrics_are_stored_as_numbers(run_config):
    def train_func():
        import numpy as np
        import torch

        train.report({"t": torch.tensor(0.5), "n": np.float64(2.0), "a": np.array([7])})

    result = fit(train_func, run_config)
    assert result.metrics == {"t": 0.5, "n": 2.0, "a": 7}


def test_a_return_value_that_cannot_be_pickled_is_dropped_with_a_warning(run_config):
    def train_func():
        return threading.Lock()

    with pytest.warns(UserWarning, match=r"returned a lock, which cannot be pickled.*HINT"):
        result = fit(train_func, run_config)
    assert result.return_value is None


class UnpicklableBackendConfig(BackendConfig):
    @property
    def backend_cls(self):
        return UnpicklableBackend


class UnpicklableBackend(Backend):
    def __init__(self, config):
        super().__init__(config)
        self.lock = threading.Lock()


def test_a_backend_that_cannot_be_pickled_fails_at_fit(run_config):
    trainer = DataParallelTrainer(
        lambda: None, backend_config=UnpicklableBackendConfig(), run_config=run_config
    )
    with pytest.raises(ValueError, match=r"backend_config.*cannot be pickled"):
        trainer.fit()


def test_rays_backend_hooks_are_called(tmp_path, run_config):
    """Ray's test_backend_setup, with only the imports changed."""

    class ValidationBackend(Backend):
        def on_start(self, worker_group, backend_config):
            tmp_path.joinpath("on_start").write_text(str(len(worker_group)))

        def on_training_start(self, worker_group, backend_config):
            tmp_path.joinpath("on_training_start").touch()

        def on_shutdown(self, worker_group, backend_config):
            tmp_path.joinpath("on_shutdown").touch()

    class ValidationBackendConfig(BackendConfig):
        @property
        def backend_cls(self):
            return ValidationBackend

    DataParallelTrainer(
        lambda: None,
        backend_config=ValidationBackendConfig(),
        scaling_config=ScalingConfig(num_workers=2),
        run_config=run_config,
    ).fit()
    assert tmp_path.joinpath("on_start").read_text() == "2"
    assert tmp_path.joinpath("on_training_start").exists()
    assert tmp_path.joinpath("on_shutdown").exists()


def test_unknown_dataset_is_a_key_error_as_in_ray(run_config):
    def train_func():
        train.get_dataset_shard("missing")

    with pytest.raises(TrainingFailedError) as info:
        fit(train_func, run_config, num_workers=1)
    assert isinstance(info.value.__cause__, KeyError)


def test_session_functions_outside_a_run_raise_runtime_error():
    with pytest.raises(RuntimeError, match="only be called inside a training function"):
        train.report({"x": 1})
    with pytest.raises(RuntimeError):
        train.get_context()


def test_result_from_a_path_without_a_run_is_a_runtime_error(tmp_path):
    with pytest.raises(RuntimeError, match="holds no lockstep run"):
        Result.from_path(str(tmp_path))


def _joined_process_group():
    """What a worker sees of how its process group was joined: the init method torch
    recorded, the MASTER_ variables, and a key every rank wrote to the store at the init
    method's address (read back through a client of its own) after an all-reduce."""
    import datetime
    from urllib.parse import urlparse

    import torch
    import torch.distributed as dist

    total = torch.tensor([train.get_context().get_world_rank() + 1.0])
    dist.all_reduce(total)
    url = dist.distributed_c10d._default_pg_init_method  # the init method torch was given
    if url == "env://":
        address, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    else:
        address, port = urlparse(url).hostname, urlparse(url).port
    rank = train.get_context().get_world_rank()
    store = dist.TCPStore(address, port, is_master=False, timeout=datetime.timedelta(seconds=30))
    store.set(f"seen-{rank}", "yes")
    train.collective.barrier()
    mine = {
        "url": url,
        "master": (os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")),
        "store": (address, port),
        "sum": total.item(),
        "seen": [store.get(f"seen-{r}").decode() for r in range(dist.get_world_size())],
    }
    every_rank = [None] * dist.get_world_size()
    dist.all_gather_object(every_rank, mine)
    return every_rank


@pytest.mark.parametrize("init_method", ["env", "env://", "tcp", "tcp://"])
def test_torch_init_method_is_how_the_process_group_is_joined(run_config, init_method):
    from lockstep.train.torch import TorchConfig, TorchTrainer

    result = TorchTrainer(
        _joined_process_group,
        torch_config=TorchConfig(init_method=init_method),
        scaling_config=ScalingConfig(num_workers=2),
        run_config=run_config,
    ).fit()
    assert len(result.return_value) == 2
    for seen in result.return_value:
        assert seen["sum"] == 3.0 and seen["seen"] == ["yes", "yes"]
        address, port = seen["store"]
        assert address == "127.0.0.1"  # rank 0's store, on its node address only
        if init_method.startswith("env"):
            # as torchrun and Ray: every worker has them, and torch joined through them
            assert seen["url"] == "env://"
            assert seen["master"] == ("127.0.0.1", str(port))
        else:
            # as Ray: tcp://ADDRESS:PORT, the MASTER_ variables left unset
            assert seen["url"] == f"tcp://127.0.0.1:{port}"
            assert seen["master"] == (None, None)


@pytest.mark.parametrize(
    ("config", "total"),
    [
        (ScalingConfig(), {"CPU": 1}),
        (ScalingConfig(use_gpu=True), {"GPU": 1}),
        (
            ScalingConfig(num_workers=2, use_gpu=True, resources_per_worker={"CPU": 1}),
            {"CPU": 2, "GPU": 2},
        ),
        (
            ScalingConfig(num_workers=2, use_gpu=True, accelerator_type="A100"),
            {"GPU": 2, "accelerator_type:A100": 0.002},
        ),
        (ScalingConfig(num_workers=3, trainer_resources={"CPU": 1}), {"CPU": 4}),
    ],
)
def test_total_resources_as_ray_sums_them(config, total):
    assert config.total_resources == pytest.approx(total)


def test_fail_fast_is_accepted_with_rays_rule():
    assert FailureConfig(fail_fast=True).fail_fast is True
    assert FailureConfig(fail_fast="raise").max_failures == 0
    with pytest.raises(ValueError, match="max_failures must be 0 if fail_fast"):
        FailureConfig(fail_fast=True, max_failures=2)
    with pytest.raises(ValueError, match="fail_fast must be True, False or 'raise'"):
        FailureConfig(fail_fast="later")


def test_sync_config_is_accepted(run_config):
    config = RunConfig(
        storage_path=run_config.storage_path, verbose=0, sync_config=SyncConfig(sync_period=5)
    )
    assert fit(lambda: 1, config, num_workers=1).return_value == 1
    with pytest.raises(ValueError, match="sync_period"):
        SyncConfig(sync_period=-1)
