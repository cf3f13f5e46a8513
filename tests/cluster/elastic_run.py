"""An elastic lockstep run, ``num_workers=(MIN, MAX)``, for the test of torchrun's elastic
rendezvous: every process that torchrun starts runs it.

Each worker appends what it saw (its ranks, the world, its host) to
``OUT/seen-rank<R>.jsonl`` at the start of every epoch, and checkpoints its epoch;
rank 0's ``epoch.txt`` is where the next attempt, of any size, goes on from. The run ends
after the epoch that ``OUT/last-epoch`` names, once that file exists (the test writes it
when the run has done what it watches for; every rank reaches that epoch after the file
is there, so all end at the same one). The code after ``fit()`` writes
``OUT/after-fit-<host>-<pid>.json``.

    python elastic_run.py --out OUT --storage STORAGE --name NAME --min-workers 2 \
        --max-workers 4 [--sleep-s S]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import tempfile
import time

from lockstep import train
from lockstep.train import Checkpoint, DataParallelTrainer, FailureConfig, RunConfig, ScalingConfig

MAX_EPOCHS = 500  # a run the test lost track of still ends


def train_func(config):
    context = train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    epoch = 0
    if checkpoint := train.get_checkpoint():
        with checkpoint.as_directory() as d, open(os.path.join(d, "epoch.txt")) as f:
            epoch = int(f.read()) + 1
    while True:
        seen = {
            "epoch": epoch,
            "rank": rank,
            "world_size": world,
            "local_rank": context.get_local_rank(),
            "node_rank": context.get_node_rank(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
        }
        with open(os.path.join(config["out"], f"seen-rank{rank}.jsonl"), "a") as f:
            f.write(json.dumps(seen) + "\n")
        time.sleep(config["sleep_s"])  # an epoch's work
        with tempfile.TemporaryDirectory() as d:
            names = [f"rank{rank}.txt", *(["epoch.txt"] if rank == 0 else [])]
            for name in names:
                with open(os.path.join(d, name), "w") as f:
                    f.write(str(epoch))
            train.report({"epoch": epoch}, checkpoint=Checkpoint.from_directory(d))
        if epoch >= min(_last_epoch(config["out"]), MAX_EPOCHS):
            return
        epoch += 1


def _last_epoch(out: str) -> int:
    try:
        with open(os.path.join(out, "last-epoch")) as f:
            return int(f.read())
    except (OSError, ValueError):
        return MAX_EPOCHS


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--storage", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--min-workers", type=int, required=True)
    parser.add_argument("--max-workers", type=int, required=True)
    parser.add_argument("--sleep-s", type=float, default=0.2)
    args = parser.parse_args()
    trainer = DataParallelTrainer(
        train_func,
        train_loop_config={"out": args.out, "sleep_s": args.sleep_s},
        scaling_config=ScalingConfig(num_workers=(args.min_workers, args.max_workers)),
        run_config=RunConfig(
            name=args.name,
            storage_path=args.storage,
            verbose=0,
            # a node joining or lost is no failure: none is allowed
            failure_config=FailureConfig(max_failures=0),
        ),
    )
    result = trainer.fit()
    after = {"host": socket.gethostname(), "metrics": result.metrics, "path": result.path}
    name = f"after-fit-{socket.gethostname()}-{os.getpid()}.json"
    with open(os.path.join(args.out, name), "w") as f:
        json.dump(after, f)


if __name__ == "__main__":
    main()
