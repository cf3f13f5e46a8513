"""Quickstart: one training function on 2 local worker processes, with checkpoints.

Each worker fits y = 3x + 2 by gradient descent on its own samples (numpy only), saves
its state every epoch, and resumes from the latest checkpoint, as a real training
script does. A failure is injected once on rank 1 to show the run recovering; the run
ends exactly as a run without it would (tests/integration/test_bitwise_resume.py checks).

Install and run, from the repository's root:

    pip install -e .
    python examples/quickstart.py [--epochs 20] [--storage-path DIR]

Runs go to ~/lockstep_results (or $LOCKSTEP_STORAGE_PATH) unless --storage-path says otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import numpy as np

from lockstep import train
from lockstep.testing import Fault
from lockstep.train import (
    Checkpoint,
    CheckpointConfig,
    DataParallelTrainer,
    FailureConfig,
    RunConfig,
    ScalingConfig,
)


def train_func(config: dict) -> dict:
    rank = train.get_context().get_world_rank()
    rng = np.random.default_rng(rank)
    x = rng.uniform(-1, 1, 256)
    y = 3 * x + 2 + rng.normal(0, 0.1, 256)
    # Each rank fits its own samples, so each keeps its own state in the checkpoint.
    state_file = f"state_rank_{rank}.json"
    weight, bias, start = 0.0, 0.0, 0
    if checkpoint := train.get_checkpoint():
        with checkpoint.as_directory() as d, open(os.path.join(d, state_file)) as f:
            state = json.load(f)
        weight, bias, start = state["weight"], state["bias"], state["epoch"] + 1
    for epoch in range(start, config["epochs"]):
        for fault in config.get("faults", []):
            fault.fire_if_due(epoch)
        error = weight * x + bias - y
        weight -= config["lr"] * 2 * float(np.mean(error * x))
        bias -= config["lr"] * 2 * float(np.mean(error))
        loss = float(np.mean((weight * x + bias - y) ** 2))
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, state_file), "w") as f:
                json.dump({"weight": weight, "bias": bias, "epoch": epoch}, f)
            train.report({"epoch": epoch, "loss": loss}, checkpoint=Checkpoint.from_directory(d))
    return {"weight": weight, "bias": bias}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage-path", default=None, help="default: ~/lockstep_results")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--name", default="quickstart")
    args = parser.parse_args()

    trainer = DataParallelTrainer(
        train_func,
        train_loop_config={
            "epochs": args.epochs,
            "lr": 0.5,
            "faults": [Fault(kind="raise", rank=1, at_epoch=args.epochs // 2)],
        },
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            name=args.name,
            storage_path=args.storage_path,
            checkpoint_config=CheckpointConfig(
                num_to_keep=2, checkpoint_score_attribute="loss", checkpoint_score_order="min"
            ),
            failure_config=FailureConfig(max_failures=2),
        ),
    )
    result = trainer.fit()
    print(f"final metrics: {result.metrics}")
    print(
        f"model on rank 0: weight={result.return_value['weight']:.3f} "
        f"bias={result.return_value['bias']:.3f} (true: 3 and 2)"
    )
    print(f"latest checkpoint: {result.checkpoint.path}")
    print(f"kept checkpoints: {[os.path.basename(c.path) for c, _ in result.best_checkpoints]}")
    print(f"run directory: {result.path}")


if __name__ == "__main__":
    main()
