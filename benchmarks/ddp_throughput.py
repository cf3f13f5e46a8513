"""DDP training throughput: lockstep's TorchTrainer against plain torch.distributed.

MLP 784-1024-1024-10, 2 workers, batch 256 per worker, gloo; 10 warm-up steps, then 60 timed
steps, timed inside the workers between barriers (startup is not counted). Baseline, in the
same run: the same model and steps in processes started by torch.multiprocessing, with
torch.distributed and DistributedDataParallel and no framework. Both use one intra-op thread
per worker (lockstep's default, as Ray's). Target: at least 0.97x the baseline's samples/s.

    python benchmarks/ddp_throughput.py [--steps 60] [--repeats 3]
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

import bench
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from lockstep import train
from lockstep.train.torch import TorchTrainer, prepare_model

BATCH = 256
WARMUP = 10


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)
    )


def timed_steps(model: nn.Module, steps: int) -> float:
    """Seconds for ``steps`` training steps after the warm-up, the same on every rank."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(BATCH, 784), torch.randint(0, 10, (BATCH,))
    for i in range(WARMUP + steps):
        if i == WARMUP:
            dist.barrier()
            start = time.perf_counter()
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    dist.barrier()
    return time.perf_counter() - start


def lockstep_worker(config: dict) -> float:
    model = prepare_model(mlp())
    elapsed = timed_steps(model, config["steps"])
    train.report({"elapsed": elapsed})
    return elapsed


def baseline_worker(rank: int, steps: int, port: int, out: dict) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    model = nn.parallel.DistributedDataParallel(mlp())
    elapsed = timed_steps(model, steps)
    if rank == 0:
        out["elapsed"] = elapsed
    dist.destroy_process_group()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def baseline(steps: int) -> float:
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(baseline_worker, args=(steps, free_port(), out), nprocs=2)
        return out["elapsed"]


def ours(steps: int, storage: str) -> float:
    result = bench.fit_two_workers(TorchTrainer, lockstep_worker, {"steps": steps}, storage)
    return result.return_value


def main() -> None:
    args = bench.options(__doc__, steps=60, repeats=3).parse_args()
    samples = 2 * BATCH * args.steps
    lockstep_times, baseline_times = [], []
    with tempfile.TemporaryDirectory(prefix="lockstep-bench-") as storage:
        for _ in range(args.repeats):  # alternate, so both see the same machine state
            lockstep_times.append(ours(args.steps, storage))
            baseline_times.append(baseline(args.steps))
    ours_rate = samples / statistics.median(lockstep_times)
    base_rate = samples / statistics.median(baseline_times)
    print(f"lockstep TorchTrainer: {ours_rate:,.0f} samples/s (median of {args.repeats})")
    print(f"plain torch.distributed + DDP: {base_rate:,.0f} samples/s")
    print(f"ratio lockstep / baseline: {ours_rate / base_rate:.3f}x (target >= 0.97x)")


if __name__ == "__main__":
    main()
