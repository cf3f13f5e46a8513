"""The Ray Train material's Horovod PyTorch script, run by HorovodTrainer on 2 workers.

The training function is the material's (``hvd.init()``, a ``DistributedSampler`` over
``hvd.size()`` ranks, ``hvd.DistributedOptimizer``, ``hvd.broadcast_parameters``, the
``F.nll_loss`` loop) on a small synthetic classification set, with a report per epoch.
HorovodTrainer starts the workers as ``horovodrun --gloo -np 2`` would. Horovod is built by
``scripts/install-horovod.sh``.

Install and run, from the repository's root:

    pip install -e ".[torch]"
    PYTHON=python bash scripts/install-horovod.sh   # builds Horovod (a few minutes)
    python examples/horovod_torch.py [--storage-path DIR] [--epochs 3]

Runs go to ~/lockstep_results (or $LOCKSTEP_STORAGE_PATH) unless --storage-path says otherwise.
"""

import argparse
import os
import tempfile

import horovod.torch as hvd
import torch
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import TensorDataset

from lockstep import train
from lockstep.train import Checkpoint, RunConfig, ScalingConfig
from lockstep.train.horovod import HorovodTrainer


def make_dataset():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(512, 10, generator=generator)
    y = (x[:, :3].sum(dim=1) > 0).long()
    return TensorDataset(x, y)


def train_func(config):
    # Initialize Horovod
    hvd.init()
    if torch.cuda.is_available():
        torch.cuda.set_device(hvd.local_rank())

    # Define dataset...
    train_dataset = make_dataset()
    # Partition dataset among workers using DistributedSampler
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_dataset, num_replicas=hvd.size(), rank=hvd.rank()
    )
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=32, sampler=train_sampler)
    # Build model...
    model = torch.nn.Sequential(
        torch.nn.Linear(10, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2), torch.nn.LogSoftmax(1)
    )
    if torch.cuda.is_available():
        model.cuda()
    optimizer = optim.SGD(model.parameters(), lr=0.1 * hvd.size())
    # Add Horovod Distributed Optimizer
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    # Broadcast parameters from rank 0 to all other processes.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)

    for epoch in range(config["epochs"]):
        train_sampler.set_epoch(epoch)
        total = 0.0
        for batch_idx, (data, target) in enumerate(train_loader):  # noqa: B007 (as written)
            optimizer.zero_grad()
            output = model(data)
            loss = F.nll_loss(output, target)
            loss.backward()
            optimizer.step()
            total += loss.item()
        # The epoch's mean loss over every worker's batches.
        mean_loss = hvd.allreduce(torch.tensor(total / len(train_loader))).item()
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint = None
            if hvd.rank() == 0:
                torch.save(model.state_dict(), os.path.join(tmp, "model.pt"))
                checkpoint = Checkpoint.from_directory(tmp)
            train.report({"epoch": epoch, "loss": mean_loss}, checkpoint=checkpoint)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage-path", default=None, help="default: ~/lockstep_results")
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    trainer = HorovodTrainer(
        train_func,
        train_loop_config={"epochs": args.epochs},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=args.storage_path),
    )
    result = trainer.fit()
    print(result.metrics)
    losses = result.metrics_dataframe["loss"].tolist()
    assert losses[-1] < losses[0], losses  # it learned


if __name__ == "__main__":
    main()
