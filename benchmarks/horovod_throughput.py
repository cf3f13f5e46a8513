"""Horovod training throughput: HorovodTrainer against ``horovodrun --gloo -np 2``.

The job: a PyTorch MLP (256 features, two hidden layers of 512, 10 classes) trained with
``hvd.DistributedOptimizer`` on 2 workers, batch 128 per worker, 10 warm-up steps then
``--steps`` timed steps; the samples/s of all workers. The same script runs under
HorovodTrainer and under ``horovodrun --gloo -np 2 -H localhost:2``, in the same run.
horovodrun leaves each process torch's default threads (every core), which oversubscribes
the machine; lockstep gives each worker its CPUs' worth (``OMP_NUM_THREADS``), so the
target is against horovodrun with ``OMP_NUM_THREADS=1`` too: lockstep >= 0.95x.

    python benchmarks/horovod_throughput.py [--steps 200]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import bench

BATCH = 128


def train_job(steps: int) -> float:
    import horovod.torch as hvd
    import torch

    hvd.init()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512),
        torch.nn.ReLU(),
        torch.nn.Linear(512, 512),
        torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    x = torch.randn(BATCH, 256)
    y = torch.randint(0, 10, (BATCH,))

    def step() -> None:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    for _ in range(10):
        step()
    hvd.allreduce(torch.zeros(1))  # start the clock together
    start = time.perf_counter()
    for _ in range(steps):
        step()
    elapsed = hvd.allreduce(torch.tensor(time.perf_counter() - start), op=hvd.Max).item()
    return hvd.size() * BATCH * steps / elapsed


def lockstep_run(steps: int) -> float:
    from lockstep import train
    from lockstep.train.horovod import HorovodTrainer

    def job(config):
        train.report({"samples_per_s": train_job(config["steps"])})

    with tempfile.TemporaryDirectory(prefix="bench-hvd-") as storage:
        result = bench.fit_two_workers(HorovodTrainer, job, {"steps": steps}, storage)
    return float(result.metrics["samples_per_s"])


def horovodrun(steps: int, one_thread: bool) -> float:
    command = ["horovodrun", "--gloo", "-np", "2", "-H", "localhost:2"]
    command += [sys.executable, __file__, "--worker", str(steps)]
    env = dict(os.environ)
    if one_thread:  # what lockstep gives each worker of 1 CPU, as Ray does
        env["OMP_NUM_THREADS"] = "1"
    out = subprocess.run(command, capture_output=True, text=True, check=True, env=env).stdout
    # horovodrun prefixes each line with "[rank]<stdout>:"; rank 0's figure
    line = next(x for x in out.splitlines() if x.startswith("[0]") and "samples/s" in x)
    return float(line.split(":", 1)[1].split()[0])


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        print(f"{train_job(int(sys.argv[2]))} samples/s")
        return
    args = bench.options(__doc__, steps=200).parse_args()
    plain = horovodrun(args.steps, one_thread=False)
    base = horovodrun(args.steps, one_thread=True)
    ours = lockstep_run(args.steps)
    print(f"horovodrun --gloo -np 2: {plain:.0f} samples/s (torch's default threads)")
    print(f"horovodrun --gloo -np 2, OMP_NUM_THREADS=1: {base:.0f} samples/s")
    print(f"HorovodTrainer: {ours:.0f} samples/s")
    print(f"ratio vs horovodrun: {ours / plain:.2f}x")
    print(f"ratio vs horovodrun with one thread each: {ours / base:.2f}x (target >= 0.95x)")


if __name__ == "__main__":
    main()
