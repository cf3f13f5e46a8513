"""A lockstep training script as a user runs it under a launcher, for the multi-node tests.

Every launched process runs it; each worker appends what it saw (its ranks, host, the
variables it was given) to ``OUT/seen-rank<R>.jsonl`` every epoch, and checkpoints a file
of its own. The code after ``fit()`` writes ``OUT/after-fit-<host>-<pid>.json``: once,
in the driver, whatever the number of processes.

    python lockstep_run.py --out OUT --storage STORAGE --name NAME --workers N --epochs E \
        [--kill-rank R --kill-epoch K] [--sleep-s S] [--fail-at EPOCH]

(options, so that SageMaker's toolkit passes them as its hyperparameters). ``--storage ""``
and ``--name ""`` leave them to lockstep's defaults.
"""

from __future__ import annotations

import argparse
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
            # this script's, in a worker forked from its launched process's fork server
            "program": os.path.basename(sys.argv[0]),
            "env": {k: os.environ.get(k) for k in SEEN_VARIABLES},
            "rows": _rows(),
            "sum": _all_reduce(rank) if config["torch"] else None,
        }
        with open(os.path.join(config["out"], f"seen-rank{rank}.jsonl"), "a") as f:
            f.write(json.dumps(seen) + "\n")
        time.sleep(config["sleep_s"])
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, f"rank{rank}.txt"), "w") as f:
                f.write(str(epoch))
            train.report({"epoch": epoch}, checkpoint=Checkpoint.from_directory(d))


def _all_reduce(rank: int) -> float:
    """The ranks' sum over the workers' torch process group (gloo, across the hosts)."""
    import torch
    import torch.distributed as dist

    total = torch.tensor([rank + 1.0])
    dist.all_reduce(total)
    return float(total.item())


def _rows() -> int | None:
    """The rows of this worker's shard of the "train" dataset, if the run has one."""
    try:
        shard = train.get_dataset_shard("train")
    except (KeyError, ValueError):
        return None
    return sum(len(batch["x"]) for batch in shard.iter_batches(batch_size=10))


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--storage", default="")
    parser.add_argument("--name", default="")
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--kill-rank", type=int)
    parser.add_argument("--kill-epoch", type=int)
    parser.add_argument("--sleep-s", type=float, default=0.0)
    parser.add_argument("--fail-at", type=int, default=-1)
    parser.add_argument("--data-from", default="", help="a variable naming a CSV directory")
    parser.add_argument("--torch", action="store_true", help="a TorchTrainer: all-reduce")
    parser.add_argument("--hang-rank", type=int)
    parser.add_argument("--hang-epoch", type=int, default=1)
    return parser.parse_args()


def main() -> None:
    args = arguments()
    faults = []
    if args.kill_rank is not None:
        # SIGKILL, at once: the kernel's OOM killer or an operator's kill -9
        kill = Fault(kind="signal", signum=signal.SIGKILL, rank=args.kill_rank,
                     at_epoch=args.kill_epoch)  # fmt: skip
        faults.append(kill)
    if args.fail_at >= 0:  # every attempt fails: the run fails
        faults.append(Fault(kind="raise", rank=0, at_epoch=args.fail_at, times=-1))
    if args.hang_rank is not None:  # a rank that hangs: the run fails naming it
        faults.append(Fault(kind="hang", rank=args.hang_rank, at_epoch=args.hang_epoch))
    config = {"epochs": args.epochs, "faults": faults, "out": args.out, "sleep_s": args.sleep_s}
    config["torch"] = args.torch
    datasets = {}
    if args.data_from:  # SageMaker's SM_CHANNEL_TRAIN, say
        from lockstep import data

        datasets["train"] = data.read_csv(os.environ[args.data_from])
    trainer_class = DataParallelTrainer
    if args.torch:
        from lockstep.train.torch import TorchTrainer as trainer_class
    hang = {"hang_timeout_s": 10.0, "max_failures": 0} if args.hang_rank is not None else {}
    trainer = trainer_class(
        train_func,
        datasets=datasets,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=args.workers),
        run_config=RunConfig(
            name=args.name or None,
            storage_path=args.storage or None,
            verbose=0,
            failure_config=FailureConfig(**({"max_failures": 1} | hang)),
        ),
    )
    result = trainer.fit()
    after = {"host": socket.gethostname(), "metrics": result.metrics, "path": result.path}
    with open(
        os.path.join(args.out, f"after-fit-{socket.gethostname()}-{os.getpid()}.json"), "w"
    ) as f:
        json.dump(after, f)


if __name__ == "__main__":
    main()
