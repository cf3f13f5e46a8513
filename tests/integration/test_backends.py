"""Each backend passes the backend contract; the hooks run where and when they should."""

import os
from dataclasses import dataclass

import pytest

from lockstep import train
from lockstep.train import Backend, BackendConfig, DataParallelTrainer, ScalingConfig
from tests.contracts.backend import BackendContract


class TestDefaultBackend(BackendContract):
    @pytest.fixture
    def backend_config(self):
        return BackendConfig()


class RecordingBackend(Backend):
    """Records its hooks in environment variables and a file, to be checked from outside."""

    def worker_env(self, context):
        return {"RECORDING_RANK": str(context.world_rank)}

    def on_worker_start(self, context, collective):
        ports = collective.all_gather(9000 + context.world_rank)
        os.environ["RECORDING_PORTS"] = ",".join(map(str, ports))

    def on_worker_shutdown(self, context):
        with open(os.path.join(self.config.folder, f"shutdown-{context.world_rank}"), "w") as f:
            f.write(os.environ["RECORDING_PORTS"])


@dataclass(frozen=True)
class RecordingConfig(BackendConfig):
    folder: str = ""

    @property
    def backend_cls(self):
        return RecordingBackend


class TestRecordingBackend(BackendContract):
    @pytest.fixture
    def backend_config(self, tmp_path):
        return RecordingConfig(folder=str(tmp_path))

    @staticmethod
    def probe():
        return [os.environ["RECORDING_RANK"], os.environ["RECORDING_PORTS"]]

    def check_probe(self, results, world_size):
        ports = ",".join(str(9000 + r) for r in range(world_size))
        assert results == [[str(r), ports] for r in range(world_size)]


def test_shutdown_hook_runs_after_the_function_even_when_it_fails(tmp_path, run_config):
    def train_func():
        if train.get_context().get_world_rank() == 1:
            raise RuntimeError("boom")

    trainer = DataParallelTrainer(
        train_func,
        backend_config=RecordingConfig(folder=str(tmp_path)),
        scaling_config=ScalingConfig(num_workers=2),
        run_config=run_config,
    )
    with pytest.raises(train.TrainingFailedError):
        trainer.fit()
    assert (tmp_path / "shutdown-1").read_text() == "9000,9001"
