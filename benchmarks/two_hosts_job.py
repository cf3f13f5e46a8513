"""The job of ``benchmarks/schedulers.py``, run by every launched process.

    python two_hosts_job.py plain OUT STEPS            # under torchrun: torch.distributed + DDP
    python two_hosts_job.py lockstep OUT STEPS STORAGE # TorchTrainer, one worker per process
    python two_hosts_job.py recovery OUT EPOCHS STORAGE KILL_EPOCH

Rank 0 writes ``OUT/<mode>.json``: when its first step ended (``first_step_t``, UNIX time)
and the timed steps' seconds (``elapsed``).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time

import torch
import torch.distributed as dist
from ddp_throughput import BATCH, mlp  # the same model as the one-machine benchmark
from torch import nn

WARMUP = 5


def steps(model: nn.Module, count: int) -> tuple[float, float]:
    """When the first step ended, and the seconds of ``count`` steps after the warm-up."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(BATCH, 784), torch.randint(0, 10, (BATCH,))
    first = 0.0
    for i in range(WARMUP + count):
        if i == WARMUP:
            dist.barrier()
            start = time.perf_counter()
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if i == 0:
            first = time.time()
    dist.barrier()
    return first, time.perf_counter() - start


def write(out: str, name: str, value: dict) -> None:
    with open(os.path.join(out, f"{name}.json"), "w") as f:
        json.dump(value, f)


def plain(out: str, count: int) -> None:
    torch.set_num_threads(1)  # as lockstep's workers: one thread per CPU asked for
    dist.init_process_group("gloo")
    model = nn.parallel.DistributedDataParallel(mlp())
    first, elapsed = steps(model, count)
    if dist.get_rank() == 0:
        write(out, "plain", {"first_step_t": first, "elapsed": elapsed})
    dist.destroy_process_group()


def lockstep_worker(config: dict) -> None:
    from lockstep import train
    from lockstep.train.torch import prepare_model

    first, elapsed = steps(prepare_model(mlp()), config["steps"])
    if train.get_context().get_world_rank() == 0:
        write(config["out"], "lockstep", {"first_step_t": first, "elapsed": elapsed})
    train.report({"elapsed": elapsed})


def recovery_worker(config: dict) -> None:
    from lockstep import train
    from lockstep.testing import Fault

    rank = train.get_context().get_world_rank()
    kill = Fault(kind="signal", signum=signal.SIGKILL, rank=1, at_epoch=config["kill_epoch"])
    start = 0
    if checkpoint := train.get_checkpoint():
        with checkpoint.as_directory() as d, open(os.path.join(d, "epoch")) as f:
            start = int(f.read()) + 1
    for epoch in range(start, config["epochs"]):
        kill.fire_if_due(epoch)  # rank 1: the worker on the second host
        time.sleep(0.1)
        with tempfile.TemporaryDirectory() as d:
            if rank == 0:
                with open(os.path.join(d, "epoch"), "w") as f:
                    f.write(str(epoch))
            metrics = {"epoch": epoch, "t": time.time(), "pid": os.getpid()}
            train.report(metrics, checkpoint=train.Checkpoint.from_directory(d))


def trainer(fn, config: dict, storage: str, max_failures: int = 0):
    from lockstep.train import FailureConfig, RunConfig, ScalingConfig
    from lockstep.train.torch import TorchTrainer

    return TorchTrainer(
        fn,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            name=os.path.basename(config["out"]) + "-" + fn.__name__,
            storage_path=storage,
            verbose=0,
            failure_config=FailureConfig(max_failures=max_failures),
        ),
    )


def main() -> None:
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "plain":
        plain(out, int(sys.argv[3]))
    elif mode == "lockstep":
        config = {"out": out, "steps": int(sys.argv[3])}
        trainer(lockstep_worker, config, sys.argv[4]).fit()
    else:
        config = {"out": out, "epochs": int(sys.argv[3]), "kill_epoch": int(sys.argv[5])}
        result = trainer(recovery_worker, config, sys.argv[4], max_failures=1).fit()
        write(out, "recovery", {"path": result.path})


if __name__ == "__main__":
    main()
