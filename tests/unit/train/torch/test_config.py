import pytest

from lockstep.train import ScalingConfig
from lockstep.train.torch import TorchConfig, TorchTrainer


def test_backend_follows_use_gpu_when_not_given():
    assert TorchConfig().for_devices(use_gpu=False).backend == "gloo"
    assert TorchConfig().for_devices(use_gpu=True).backend == "nccl"
    assert TorchConfig(backend="gloo").for_devices(use_gpu=True).backend == "gloo"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"backend": "mpi"}, "unknown torch backend 'mpi'"),
        ({"init_method": "file"}, "init_method must be 'env' or 'tcp'"),
        ({"timeout_s": 0}, "timeout_s must be positive"),
    ],
)
def test_bad_config(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TorchConfig(**kwargs)


def test_nccl_without_gpus():
    with pytest.raises(ValueError, match="needs GPUs but use_gpu=False"):
        TorchTrainer(lambda: None, torch_config=TorchConfig(backend="nccl"))


def test_use_gpu_on_a_machine_without_enough_gpus_fails_at_construction(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(ValueError, match=r"2 worker\(s\) need 2 GPU\(s\) but 1 is visible.*HINT"):
        TorchTrainer(lambda: None, scaling_config=ScalingConfig(num_workers=2, use_gpu=True))
    # two workers may share one GPU
    TorchTrainer(
        lambda: None,
        scaling_config=ScalingConfig(
            num_workers=2, use_gpu=True, resources_per_worker={"GPU": 0.5}
        ),
    )


def test_uneven_gpu_share(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(ValueError, match="cannot split this machine's GPUs evenly"):
        TorchTrainer(
            lambda: None,
            scaling_config=ScalingConfig(
                num_workers=2, use_gpu=True, resources_per_worker={"GPU": 0.3}
            ),
        )


def test_torch_config_type_is_checked():
    with pytest.raises(ValueError, match="torch_config must be a TorchConfig"):
        TorchTrainer(lambda: None, torch_config={"backend": "gloo"})


@pytest.mark.parametrize(
    ("given", "kept"),
    [("env", "env"), ("env://", "env"), ("tcp", "tcp"), ("tcp://127.0.0.1:29500", "tcp")],
)
def test_init_method_in_torch_spelling_is_accepted(given, kept):
    assert TorchConfig(init_method=given).init_method == kept
