"""A two-layer network on random data, trained on 4 workers with the older Trainer API.

The Ray Train material's first example (``from ray.train import Trainer``), with ``ray``
changed to ``lockstep``: prepare_model wraps the model in DistributedDataParallel, so the
4 workers keep identical weights while each trains on its own random batch.

Install and run, from the repository's root:

    pip install -e ".[torch]"
    python examples/torch_two_layer.py [--workers 4] [--epochs 3] [--storage-path DIR]

Runs go to ~/lockstep_results (or $LOCKSTEP_STORAGE_PATH) unless --storage-path says otherwise.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn, optim

import lockstep.train.torch
from lockstep import train
from lockstep.train import Trainer

num_samples = 20
input_size = 10
layer_size = 15
output_size = 5


class NeuralNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer1 = nn.Linear(input_size, layer_size)
        self.relu = nn.ReLU()
        self.layer2 = nn.Linear(layer_size, output_size)

    def forward(self, input):
        return self.layer2(self.relu(self.layer1(input)))


def train_func_distributed(config):
    input = torch.randn(num_samples, input_size)
    labels = torch.randn(num_samples, output_size)
    model = NeuralNetwork()
    model = lockstep.train.torch.prepare_model(model)
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(config["epochs"]):
        output = model(input)
        loss = loss_fn(output, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        train.report({"epoch": epoch, "loss": loss.item()})
    # the same weights on every worker: DDP averaged the gradients
    return [p.detach().sum().item() for p in model.parameters()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--storage-path", default=None, help="default: ~/lockstep_results")
    args = parser.parse_args()

    trainer = Trainer(
        backend="torch", num_workers=args.workers, use_gpu=False, logdir=args.storage_path
    )
    trainer.start()
    results = trainer.run(train_func_distributed, config={"epochs": args.epochs})
    trainer.shutdown()
    print(f"weights per worker (sums): {[round(sum(r), 6) for r in results]}")
    assert all(r == results[0] for r in results), "DDP keeps every worker's weights equal"


if __name__ == "__main__":
    main()
