"""A whole training script's wall time: a 2-worker TorchTrainer script against the same
training without lockstep.

Each script, a fresh Python started for every run, trains a small MLP with DDP over gloo
for ``--steps`` steps of ``--batch`` rows on each of its workers, reporting the loss every
``--every`` steps. Baselines, in the same run: the same loop as one process (a DDP of one,
so the same code runs: the wall a user compares against when they add workers on one
machine) and the same loop under plain ``torchrun --nproc-per-node 2``. Runs are paired:
each round runs the three scripts once, in turn, and the medians over the rounds are
compared (the machine's load moves every figure alike within a round).
Targets: lockstep's script within 1.1x the one-process script and within 0.6x plain
torchrun (it starts no second Python per worker: its workers are forked). Every script
ends as a user's does, its interpreter's teardown included. Under torchrun, torch 2.13's
gloo now and then aborts a process in that teardown ("terminate called without an active
exception", once every rank passed its last barrier): such a run is timed as it ended
and counted in the output; any other failure stops the benchmark.

    python benchmarks/whole_script.py [--repeats 5] [--steps 200]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

import bench

LOOP = """
import torch

def train_steps(steps, batch, every, report):
    torch.manual_seed(0)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(batch, 64), torch.randn(batch, 1)
    for step in range(steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if (step + 1) % every == 0:
            report({"step": step, "loss": loss.item()})
"""

LOCKSTEP = (
    LOOP
    + """
import sys, tempfile
from lockstep import train
from lockstep.train import RunConfig, ScalingConfig
from lockstep.train.torch import TorchTrainer, prepare_model

def make_model():
    return prepare_model(torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)))

def loop(config):
    train_steps(config["steps"], config["batch"], config["every"], train.report)

if __name__ == "__main__":
    steps, batch, every = map(int, sys.argv[1:4])
    with tempfile.TemporaryDirectory() as storage:
        TorchTrainer(loop, train_loop_config={"steps": steps, "batch": batch, "every": every},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(storage_path=storage, verbose=0)).fit()
"""
)

FINISHED = "finished rank"
GLOO_TEARDOWN_ABORT = "terminate called without an active exception"

PLAIN_DDP = (
    LOOP
    + f"""
FINISHED = {FINISHED!r}
"""
    + """
import os, sys
import torch.distributed as dist

def make_model():
    return torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)))

if __name__ == "__main__":
    steps, batch, every = map(int, sys.argv[1:4])
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", sys.argv[4] if len(sys.argv) > 4 else "0")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    dist.init_process_group("gloo")
    train_steps(steps, batch, every, lambda metrics: None)
    dist.barrier()  # no rank tears gloo down while another still talks to it
    print(f"{FINISHED} {os.environ['RANK']}", flush=True)  # so every rank did its steps
    dist.destroy_process_group()
"""
)


def wall_of(command: list[str], env: dict[str, str], several: bool = False) -> tuple[float, bool]:
    """The command's wall time, and whether it ended in gloo's teardown abort, which only
    a run of ``several`` processes may, once one of them said it passed the last barrier
    (every rank did its steps; torchrun stops the others when one aborts); any other
    failure ends the benchmark."""
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode == 0:
        return wall, False
    passed = any(line.startswith(FINISHED) for line in done.stdout.splitlines())
    if several and passed and GLOO_TEARDOWN_ABORT in done.stderr:
        return wall, True
    raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr}")


def free_port() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def main() -> None:
    parser = bench.options(__doc__, repeats=5, steps=200, batch=64, every=20)
    args = parser.parse_args()
    loop = [str(args.steps), str(args.batch), str(args.every)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    # modules byte-compiled once, as an installed package's are
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    walls: dict[str, list[float]] = {"lockstep": [], "one process": [], "torchrun": []}
    with tempfile.TemporaryDirectory(prefix="lockstep-bench-") as folder:
        # torchrun's agent leaves its torchelastic_* directories behind: in here, they go
        env["TMPDIR"] = folder
        ours = os.path.join(folder, "with_lockstep.py")
        plain = os.path.join(folder, "plain_ddp.py")
        with open(ours, "w") as f:
            f.write(LOCKSTEP)
        with open(plain, "w") as f:
            f.write(PLAIN_DDP)
        wall_of([sys.executable, ours, *loop], env)  # compiles what it imports, untimed
        aborted = 0
        for _ in range(args.repeats):
            walls["lockstep"].append(wall_of([sys.executable, ours, *loop], env)[0])
            one = wall_of([sys.executable, plain, *loop, free_port()], env)[0]
            walls["one process"].append(one)
            standalone = [torchrun, "--standalone", "--nproc-per-node", "2", plain, *loop]
            wall, abort = wall_of(standalone, env, several=True)
            walls["torchrun"].append(wall)
            aborted += abort
    median = {name: statistics.median(runs) for name, runs in walls.items()}
    print(bench.machine_load())
    for name, runs in walls.items():
        listed = ", ".join(f"{w:.2f}" for w in runs)
        print(f"{name}: median {median[name]:.2f} s (runs: {listed})")
    alone = median["lockstep"] / median["one process"]
    versus = median["lockstep"] / median["torchrun"]
    if aborted:
        print(f"torchrun: {aborted} of {args.repeats} runs ended in gloo's teardown abort")
    print(f"lockstep / one process: {alone:.2f}x (target at most 1.1x)")
    print(f"lockstep / plain torchrun: {versus:.2f}x (target at most 0.6x)")


if __name__ == "__main__":
    main()
