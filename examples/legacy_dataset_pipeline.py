"""The older Trainer with dataset pipelines, as the Ray Train material's chapter shows it.

Datasets are split into train/validation, repeated per epoch with a fresh shuffle, handed to
`Trainer.run(dataset=...)`, and read in each worker with iter_epochs() and to_torch(). The
results are logged as JSON lines and TensorBoard scalars by the callbacks.

Install and run, from the repository's root:

    pip install -e ".[torch]"
    python examples/legacy_dataset_pipeline.py [--workers 4] [--epochs 3] [--storage-path DIR]

Runs go to ~/lockstep_results (or $LOCKSTEP_STORAGE_PATH) unless --storage-path says otherwise.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn

import lockstep
import lockstep.train as train
from lockstep.train import Trainer
from lockstep.train.callbacks import JsonLoggerCallback, TBXLoggerCallback


def get_datasets(a=5, b=10, size=1000, split=0.8):
    def get_dataset(a, b, size):
        items = [i / size for i in range(size)]
        dataset = lockstep.data.from_items([{"x": x, "y": a * x + b} for x in items])
        return dataset

    dataset = get_dataset(a, b, size)
    split_index = int(dataset.count() * split)
    train_dataset, validation_dataset = dataset.random_shuffle().split_at_indices([split_index])
    train_dataset_pipeline = train_dataset.repeat().random_shuffle_each_window()
    validation_dataset_pipeline = validation_dataset.repeat()
    datasets = {
        "train": train_dataset_pipeline,
        "validation": validation_dataset_pipeline,
    }
    return datasets


def train_func(config):
    batch_size = config["batch_size"]
    epochs = config.get("epochs", 3)
    model = train.torch.prepare_model(nn.Linear(1, config["hidden_size"]))
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])

    train_dataset_pipeline_shard = train.get_dataset_shard("train")
    validation_dataset_pipeline_shard = train.get_dataset_shard("validation")
    train_dataset_iterator = train_dataset_pipeline_shard.iter_epochs()
    validation_dataset_iterator = validation_dataset_pipeline_shard.iter_epochs()

    results = []
    for _ in range(epochs):
        train_dataset = next(train_dataset_iterator)
        validation_dataset = next(validation_dataset_iterator)
        train_torch_dataset = train_dataset.to_torch(
            label_column="y",
            feature_columns=["x"],
            label_column_dtype=torch.float,
            feature_column_dtypes=torch.float,
            batch_size=batch_size,
        )
        validation_torch_dataset = validation_dataset.to_torch(
            label_column="y",
            feature_columns=["x"],
            label_column_dtype=torch.float,
            feature_column_dtypes=torch.float,
            batch_size=batch_size,
        )
        for features, labels in train_torch_dataset:
            loss = loss_fn(model(features), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            losses = [loss_fn(model(f), y).item() for f, y in validation_torch_dataset]
        results.append(sum(losses) / len(losses))
        train.report({"validation_loss": results[-1]})
    return results


def main() -> None:
    import lockstep.train.torch  # noqa: F401  (the material uses train.torch.prepare_model)

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--storage-path", default=None, help="default: ~/lockstep_results")
    args = parser.parse_args()

    num_workers = args.workers
    use_gpu = False
    datasets = get_datasets()
    trainer = Trainer("torch", num_workers=num_workers, use_gpu=use_gpu, logdir=args.storage_path)
    config = {"lr": 1e-2, "hidden_size": 1, "batch_size": 4, "epochs": args.epochs}
    trainer.start()
    results = trainer.run(
        train_func,
        config,
        dataset=datasets,
        callbacks=[JsonLoggerCallback(), TBXLoggerCallback()],
    )
    trainer.shutdown()
    print(results)


if __name__ == "__main__":
    main()
