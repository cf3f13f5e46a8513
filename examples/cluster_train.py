"""One script for a laptop and for a cluster: DDP linear regression with checkpoints.

Run as it is, it trains on this machine's processes. Started by a scheduler or launcher on
several nodes (srun, torchrun, mpirun, Kubeflow's pods, SageMaker's instances), every
process runs this same script and they form one run: the process of rank 0 drives it, the
others start their share of the workers, and only the driver goes past fit(). See
examples/slurm_job.sbatch and the README's "Schedulers" section.

Install and run, from the repository's root:

    pip install -e ".[torch]"
    python examples/cluster_train.py [--workers 2] [--epochs 6] [--storage-path DIR]

``--workers MIN:MAX`` makes the run elastic, ``ScalingConfig(num_workers=(MIN, MAX))``:
under torchrun's elastic rendezvous (``--nnodes MIN_NODES:MAX_NODES``) its size follows
the nodes that torchrun has.

Runs go to ~/lockstep_results (or $LOCKSTEP_STORAGE_PATH) unless --storage-path says
otherwise; on several nodes it must be storage every node sees. Without --name, a job's
run is named after the job (SLURM's job id, ...), so that a requeued job continues it.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import torch

from lockstep import train
from lockstep.train import Checkpoint, FailureConfig, RunConfig, ScalingConfig
from lockstep.train.torch import TorchTrainer, prepare_model


def train_func(config):
    torch.manual_seed(0)
    model = prepare_model(torch.nn.Linear(1, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    start = 0
    if checkpoint := train.get_checkpoint():  # a restart, or a requeued job
        with checkpoint.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"))
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"] + 1
    rank = train.get_context().get_world_rank()
    x = torch.linspace(-1, 1, 64).unsqueeze(1) + rank  # each worker's own part of the data
    y = 3 * x + 1
    for epoch in range(start, config["epochs"]):
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with tempfile.TemporaryDirectory() as d:
            if rank == 0:
                state = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict()}
                torch.save({**state, "epoch": epoch}, os.path.join(d, "state.pt"))
            metrics = {"epoch": epoch, "loss": loss.item()}
            train.report(metrics, checkpoint=Checkpoint.from_directory(d))


def workers(text: str) -> int | tuple[int, int]:
    """``4``, or ``2:4`` for ``num_workers=(2, 4)``."""
    low, _, high = text.partition(":")
    return (int(low), int(high)) if high else int(low)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=workers, default=2,
                        help="world size, or MIN:MAX for an elastic run (default: 2)")  # fmt: skip
    parser.add_argument("--epochs", type=int, default=6, help="epochs (default: 6)")
    parser.add_argument("--storage-path", default=None, help="where runs go")
    parser.add_argument("--name", default=None, help="the run's name")
    args = parser.parse_args()
    trainer = TorchTrainer(
        train_func,
        train_loop_config={"epochs": args.epochs},
        scaling_config=ScalingConfig(num_workers=args.workers),
        run_config=RunConfig(
            name=args.name,
            storage_path=args.storage_path,
            failure_config=FailureConfig(max_failures=3),  # a worker's death: restart
        ),
    )
    result = trainer.fit()
    print(result.metrics)  # once, in the driver


if __name__ == "__main__":
    main()
