"""A ConvNet with checkpoint save and resume, on 8x8 digits (MNIST in the Ray Train material).

The first fit trains a few epochs; the second fit with the same run name continues from the
latest checkpoint, as after an interruption. The checkpoint holds the model, the optimizer
and every rank's random generators (``train.save_rng_state``), so the continued run draws
the same dropout masks as one never interrupted and ends with the same weights, bit for bit.

Install and run, from the repository's root:

    pip install -e ".[demo]"      # torch and scikit-learn (the digits)
    python examples/torch_convnet_checkpoint.py [--epochs 6] [--storage-path DIR]

Runs go to ~/lockstep_results (or $LOCKSTEP_STORAGE_PATH) unless --storage-path says otherwise.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lockstep import train
from lockstep.train import Checkpoint, CheckpointConfig, RunConfig, ScalingConfig
from lockstep.train.torch import (
    TorchTrainer,
    enable_reproducibility,
    prepare_data_loader,
    prepare_model,
)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1, padding=1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(64 * 4 * 4, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


def digits():
    from sklearn.datasets import load_digits

    data = load_digits()
    images = torch.tensor(data.images / 16.0, dtype=torch.float32).unsqueeze(1)
    return TensorDataset(images, torch.tensor(data.target))


def train_loop_per_worker(config):
    # Every generator seeded (random, numpy, torch): the same initial weights in every run.
    enable_reproducibility(seed=config.get("seed", 0))
    train_loader = prepare_data_loader(
        DataLoader(digits(), batch_size=config["batch_size"], shuffle=True)
    )
    model = prepare_model(ConvNet())
    optimizer = torch.optim.Adadelta(model.parameters(), lr=config["lr"])
    start_epoch = 0
    checkpoint = train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as checkpoint_dir:
            state = torch.load(os.path.join(checkpoint_dir, "checkpoint.pt"))
            # the generators as they were at the checkpoint, not as the seed set them
            train.load_rng_state(checkpoint_dir)
        model.module.load_state_dict(state["model_state_dict"])
        optimizer.load_state_dict(state["optimizer_state_dict"])
        start_epoch = state["epoch"] + 1
        print(f"Resuming from epoch {start_epoch}")
    for epoch in range(start_epoch, config["epochs"]):
        for fault in config.get("faults", []):  # failures a recovery test injects
            fault.fire_if_due(epoch)
        train_loader.sampler.set_epoch(epoch)
        model.train()
        total_loss, correct, seen = 0.0, 0, 0
        for data, target in train_loader:
            optimizer.zero_grad()
            output = model(data)
            loss = F.nll_loss(output, target)
            loss.backward()
            optimizer.step()
            total_loss += loss.item() * len(target)
            correct += (output.argmax(dim=1) == target).sum().item()
            seen += len(target)
        metrics = {"epoch": epoch, "loss": total_loss / seen, "accuracy": correct / seen}
        with tempfile.TemporaryDirectory() as temp_checkpoint_dir:
            if train.get_context().get_world_rank() == 0:
                torch.save(
                    {
                        "epoch": epoch,
                        "model_state_dict": model.module.state_dict(),
                        "optimizer_state_dict": optimizer.state_dict(),
                    },
                    os.path.join(temp_checkpoint_dir, "checkpoint.pt"),
                )
            train.save_rng_state(temp_checkpoint_dir)  # every rank's own
            train.report(metrics, checkpoint=Checkpoint.from_directory(temp_checkpoint_dir))


def fit(epochs: int, storage_path: str):
    return TorchTrainer(
        train_loop_per_worker,
        train_loop_config={"batch_size": 64, "lr": 1.0, "epochs": epochs},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            name="convnet",
            storage_path=storage_path,
            checkpoint_config=CheckpointConfig(
                num_to_keep=2, checkpoint_score_attribute="accuracy", checkpoint_score_order="max"
            ),
        ),
    ).fit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--storage-path", default=None, help="default: ~/lockstep_results")
    args = parser.parse_args()

    first = fit(args.epochs // 2, args.storage_path)
    print(
        f"after the first fit: epoch {first.metrics['epoch']}, "
        f"accuracy {first.metrics['accuracy']:.3f}"
    )
    second = fit(args.epochs, args.storage_path)  # same name: resumes from the checkpoint
    epochs = second.metrics_dataframe["epoch"].tolist()
    print(
        f"after resuming: epoch {second.metrics['epoch']}, "
        f"accuracy {second.metrics['accuracy']:.3f}, epochs run: {epochs}"
    )
    with second.checkpoint.as_directory() as checkpoint_dir:
        state = torch.load(os.path.join(checkpoint_dir, "checkpoint.pt"))
    model = ConvNet()
    model.load_state_dict(state["model_state_dict"])
    print(f"restored the model of epoch {state['epoch']} from {second.checkpoint.path}")
    print(f"run directory: {second.path}")


if __name__ == "__main__":
    main()
