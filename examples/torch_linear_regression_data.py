"""Linear regression fed from lockstep.data shards, as in the Ray Train material.

The dataset is described once on the driver; each of the 2 workers reads only its own half
of it with get_dataset_shard("train").iter_torch_batches, and DDP keeps the model in step.

Install and run, from the repository's root:

    pip install -e ".[torch]"
    python examples/torch_linear_regression_data.py [--epochs 40] [--storage-path DIR]

Runs go to ~/lockstep_results (or $LOCKSTEP_STORAGE_PATH) unless --storage-path says otherwise.
"""

from __future__ import annotations

import argparse

import torch

import lockstep
import lockstep.data
from lockstep import train
from lockstep.train import RunConfig, ScalingConfig
from lockstep.train.torch import TorchTrainer


def train_func(config):
    lr = config["lr"]
    epochs = config["epochs"]
    model = torch.nn.Linear(1, 1)
    model = lockstep.train.torch.prepare_model(model)
    loss_fn = torch.nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    train_data_shard = train.get_dataset_shard("train")
    for epoch in range(epochs):
        total, count = 0.0, 0
        for batch in train_data_shard.iter_torch_batches(batch_size=32, dtypes=torch.float32):
            inputs, labels = batch["x"], batch["y"]
            loss = loss_fn(model(inputs), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total, count = total + loss.item() * len(labels), count + len(labels)
        train.report({"epoch": epoch, "loss": total / count, "rows": count})
    return model.module.weight.item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--storage-path", default=None, help="default: ~/lockstep_results")
    args = parser.parse_args()

    train_dataset = lockstep.data.from_items(
        [{"x": [x / 200], "y": [2 * x / 200]} for x in range(200)]
    )
    trainer = TorchTrainer(
        train_func,
        train_loop_config={"lr": 0.5, "epochs": args.epochs},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=args.storage_path),
        datasets={"train": train_dataset},
    )
    result = trainer.fit()
    print(
        f"final loss {result.metrics['loss']:.5f}, rows per worker {result.metrics['rows']}, "
        f"slope {result.return_value:.3f} (true: 2)"
    )
    print(f"run directory: {result.path}")


if __name__ == "__main__":
    main()
