"""The Ray Train material's Tune example: an objective function over a search space.

Kept as the material writes it, with ``ray`` changed to ``lockstep``: ``objective(config)``
trains a model with the config's learning rate and number of layers using the same
``train_func`` as plain training, tests it, and returns its metrics; the search space
crosses a grid of learning rates with a choice of depths; ``Tuner(objective,
param_space=search_space).fit()`` runs one trial per config, and the best config is read
from the results. The material elides the model and the data (``...``): here a small MLP
learns a synthetic two-class problem, and the objective returns ``score`` (the test loss)
beside ``acc``, the metric the material's last line asks for.

Install and run, from the repository's root:

    pip install -e ".[tune]"
    python examples/tune_objective_search_space.py [--storage-path DIR]

Runs go to ~/lockstep_results (or $LOCKSTEP_STORAGE_PATH) unless --storage-path says otherwise.
"""

from __future__ import annotations

import argparse
import os

import torch
from torch import nn

from lockstep import train, tune  # noqa: F401  (the material imports both)


def make_loaders(seed: int = 0) -> tuple[list, list]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(512, 4, generator=generator)
    y = ((x[:, 0] * x[:, 1] + x[:, 2]) > 0).long()
    batches = [(x[i : i + 64], y[i : i + 64]) for i in range(0, 512, 64)]
    return batches[:6], batches[6:]


def build_model(n_layers: int) -> nn.Module:
    layers: list[nn.Module] = []
    width = 4
    for _ in range(n_layers):
        layers += [nn.Linear(width, 16), nn.ReLU()]
        width = 16
    layers.append(nn.Linear(width, 2))
    return nn.Sequential(*layers)


def train_func(model: nn.Module, train_loader: list, lr: float = 0.01, epochs: int = 20) -> None:
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(epochs):
        for x, y in train_loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()


def test_func(model: nn.Module, test_loader: list) -> tuple[float, float]:
    correct, total, loss = 0, 0, 0.0
    with torch.no_grad():
        for x, y in test_loader:
            out = model(x)
            loss += float(nn.functional.cross_entropy(out, y, reduction="sum"))
            correct += int((out.argmax(1) == y).sum())
            total += len(y)
    return correct / total, loss / total


def objective(config):  # 定義 objective function
    torch.manual_seed(0)
    train_loader, test_loader = make_loaders()
    model = build_model(config["n_layers"])
    train_func(model, train_loader, lr=config["lr"])  # 一樣使用 training function
    acc, loss = test_func(model, test_loader)  # 測試在 testing dataset

    return {"acc": acc, "score": loss}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage-path", default=None, help="default: ~/lockstep_results")
    args = parser.parse_args()
    # Where the Tuner writes, as RunConfig(storage_path=...) is not given in the material.
    if args.storage_path:
        os.environ["LOCKSTEP_STORAGE_PATH"] = os.path.abspath(args.storage_path)
    torch.set_num_threads(1)

    search_space = {  # 定義要搜尋的 hyperparameters
        "lr": tune.grid_search([0.001, 0.01, 0.1]),
        "n_layers": tune.choice([1, 2, 3]),
    }

    # 開始訓練
    tuner = tune.Tuner(objective, param_space=search_space)
    results = tuner.fit()

    print(results.get_best_result(metric="score", mode="min").config)  # 獲得結果
    assert len(results) == 3 and results.num_errors == 0


if __name__ == "__main__":
    main()
