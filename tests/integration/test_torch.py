"""PyTorch on real gloo process groups: DDP, sampling, checkpoints, reproducibility, AMP."""

from __future__ import annotations

import dataclasses
import functools
import os
import runpy
import subprocess
import sys
import tempfile

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lockstep import train
from lockstep.train import Trainer, TrainingFailedError
from lockstep.train.torch import (
    TorchConfig,
    TorchTrainer,
    accelerate,
    backward,
    enable_reproducibility,
    prepare_data_loader,
    prepare_model,
    prepare_optimizer,
)
from tests.contracts.backend import BackendContract
from tests.contracts.worker_group import USER_SCRIPT
from tests.helpers import EveryRank, fit_on

fit = functools.partial(fit_on, TorchTrainer)


def with_callback(run_config, callback):
    return dataclasses.replace(run_config, callbacks=[callback])


def linear_model():
    torch.manual_seed(0)
    return nn.Linear(4, 1)


def rank_batch(rank):
    generator = torch.Generator().manual_seed(100 + rank)
    return torch.randn(8, 4, generator=generator), torch.randn(8, 1, generator=generator)


def one_ddp_step():
    rank = train.get_context().get_world_rank()
    model = prepare_model(linear_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    x, y = rank_batch(rank)
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    train.report({"params": [p.detach().flatten().tolist() for p in model.parameters()]})


def test_gradients_are_averaged_across_ranks(run_config):
    ranks = EveryRank()
    fit(one_ddp_step, with_callback(run_config, ranks))
    params = [m["params"] for m in ranks.steps[0]]
    assert params[0] == params[1]  # identical on every rank
    # and equal to one step on the mean of the two ranks' gradients
    expected = linear_model()
    grads = []
    for rank in range(2):
        model = linear_model()
        x, y = rank_batch(rank)
        nn.functional.mse_loss(model(x), y).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    with torch.no_grad():
        for i, p in enumerate(expected.parameters()):
            p -= (grads[0][i] + grads[1][i]) / 2
    want = [p.flatten().tolist() for p in expected.parameters()]
    for got_param, want_param in zip(params[0], want, strict=True):
        assert got_param == pytest.approx(want_param, abs=1e-6)


def sampled_indices(config):
    data = TensorDataset(torch.arange(config["n"]))
    loader = prepare_data_loader(DataLoader(data, batch_size=3, shuffle=config["shuffle"]))
    seen = []
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        seen.append([int(i) for (batch,) in loader for i in batch])
    train.report({"seen": seen})


@pytest.mark.parametrize("shuffle", [True, False])
def test_distributed_sampler_gives_disjoint_shards_that_cover_the_data(run_config, shuffle):
    ranks = EveryRank()
    fit(
        sampled_indices,
        with_callback(run_config, ranks),
        train_loop_config={"n": 20, "shuffle": shuffle},
    )
    rank0, rank1 = (m["seen"] for m in ranks.steps[0])
    for epoch in range(2):
        assert not set(rank0[epoch]) & set(rank1[epoch])
        assert sorted(rank0[epoch] + rank1[epoch]) == list(range(20))
    if shuffle:
        assert rank0[0] != rank0[1]  # set_epoch gives a new order
        assert rank0[0] != sorted(rank0[0])
    else:
        assert rank0[0] == rank0[1] == list(range(0, 20, 2))  # order kept, interleaved


def save_from_rank0(config):
    model = prepare_model(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    for _ in range(3):
        nn.functional.mse_loss(model(torch.randn(16, 4)), torch.randn(16, 2)).backward()
        optimizer.step()
        optimizer.zero_grad()
    probe = torch.ones(1, 4)
    with tempfile.TemporaryDirectory() as d:
        if train.get_context().get_world_rank() == 0:
            torch.save(model.module.state_dict(), os.path.join(d, "model.pt"))
        train.report({"out": model(probe).tolist()}, checkpoint=train.Checkpoint.from_directory(d))


def test_checkpoint_from_rank0_restores_into_a_fresh_model(run_config):
    result = fit(save_from_rank0, run_config)
    fresh = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    with result.checkpoint.as_directory() as d:
        fresh.load_state_dict(torch.load(os.path.join(d, "model.pt")))
    assert os.listdir(result.checkpoint.path) == ["model.pt"]
    assert fresh(torch.ones(1, 4)).tolist()[0] == pytest.approx(result.metrics["out"][0])


def noisy_training(config):
    if config["reproducible"]:
        enable_reproducibility(seed=7)
    model = prepare_model(nn.Sequential(nn.Linear(4, 16), nn.Dropout(0.5), nn.Linear(16, 1)))
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = prepare_data_loader(DataLoader(data, batch_size=8, shuffle=True))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        for x, y in loader:
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
    return torch.cat([p.detach().flatten() for p in model.parameters()]).numpy().tobytes()


def test_enable_reproducibility_makes_two_runs_bitwise_equal(run_config):
    config = {"reproducible": True}
    first = fit(noisy_training, run_config, train_loop_config=config).return_value
    second = fit(noisy_training, run_config, train_loop_config=config).return_value
    assert first == second
    other = fit(noisy_training, run_config, train_loop_config={"reproducible": False})
    assert other.return_value != first


def amp_step():
    accelerate(amp=True)
    model = prepare_model(nn.Linear(4, 2))
    optimizer = prepare_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    before = [p.detach().clone() for p in model.parameters()]
    out = model(torch.randn(8, 4))
    backward(nn.functional.mse_loss(out, torch.zeros(8, 2)))
    optimizer.step()
    changed = any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    return {"dtype": str(out.dtype), "changed": changed}


def test_mixed_precision_helpers(run_config):
    assert fit(amp_step, run_config).return_value == {"dtype": "torch.float32", "changed": True}


def fsdp_step():
    model = prepare_model(
        nn.Sequential(nn.Linear(8, 16), nn.Linear(16, 1)), parallel_strategy="fsdp"
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    return type(model).__name__


def test_fsdp_on_cpu(run_config):
    assert fit(fsdp_step, run_config).return_value == "FSDPSequential"


def test_environment_of_each_worker(run_config):
    ranks = EveryRank()

    def report_env():
        keys = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "CUDA_VISIBLE_DEVICES"]
        import torch.distributed as dist

        train.report({k: os.environ.get(k) for k in keys} | {"backend": dist.get_backend()})

    fit(report_env, with_callback(run_config, ranks))
    assert [(m["RANK"], m["LOCAL_RANK"], m["WORLD_SIZE"]) for m in ranks.steps[0]] == [
        ("0", "0", "2"),
        ("1", "1", "2"),
    ]
    assert {m["MASTER_ADDR"] for m in ranks.steps[0]} == {"127.0.0.1"}
    assert {m["CUDA_VISIBLE_DEVICES"] for m in ranks.steps[0]} == {""}  # no GPU given
    assert {m["backend"] for m in ranks.steps[0]} == {"gloo"}


class TestTorchBackend(BackendContract):
    @pytest.fixture
    def backend_config(self):
        return TorchConfig(backend="gloo", timeout_s=60)

    @staticmethod
    def probe():
        import torch.distributed as dist

        tensor = torch.ones(1)
        dist.all_reduce(tensor)
        return [dist.is_initialized(), dist.get_world_size(), dist.get_rank(), tensor.item()]

    def check_probe(self, results, world_size):
        assert results == [[True, world_size, r, float(world_size)] for r in range(world_size)]


class Recorder:
    def __init__(self):
        self.results = []

    def handle_result(self, results):
        self.results.append(results)


# three workers whatever the machine: on fewer CPUs they share them, as lockstep warns
@pytest.mark.filterwarnings("ignore:ScalingConfig asks for 3 CPUs")
def test_legacy_trainer_returns_each_ranks_value(tmp_path):
    trainer = Trainer(backend="torch", num_workers=3, logdir=str(tmp_path))
    with pytest.raises(RuntimeError, match=r"before Trainer\.start"):
        trainer.run(lambda: None)
    trainer.start()
    recorder = Recorder()

    def train_func(config):
        rank = train.get_context().get_world_rank()
        train.report({"rank": rank})
        return rank * config["scale"]

    assert trainer.run(train_func, config={"scale": 10}, callbacks=[recorder]) == [0, 10, 20]
    assert recorder.results == [[{"rank": 0}, {"rank": 1}, {"rank": 2}]]
    trainer.shutdown()
    with pytest.raises(ValueError, match="unknown backend 'jax'"):
        Trainer(backend="jax")


def test_legacy_trainer_error_shows_the_scripts_frames(tmp_path):
    script = tmp_path / "user_script.py"
    script.write_text(USER_SCRIPT)
    train_func = runpy.run_path(str(script), run_name="__main__")["train_func"]
    trainer = Trainer(backend="torch", num_workers=2, logdir=str(tmp_path))
    trainer.start()
    try:
        with pytest.raises(TrainingFailedError) as info:
            trainer.run(train_func)
    finally:
        trainer.shutdown()
    assert f'File "{script}", line 5, in helper' in str(info.value)
    assert 'raise ValueError(f"bad batch {step}")' in str(info.value)


def test_demo_end_to_end_at_a_tiny_size(tmp_path):
    done = subprocess.run(
        [
            "lockstep",
            "demo",
            "--epochs",
            "2",
            "--limit",
            "200",
            "--storage-path",
            str(tmp_path),
            "--name",
            "tiny",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Validation accuracy:" in done.stdout and "Run directory:" in done.stdout
    run_dir = tmp_path / "tiny"
    png = (run_dir / "training_curves.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    checkpoints = sorted(p.name for p in run_dir.iterdir() if p.name.startswith("checkpoint_"))
    assert checkpoints == ["checkpoint_000000", "checkpoint_000001"]


def test_the_demo_module_runs_in_process_and_plots_one_epoch_on_sane_axes(tmp_path):
    import matplotlib.pyplot as plt

    from lockstep.cli._demo import draw, run_demo

    result = run_demo(epochs=1, storage_path=str(tmp_path), name="inproc", limit=100, verbose=0)
    assert set(result.metrics) == {"epoch", "train_loss", "val_loss", "val_accuracy"}
    assert 0.0 <= result.metrics["val_accuracy"] <= 1.0
    figure = draw(result)
    try:
        for axes in figure.axes:
            assert axes.get_xlim() == (-1.0, 1.0)  # epoch 0 with room, not -0.04..0.04
            ticks = [t for t in axes.get_xticks() if -1 <= t <= 1]
            assert ticks and all(float(t).is_integer() for t in ticks)
    finally:
        plt.close(figure)


def test_the_demo_plot_fits_its_axes_and_marks_the_best_epoch(tmp_path):
    import matplotlib.pyplot as plt

    from lockstep.cli._demo import draw, run_demo

    result = run_demo(epochs=3, storage_path=str(tmp_path), name="plot", limit=200, verbose=0)
    figure = draw(result)
    try:
        losses, accuracy = figure.axes
        values = result.metrics_dataframe["val_accuracy"]
        low, high = accuracy.get_ylim()
        assert low <= values.min() and values.max() <= high <= 1.0
        assert high - low < (values.max() - values.min()) * 1.5 + 0.02  # fitted, not 0..1
        best = int(result.best_checkpoints[-1][1]["epoch"])
        for axes in (losses, accuracy):
            marks = [line for line in axes.get_lines() if line.get_label() == f"best: epoch {best}"]
            assert [list(line.get_xdata()) for line in marks] == [[best, best]]
    finally:
        plt.close(figure)


def test_script_with_torch_runs_without_a_main_guard(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(
        "import sys, torch\n"
        "from lockstep.train import RunConfig, ScalingConfig\n"
        "from lockstep.train.torch import TorchTrainer, prepare_model\n"
        "def f():\n    return type(prepare_model(torch.nn.Linear(2, 2))).__name__\n"
        "r = TorchTrainer(f, scaling_config=ScalingConfig(num_workers=2),\n"
        "    run_config=RunConfig(storage_path=sys.argv[1], verbose=0)).fit()\n"
        "print(r.return_value)\n"
    )
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "DistributedDataParallel"
