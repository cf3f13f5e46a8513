"""Log every report of a run to MLflow and TensorBoard, as the Ray Train material's chapter
on callbacks does, then look at the run with `lockstep runs`.

Install and run, from the repository's root:

    pip install -e ".[tracking]"
    python examples/tracking_mlflow_tensorboard.py [--storage-path DIR]

Runs go to ~/lockstep_results (or $LOCKSTEP_STORAGE_PATH) unless --storage-path says otherwise.

MLflow's store is `mlflow.db` in the storage path (`mlflow ui --backend-store-uri
sqlite:///DIR/mlflow.db` shows it); `tensorboard --logdir DIR` shows the scalars.
"""

from __future__ import annotations

import argparse
import os

import mlflow
import torch
import torch.nn as nn

import lockstep.train as train
from lockstep.cli import main as lockstep_cli
from lockstep.train import Trainer
from lockstep.train.callbacks import MLflowLoggerCallback, TBXLoggerCallback


def train_func():
    torch.manual_seed(0)
    x = torch.linspace(0, 1, 64).unsqueeze(1)
    y = 3 * x + 2
    model = train.torch.prepare_model(nn.Linear(1, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(10):
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        train.report({"loss": loss.item()})


def main() -> None:
    import lockstep.train.torch  # noqa: F401  (the material uses train.torch.prepare_model)

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage-path", default=None, help="default: ~/lockstep_results")
    args = parser.parse_args()
    default = os.environ.get("LOCKSTEP_STORAGE_PATH", "~/lockstep_results")
    args.storage_path = os.path.expanduser(args.storage_path or default)
    os.makedirs(args.storage_path, exist_ok=True)
    mlflow.set_tracking_uri(f"sqlite:///{os.path.join(args.storage_path, 'mlflow.db')}")

    trainer = Trainer(backend="torch", num_workers=2, logdir=args.storage_path)
    trainer.start()
    # Run the training function, logging all the intermediate results
    # to MLflow and Tensorboard.
    result = trainer.run(
        train_func,
        callbacks=[
            MLflowLoggerCallback(experiment_name="train_experiment"),
            TBXLoggerCallback(),
        ],
    )
    trainer.shutdown()
    print(result)

    client = mlflow.tracking.MlflowClient()
    experiment = client.get_experiment_by_name("train_experiment")
    (run, *_) = client.search_runs([experiment.experiment_id], order_by=["start_time DESC"])
    losses = client.get_metric_history(run.info.run_id, "loss")
    print(f"MLflow run {run.info.run_name}: {len(losses)} losses, last {losses[-1].value:.4f}")
    lockstep_cli(["runs", "list", "--storage-path", args.storage_path])


if __name__ == "__main__":
    main()
