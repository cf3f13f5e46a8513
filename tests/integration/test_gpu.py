"""The GPU paths on a real GPU: NCCL, devices, shared GPUs, CUDA in the driver, mixed
precision, Lightning and Transformers, doctor, memory given back and, last (they kill
processes in the middle of CUDA work), hangs inside CUDA work.

One GPU is enough for every test (``scripts/gpu-check.sh`` runs them with the GPU
benchmark). One GPU cannot hold two NCCL ranks, so a collective stuck between two GPUs is
not tested here. The driver (this process) never initialises CUDA: every CUDA call is in a
worker or in a script of its own, and each test checks it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lockstep import data, train
from lockstep._core import accelerators
from lockstep.train import (
    FailureConfig,
    RunConfig,
    ScalingConfig,
    TrainingFailedError,
)
from lockstep.train.torch import TorchConfig, TorchTrainer
from tests.helpers import tiny_bert

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

ONE_GPU = ScalingConfig(num_workers=1, use_gpu=True)
HALF_A_GPU_EACH = ScalingConfig(num_workers=2, use_gpu=True, resources_per_worker={"GPU": 0.5})
HERE = os.path.basename(__file__)
CHECKPOINT_NAME = {"lightning": "checkpoint.ckpt", "transformers": "checkpoint"}
FRESH_START = "lockstep: workers start as fresh processes, not forks of this one: "
SLACK_MIB = 1024  # what a GPU's memory.used may move by while nothing of ours runs


@pytest.fixture(autouse=True)
def driver_never_initialises_cuda():
    yield
    # workers forked from a driver with CUDA initialised could not use it
    assert not torch.cuda.is_initialized()


def smi(kind: str, *fields: str) -> list[list[str]]:
    """``nvidia-smi --query-KIND=FIELDS``: one row per GPU or process, values as text."""
    out = subprocess.run(
        ["nvidia-smi", f"--query-{kind}={','.join(fields)}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return [[value.strip() for value in line.split(",")] for line in out.splitlines() if line]


def compute_app_pids() -> set[int]:
    """The processes that hold memory on any GPU, as the NVIDIA driver lists them."""
    return {int(row[0]) for row in smi("compute-apps", "pid") if row[0].isdigit()}


def memory_used_mib() -> int:
    """Memory in use on the GPU the first worker gets."""
    first = accelerators.visible_gpus()[0]
    used = {row[0]: int(row[1]) for row in smi("gpu", "index", "memory.used")}
    return used.get(first, max(used.values()))


def released(baseline_mib: int, timeout: float = 30.0) -> int:
    """The GPU's memory in use once it is back within SLACK_MIB of ``baseline_mib`` (the
    driver frees a dead process's memory as it tears its context down), or when
    ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    used = memory_used_mib()
    while used > baseline_mib + SLACK_MIB and time.monotonic() < deadline:
        time.sleep(0.2)
        used = memory_used_mib()
    return used


def quiet_run(tmp_path, **kwargs) -> RunConfig:
    return RunConfig(name="gpu", storage_path=str(tmp_path / "runs"), verbose=0, **kwargs)


# --- NCCL on one GPU: devices, data, checkpoints --------------------------------------------


def train_on_the_gpu(config):
    import torch.distributed as dist

    from lockstep.train.torch import TorchCheckpoint, get_device, prepare_data_loader
    from lockstep.train.torch import prepare_model as prepare

    device = get_device()
    torch.manual_seed(0)
    model = prepare(nn.Linear(4, 1))
    x = torch.randn(64, 4)
    loader = prepare_data_loader(DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), 8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    batch_devices = set()
    for xb, yb in loader:
        batch_devices |= {str(xb.device), str(yb.device)}
        optimizer.zero_grad()
        nn.functional.mse_loss(model(xb), yb).backward()
        optimizer.step()
    shard = train.get_dataset_shard("train")
    shard_devices = {
        str(tensor.device)
        for batch in shard.iter_torch_batches(batch_size=8, device=device)
        for tensor in batch.values()
    }
    state = model.state_dict()
    checkpoint = TorchCheckpoint.from_state_dict(state)
    train.report(
        {
            "backend": dist.get_backend(),
            "device": str(device),
            "model": str(next(model.parameters()).device),
            "batches": sorted(batch_devices),
            "shard": sorted(shard_devices),
            "saved_on": sorted({str(t.device) for t in state.values()}),
            "visible": os.environ["CUDA_VISIBLE_DEVICES"],
            "weights": [t.tolist() for t in state.values()],
        },
        checkpoint=checkpoint,
    )
    import shutil

    shutil.rmtree(checkpoint.path)  # report() has copied it into the run


LOAD_ON_CPU = """
import json, sys, torch
from torch import nn
from lockstep.train.torch import TorchCheckpoint

model = TorchCheckpoint(sys.argv[1]).get_model(nn.Linear(4, 1))
print(json.dumps({
    "cuda": torch.cuda.is_available(),
    "on": sorted({str(p.device) for p in model.parameters()}),
    "weights": [t.tolist() for t in model.state_dict().values()],
}))
"""


def test_a_model_trains_with_nccl_on_the_gpu_and_its_checkpoint_loads_without_one(tmp_path):
    result = TorchTrainer(
        train_on_the_gpu,
        datasets={"train": data.from_items([{"x": float(i), "y": 2.0 * i} for i in range(32)])},
        scaling_config=ONE_GPU,
        run_config=quiet_run(tmp_path),
    ).fit()
    metrics = result.metrics
    assert metrics["backend"] == "nccl"
    assert metrics["device"] == metrics["model"] == "cuda:0"
    assert metrics["batches"] == metrics["shard"] == metrics["saved_on"] == ["cuda:0"]
    assert metrics["visible"] == accelerators.visible_gpus()[0]  # this worker's GPU only
    # the checkpoint holds CUDA tensors; a process without any GPU loads it
    cpu_only = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(
        [sys.executable, "-c", LOAD_ON_CPU, result.checkpoint.path],
        capture_output=True,
        text=True,
        env=cpu_only,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.splitlines()[-1])
    assert loaded == {"cuda": False, "on": ["cpu"], "weights": metrics["weights"]}


# --- two workers on one GPU -----------------------------------------------------------------


def all_reduce_on_the_gpu():
    import torch.distributed as dist

    from lockstep.train.torch import get_device, prepare_model

    model = prepare_model(nn.Linear(4, 1))  # DDP: rank 0's weights broadcast to rank 1
    tensor = torch.ones(1, device=get_device())
    dist.all_reduce(tensor)
    train.report({"sum": tensor.item(), "device": str(get_device()), "backend": dist.get_backend()})
    return [p.detach().cpu().tolist() for p in model.parameters()]


def test_two_ranks_on_one_gpu_fail_at_once_under_nccl_naming_the_limit_and_the_fix(tmp_path):
    trainer = TorchTrainer(
        all_reduce_on_the_gpu,
        scaling_config=HALF_A_GPU_EACH,
        run_config=quiet_run(tmp_path, failure_config=FailureConfig(max_failures=3)),
    )
    with pytest.raises(TrainingFailedError) as raised:
        trainer.fit()
    first_line = str(raised.value).splitlines()[0]
    assert "were given the same GPU" in first_line
    assert "NCCL cannot run two ranks of one process group on one GPU. HINT: " in first_line
    assert "TorchConfig(backend='gloo')" in first_line
    assert "restart" not in first_line  # a restart cannot fix it: none was made


def test_two_ranks_share_one_gpu_with_gloo_as_the_error_says(tmp_path):
    result = TorchTrainer(
        all_reduce_on_the_gpu,
        torch_config=TorchConfig(backend="gloo"),
        scaling_config=HALF_A_GPU_EACH,
        run_config=quiet_run(tmp_path),
    ).fit()
    assert result.metrics == {"sum": 2.0, "device": "cuda:0", "backend": "gloo"}


# --- CUDA in the driver before fit() ---------------------------------------------------------

CUDA_IN_THE_DRIVER = """
import json, os, sys, torch
from lockstep import train
from lockstep._internal.execution.worker_group import forkserver
from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig
from lockstep.train.torch import TorchTrainer, get_device

if sys.argv[2] == "available":
    assert torch.cuda.is_available()  # asks the driver, initialises nothing
else:
    torch.zeros(1, device="cuda")  # initialises CUDA in this process

run = RunConfig(storage_path=sys.argv[1], verbose=0)


def on_cpus():
    train.report({"parent": os.getppid()})


def on_the_gpu():
    block = torch.ones(1 << 20, device=get_device())
    train.report({"sum": float(block.sum()), "device": str(block.device)})


cpu = [
    DataParallelTrainer(on_cpus, scaling_config=ScalingConfig(num_workers=2), run_config=run)
    .fit().metrics
    for _ in range(2)
]
gpu = TorchTrainer(
    on_the_gpu, scaling_config=ScalingConfig(num_workers=1, use_gpu=True), run_config=run
).fit().metrics
print(json.dumps({"cpu": cpu, "gpu": gpu, "server": forkserver.server_pid(), "me": os.getpid()}))
"""


@pytest.mark.parametrize("touch", ["available", "allocate"])
def test_cuda_in_the_driver_before_fit_never_crashes_the_workers(tmp_path, touch):
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(CUDA_IN_THE_DRIVER))
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "runs"), touch],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["gpu"] == {"sum": float(1 << 20), "device": "cuda:0"}
    said = [line for line in done.stderr.splitlines() if line.startswith(FRESH_START)]
    if touch == "available":  # harmless: CPU workers are forked, warm
        assert out["server"] is not None
        assert out["cpu"] == [{"parent": out["server"]}] * 2
        assert said == []
    else:  # CUDA initialised: workers start fresh, and the driver says why, once
        assert out["server"] is None
        assert out["cpu"] == [{"parent": out["me"]}] * 2
        why = "CUDA is initialised in this process (a forked worker could not use it)"
        assert said == [FRESH_START + why]


# --- mixed precision -------------------------------------------------------------------------


def regression_data():
    from lockstep.train.torch import get_device

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(256, 16, generator=generator).to(get_device())
    return x, x.sum(1, keepdim=True)


def autocast_with_a_grad_scaler():
    from lockstep.train.torch import prepare_model

    torch.manual_seed(0)
    model = prepare_model(nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
    scaler = torch.amp.GradScaler("cuda")
    x, y = regression_data()
    losses, dtypes = [], set()
    for _ in range(60):
        with torch.autocast("cuda", dtype=torch.float16):
            out = model(x)
            dtypes.add(str(out.dtype))
        loss = nn.functional.mse_loss(out.float(), y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
    train.report(
        {
            "first": losses[0],
            "last": losses[-1],
            "dtypes": sorted(dtypes),
            "weights": str(next(model.parameters()).dtype),
            "scale": scaler.get_scale(),
        }
    )


def lockstep_amp():
    from lockstep.train.torch import accelerate, backward, prepare_model, prepare_optimizer

    accelerate(amp=True)
    torch.manual_seed(0)
    inner = nn.Linear(16, 1)
    dtypes = set()
    inner.register_forward_hook(lambda module, args, out: dtypes.add(str(out.dtype)))
    model = prepare_model(nn.Sequential(inner))
    optimizer = prepare_optimizer(torch.optim.SGD(model.parameters(), lr=0.02))
    x, y = regression_data()
    losses = []
    for _ in range(60):
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        backward(loss)
        optimizer.step()
        losses.append(loss.item())
    train.report(
        {
            "first": losses[0],
            "last": losses[-1],
            "dtypes": sorted(dtypes),
            "weights": str(inner.weight.dtype),
            "scale": optimizer.scaler.get_scale(),
        }
    )


@pytest.mark.parametrize("loop", [autocast_with_a_grad_scaler, lockstep_amp])
def test_mixed_precision_trains_in_float16_with_a_scaled_loss(tmp_path, loop):
    metrics = TorchTrainer(loop, scaling_config=ONE_GPU, run_config=quiet_run(tmp_path)).fit()
    metrics = metrics.metrics
    assert metrics["dtypes"] == ["torch.float16"]  # the forward pass ran in float16
    assert metrics["weights"] == "torch.float32"  # the weights stay in full precision
    assert metrics["scale"] > 1.0  # the loss was scaled (GradScaler starts at 65536)
    assert metrics["last"] < metrics["first"] / 10


# --- Lightning and Transformers --------------------------------------------------------------


def lightning_on_the_gpu():
    import lightning.pytorch as pl

    from lockstep.train import lightning as ll

    class Regression(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(4, 1)
            self.devices_seen = set()

        def training_step(self, batch, batch_idx):
            x, y = batch
            self.devices_seen |= {str(x.device), str(self.device)}
            loss = nn.functional.mse_loss(self.layer(x), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    torch.manual_seed(0)
    x = torch.randn(64, 4)
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
    trainer = pl.Trainer(
        max_epochs=2,
        devices="auto",
        accelerator="gpu",
        strategy=ll.RayDDPStrategy(),
        plugins=[ll.RayLightningEnvironment()],
        callbacks=[ll.RayTrainReportCallback()],
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
    )
    trainer = ll.prepare_trainer(trainer)
    model = Regression()
    trainer.fit(model, loader)
    return {"seen": sorted(model.devices_seen), "root": str(trainer.strategy.root_device)}


def test_lightning_ray_ddp_strategy_trains_on_the_gpu(tmp_path):
    result = TorchTrainer(
        lightning_on_the_gpu, scaling_config=ONE_GPU, run_config=quiet_run(tmp_path)
    ).fit()
    assert result.return_value == {"seen": ["cuda:0"], "root": "cuda:0"}
    assert result.metrics["epoch"] == 1 and result.metrics["train_loss"] >= 0
    with result.checkpoint.as_directory() as d:
        assert CHECKPOINT_NAME["lightning"] in os.listdir(d)


def transformers_on_the_gpu(config):
    import transformers

    from lockstep.train.huggingface.transformers import RayTrainReportCallback, prepare_trainer

    model = tiny_bert()
    ids = torch.randint(0, 32, (64, 8), generator=torch.Generator().manual_seed(1))
    rows = [{"input_ids": row, "labels": int(row[0] % 2)} for row in ids]
    args = transformers.TrainingArguments(
        output_dir=config["output_dir"],
        per_device_train_batch_size=8,
        max_steps=8,
        logging_steps=2,
        save_steps=4,
        report_to=[],
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=rows, callbacks=[RayTrainReportCallback()]
    )
    trainer = prepare_trainer(trainer)
    trainer.train()
    return {"args": str(trainer.args.device), "model": str(next(model.parameters()).device)}


def test_transformers_trainer_trains_on_the_gpu(tmp_path):
    with tempfile.TemporaryDirectory(prefix="lockstep-test-") as output_dir:
        result = TorchTrainer(
            transformers_on_the_gpu,
            train_loop_config={"output_dir": output_dir},
            scaling_config=ONE_GPU,
            run_config=quiet_run(tmp_path),
        ).fit()
    assert result.return_value == {"args": "cuda:0", "model": "cuda:0"}
    assert result.metrics["step"] == 8
    with result.checkpoint.as_directory() as d:  # the Trainer's checkpoint of step 8
        saved = os.path.join(d, CHECKPOINT_NAME["transformers"], "trainer_state.json")
        with open(saved) as f:
            state = json.load(f)
    assert state["global_step"] == 8
    assert any("loss" in row for row in state["log_history"])


# --- lockstep doctor --------------------------------------------------------------------------


def test_doctor_shows_the_gpu_its_driver_and_nccl():
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from lockstep.cli import main; sys.exit(main())",
            "doctor",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    index, name, memory, driver = smi("gpu", "index", "name", "memory.total", "driver_version")[0]
    assert f"  {index:<3}{name}, {memory} MiB, driver {driver}" in lines
    nccl = ".".join(map(str, torch.cuda.nccl.version()))
    assert f"  torch's CUDA {torch.version.cuda}, NCCL {nccl}" in lines
    assert "  NCCL        ok" in lines


# --- GPU memory given back -------------------------------------------------------------------


def holds_most_of_the_gpu(config):
    """Holds 60% of the GPU's free memory: a second copy would not fit beside a first that
    was never given back. The first attempt fails as ``config["fault"]`` says."""
    marker = config["marker"]
    first = not os.path.exists(marker)
    if first:
        free, _ = torch.cuda.mem_get_info()
        nbytes = int(free * 0.6)
        with open(marker, "w") as f:
            f.write(f"{nbytes} {os.getpid()}")
    else:
        with open(marker) as f:
            nbytes = int(f.read().split()[0])
    block = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    block.fill_(1)
    torch.cuda.synchronize()
    listed = os.getpid() in compute_app_pids()
    if first and config["fault"] == "raise":
        raise RuntimeError("failed with most of the GPU's memory held")
    if first and config["fault"] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    train.report({"bytes": block.numel(), "pid": os.getpid(), "listed": listed})


@pytest.mark.parametrize("fault", ["none", "raise", "kill"])
def test_gpu_memory_comes_back_after_the_run_and_after_a_failed_worker(tmp_path, fault):
    baseline = memory_used_mib()
    marker = tmp_path / "first_attempt"
    result = TorchTrainer(
        holds_most_of_the_gpu,
        train_loop_config={"marker": str(marker), "fault": fault},
        scaling_config=ONE_GPU,
        run_config=quiet_run(tmp_path, failure_config=FailureConfig(max_failures=1)),
    ).fit()
    nbytes, first_pid = (int(v) for v in marker.read_text().split())
    # the restarted worker got all that the first one had
    assert result.metrics["bytes"] == nbytes
    assert (result.metrics["pid"] == first_pid) == (fault == "none")
    used = released(baseline)
    assert used <= baseline + SLACK_MIB, f"{used} MiB in use after the run, {baseline} before"
    if result.metrics["listed"]:  # the driver lists this machine's processes by our pids
        assert not {first_pid, result.metrics["pid"]} & compute_app_pids()


# --- hangs inside CUDA work ------------------------------------------------------------------


def stuck_in_cuda(config):
    # one kernel that spins for about 30 s: far past the hang timeout, and short enough
    # that a driver which let it finish after its process was killed would not hold the
    # GPU for long
    torch.cuda._sleep(60_000_000_000)
    if config["wait"] == "synchronize":
        torch.cuda.synchronize()
    else:
        torch.ones(1, device="cuda").add(1).item()  # waits for the kernel before it


@pytest.mark.parametrize("wait", ["synchronize", "item"])
def test_a_rank_stuck_in_cuda_work_is_named_with_its_stack(tmp_path, wait):
    import inspect

    baseline = memory_used_mib()
    trainer = TorchTrainer(
        stuck_in_cuda,
        train_loop_config={"wait": wait},
        scaling_config=ONE_GPU,
        run_config=quiet_run(tmp_path, failure_config=FailureConfig(hang_timeout_s=3.0)),
    )
    with pytest.raises(TrainingFailedError) as raised:
        trainer.fit()
    failure = raised.value.root_cause
    assert (failure.rank, failure.kind) == (0, "hang")
    lines, first = inspect.getsourcelines(stuck_in_cuda)
    text = "torch.cuda.synchronize()" if wait == "synchronize" else ".item()"
    line = first + next(i for i, source in enumerate(lines) if text in source)
    message = str(raised.value)
    assert "made no progress for " in message
    assert f"in stuck_in_cuda() at {HERE}:{line}" in message
    assert f"line {line}, in stuck_in_cuda" in message  # its Python stack, in the error
    used = released(baseline, timeout=60.0)  # the stuck worker was killed, its kernel with it
    assert used <= baseline + SLACK_MIB, f"{used} MiB in use after the run, {baseline} before"
