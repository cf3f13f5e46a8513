"""A training function like Ray's ``torch_linear_example.train_func``, which its tests
call: fits ``y = 2x + 5`` with a linear model, reporting the validation loss (and the
weights as a checkpoint) each epoch; returns the reported results."""

from __future__ import annotations

import os
import tempfile

import torch

from lockstep import train
from lockstep.train import Checkpoint
from lockstep.train.torch import prepare_data_loader, prepare_model


def line(size: int) -> torch.utils.data.TensorDataset:
    x = torch.arange(0, 10, 10 / size, dtype=torch.float32)[:, None]
    return torch.utils.data.TensorDataset(x, 2 * x + 5)


def train_func(config):
    batch_size = config.get("batch_size", 32)
    train_loader = prepare_data_loader(torch.utils.data.DataLoader(line(1000), batch_size))
    valid_loader = prepare_data_loader(torch.utils.data.DataLoader(line(400), batch_size))
    model = prepare_model(torch.nn.Linear(1, config.get("hidden_size", 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=config.get("lr", 1e-2))
    loss_fn = torch.nn.MSELoss()
    results = []
    for epoch in range(config.get("epochs", 3)):
        if train.get_context().get_world_size() > 1:
            train_loader.sampler.set_epoch(epoch)
        for x, y in train_loader:
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
        with torch.no_grad():
            losses = [loss_fn(model(x), y).item() for x, y in valid_loader]
        results.append({"loss": sum(losses) / len(losses)})
        with tempfile.TemporaryDirectory() as d:
            torch.save(model.state_dict(), os.path.join(d, "model.pt"))
            train.report(results[-1], checkpoint=Checkpoint.from_directory(d))
    return results
