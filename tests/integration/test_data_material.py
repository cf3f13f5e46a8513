"""The Ray Train material's data examples, run on lockstep with only the imports changed."""

from __future__ import annotations

import dataclasses
import os

import torch
from torch import nn

import lockstep.data as ld
from lockstep import train
from lockstep.data.preprocessor import Preprocessor
from lockstep.train import ScalingConfig
from lockstep.train.torch import TorchTrainer, prepare_model
from tests.helpers import EveryRank


def quiet(run_config, callback):
    return dataclasses.replace(run_config, callbacks=[callback])


def convnet_loop(config):
    """The material's ConvNet loop, shortened: batches of images and labels from the shard."""
    torch.manual_seed(0)
    model = prepare_model(
        nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 26 * 26, 10))
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    train_loader = train.get_dataset_shard("train").iter_torch_batches(batch_size=64)
    for epoch in range(config["epochs"]):
        rows, loss_sum = 0, 0.0
        for batch in train_loader:
            data, target = batch["image"], batch["label"]
            optimizer.zero_grad()
            loss = criterion(model(data), target)
            loss.backward()
            optimizer.step()
            rows += len(target)
            loss_sum += loss.item()
        train.report({"epoch": epoch, "rows": rows, "loss": loss_sum})


def test_convnet_from_a_torch_dataset(run_config):
    images = torch.randn(2000, 1, 28, 28)
    labels = torch.randint(0, 10, (2000,))
    samples = torch.utils.data.TensorDataset(images, labels)

    def to_dict(row):
        image, label = row["item"]
        return {"image": image.numpy(), "label": label.item()}

    train_data = ld.from_torch(samples).map(to_dict)
    callback = EveryRank()
    TorchTrainer(
        convnet_loop,
        train_loop_config={"epochs": 2},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=quiet(run_config, callback),
        datasets={"train": train_data},
    ).fit()
    assert [[m["rows"] for m in step] for step in callback.steps] == [[1000, 1000]] * 2
    assert all(m["loss"] == m["loss"] for step in callback.steps for m in step)  # not NaN


def ingest_loop(config):
    """The material's Ray Data ingest example: the loader made once, then 10 epochs."""
    train_data_shard = train.get_dataset_shard("train")
    train_dataloader = train_data_shard.iter_torch_batches(
        batch_size=config["batch_size"], dtypes=torch.float32
    )
    for epoch_idx in range(10):
        seen = []
        for batch in train_dataloader:
            inputs, labels = batch["x"], batch["y"]
            assert torch.equal(labels, 2 * inputs)
            seen += inputs[:, 0].tolist()
        train.report({"epoch": epoch_idx, "rows": len(seen), "first": seen[0]})


def test_ray_data_ingest_sees_every_row_in_each_of_10_epochs(run_config):
    train_dataset = ld.from_items([{"x": [x], "y": [2 * x]} for x in range(200)])
    callback = EveryRank()
    TorchTrainer(
        ingest_loop,
        train_loop_config={"batch_size": 32},
        datasets={"train": train_dataset},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=quiet(run_config, callback),
    ).fit()
    assert len(callback.steps) == 10
    assert [[m["rows"] for m in step] for step in callback.steps] == [[100, 100]] * 10


class AddMean(Preprocessor):
    """A preprocessor in Ray's style, still to run when the workers start."""

    def _fit(self, dataset):
        self.mean_ = dataset.mean("x")
        return self

    def _transform_pandas(self, df):
        return df.assign(x=df["x"] + self.mean_)


def sum_of_shard():
    shard = train.get_dataset_shard("train")
    train.report({"sum": float(sum(b["x"].sum() for b in shard.iter_batches()))})


def test_a_pending_transform_runs_while_the_workers_hold_every_cpu(run_config):
    num_cpus = len(os.sched_getaffinity(0))
    callback = EveryRank()
    prep = AddMean().fit(ld.from_items([{"x": 1.0}, {"x": 3.0}]))
    data = prep.transform(ld.from_items([{"x": float(i)} for i in range(4 * num_cpus)]))
    TorchTrainer(
        sum_of_shard,
        datasets={"train": data},
        scaling_config=ScalingConfig(num_workers=num_cpus, resources_per_worker={"CPU": 1}),
        run_config=quiet(run_config, callback),
    ).fit()
    total = sum(m["sum"] for m in callback.steps[0])
    assert total == sum(range(4 * num_cpus)) + 2.0 * 4 * num_cpus


# the material's name; a class, as compute="actors" needs one
class preprocess_function:
    def __call__(self, batch):
        return {"x": batch["x"] * 2.0, "y": batch["y"]}


def test_read_parquet_and_map_batches_on_actors_then_materialize(tmp_path, run_config):
    import pyarrow as pa
    import pyarrow.parquet as pq

    for i in range(3):
        ids = range(i * 1000, (i + 1) * 1000)
        pq.write_table(
            pa.table({"x": [float(v) for v in ids], "y": list(ids)}), tmp_path / f"{i}.parquet"
        )
    dataset = ld.read_parquet(str(tmp_path))
    preprocessed = dataset.map_batches(
        preprocess_function, batch_size=1000, compute="actors", num_cpus=2, concurrency=4
    )
    cached_dataset = preprocessed.materialize()
    assert cached_dataset.count() == 3000
    assert cached_dataset.sum("x") == 2.0 * sum(range(3000))
    callback = EveryRank()
    TorchTrainer(
        sum_of_shard,
        datasets={"train": cached_dataset},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=quiet(run_config, callback),
    ).fit()
    assert sum(m["sum"] for m in callback.steps[0]) == 2.0 * sum(range(3000))


def report_context():
    from lockstep.data import DataContext

    ctx = DataContext.get_current()
    train.report(
        {"answer": ctx.get_config("answer"), "order": ctx.execution_options.preserve_order}
    )


def test_the_drivers_data_context_reaches_the_workers(run_config):
    from lockstep.data import DataContext

    ctx = DataContext.get_current()
    ctx.set_config("answer", 42)
    ctx.execution_options.preserve_order = True
    callback = EveryRank()
    try:
        TorchTrainer(
            report_context,
            datasets={"train": ld.range(4)},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=quiet(run_config, callback),
        ).fit()
    finally:
        ctx.remove_config("answer")
        ctx.execution_options.preserve_order = False
    assert callback.steps[0] == [{"answer": 42, "order": True}] * 2
