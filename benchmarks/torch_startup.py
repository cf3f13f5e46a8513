"""Start-up of a TorchTrainer run: how soon a 2-worker job is done.

The job: 2 workers each build a tiny model, wrap it with prepare_model (DDP over gloo) and
report once. Measured in a fresh driver process that has already imported torch (the
import of lockstep.train.torch is printed too, and with the first fit(): the first fit()
includes the fork server's import of torch._dynamo, 0.7-0.8 s, which the driver never
imports): the first fit(), the second fit() in the same process, and what 10 reports per
worker add. Baseline, in the same run:
torch.multiprocessing.spawn of 2 processes that import torch, init gloo and all-reduce one
tensor. Targets: first fit <= 1.2 s, second < 0.5 s, 10 reports add < 10 ms.
(Ray Train needs 11-14 s for this job on these machines.)

    python benchmarks/torch_startup.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

DRIVER = """
import json, sys, tempfile, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
from lockstep import train
from lockstep.train import RunConfig, ScalingConfig
from lockstep.train.torch import TorchTrainer, prepare_model
t2 = time.perf_counter()

def job(config):
    model = prepare_model(torch.nn.Linear(8, 2))
    for i in range(config["reports"]):
        train.report({"i": i})

def fit(storage, reports):
    trainer = TorchTrainer(job, train_loop_config={"reports": reports},
                           scaling_config=ScalingConfig(num_workers=2),
                           run_config=RunConfig(storage_path=storage, verbose=0))
    start = time.perf_counter()
    trainer.fit()
    return time.perf_counter() - start

with tempfile.TemporaryDirectory(prefix="lockstep-bench-") as storage:
    first = fit(storage, 1)
    second = fit(storage, 1)
    one, ten = [], []
    for _ in range(9):  # interleaved, so that both see the same machine
        one.append(fit(storage, 1))
        ten.append(fit(storage, 10))
json.dump({"import_torch": t1 - t0, "import_lockstep": t2 - t1, "first": first,
           "second": second, "one": one, "ten": ten}, sys.stdout)
"""


def baseline_worker(rank: int, port: int) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    dist.all_reduce(torch.ones(1))
    dist.destroy_process_group()


def baseline() -> float:
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.perf_counter()
    mp.spawn(baseline_worker, args=(port,), nprocs=2)
    return time.perf_counter() - start


def main() -> None:
    out = subprocess.run([sys.executable, "-c", DRIVER], capture_output=True, text=True, check=True)
    ours = json.loads(out.stdout)
    base = baseline()
    extra = statistics.median(ours["ten"]) - statistics.median(ours["one"])
    print(
        f"driver: import torch {ours['import_torch']:.2f} s, "
        f"import lockstep.train.torch {ours['import_lockstep']:.2f} s"
    )
    print(f"first fit(): {ours['first']:.3f} s (target <= 1.2 s)")
    with_import = ours["import_lockstep"] + ours["first"]
    print(f"import lockstep.train.torch and first fit(): {with_import:.3f} s")
    print(f"second fit(): {ours['second']:.3f} s (target < 0.5 s)")
    print(f"10 reports per worker add: {extra * 1000:.1f} ms (target < 10 ms)")
    print(f"baseline (mp.spawn 2 processes: import torch, gloo, all-reduce): {base:.3f} s")
    print(
        f"ratio first fit / baseline: {ours['first'] / base:.2f}x, "
        f"second fit / baseline: {ours['second'] / base:.2f}x"
    )


if __name__ == "__main__":
    main()
