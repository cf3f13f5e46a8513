"""A lockstep training script as a user runs it under a launcher, for the multi-node tests.

Every launched process runs it; each worker appends what it saw (its ranks, host, the
variables it was given) to ``OUT/seen-rank<R>.jsonl`` every epoch, and checkpoints a file
of its own. The code after ``fit()`` writes ``OUT/after-fit-<host>-<pid>.json``: once,
in the driver, whatever the number of processes.

    python lockstep_run.py OUT STORAGE NAME NUM_WORKERS EPOCHS [KILL_RANK KILL_EPOCH] [SLEEP_S]
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import tempfile
import time

from lockstep import train
from lockstep.testing import Fault
from lockstep.train import Checkpoint, DataParallelTrainer, FailureConfig, RunConfig, ScalingConfig

SEEN_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                  "CUDA_VISIBLE_DEVICES", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                  "TORCHELASTIC_RUN_ID")  # fmt: skip


def train_func(config):
    context = train.get_context()
    rank = context.get_world_rank()
    start = 0
    if checkpoint := train.get_checkpoint():
        with checkpoint.as_directory() as d, open(os.path.join(d, f"rank{rank}.txt")) as f:
            start = int(f.read()) + 1
    for epoch in range(start, config["epochs"]):
        for fault in config["faults"]:
            fault.fire_if_due(epoch)
        seen = {
            "epoch": epoch,
            "rank": rank,
            "local_rank": context.get_local_rank(),
            "node_rank": context.get_node_rank(),
            "world_size": context.get_world_size(),
            "local_world_size": context.get_local_world_size(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "env": {k: os.environ.get(k) for k in SEEN_VARIABLES},
        }
        with open(os.path.join(config["out"], f"seen-rank{rank}.jsonl"), "a") as f:
            f.write(json.dumps(seen) + "\n")
        time.sleep(config["sleep_s"])
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, f"rank{rank}.txt"), "w") as f:
                f.write(str(epoch))
            train.report({"epoch": epoch}, checkpoint=Checkpoint.from_directory(d))


def main() -> None:
    out, storage, name, workers, epochs = sys.argv[1:6]
    faults = []
    if len(sys.argv) > 7:
        # SIGKILL, at once: the kernel's OOM killer or an operator's kill -9
        rank, epoch = int(sys.argv[6]), int(sys.argv[7])
        faults.append(Fault(kind="signal", signum=signal.SIGKILL, rank=rank, at_epoch=epoch))
    sleep_s = float(sys.argv[8]) if len(sys.argv) > 8 else 0.0
    trainer = DataParallelTrainer(
        train_func,
        train_loop_config={"epochs": int(epochs), "faults": faults, "out": out, "sleep_s": sleep_s},
        scaling_config=ScalingConfig(num_workers=int(workers)),
        run_config=RunConfig(
            name=name or None,
            storage_path=storage,
            verbose=0,
            failure_config=FailureConfig(max_failures=1),
        ),
    )
    result = trainer.fit()
    after = {"host": socket.gethostname(), "metrics": result.metrics, "path": result.path}
    with open(os.path.join(out, f"after-fit-{socket.gethostname()}-{os.getpid()}.json"), "w") as f:
        json.dump(after, f)


if __name__ == "__main__":
    main()
