"""Datasets through real 2-worker runs: each worker reads only its own part, every epoch."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from fsspec.implementations.local import LocalFileSystem

import lockstep.data as ld
from lockstep import train
from lockstep.data.preprocessors import StandardScaler
from lockstep.train import (
    DataConfig,
    DataParallelTrainer,
    ScalingConfig,
    TrainingFailedError,
)
from tests.helpers import EveryRank

NUM_FILES, ROWS_PER_FILE = 4, 50


def run(train_func, run_config, callback, **kwargs):
    config = dataclasses.replace(run_config, callbacks=[callback])
    trainer = DataParallelTrainer(
        train_func, scaling_config=ScalingConfig(num_workers=2), run_config=config, **kwargs
    )
    return trainer.fit()


@pytest.fixture
def parquet_dir(tmp_path):
    directory = tmp_path / "data"
    directory.mkdir()
    for i in range(NUM_FILES):
        ids = np.arange(i * ROWS_PER_FILE, (i + 1) * ROWS_PER_FILE)
        pq.write_table(pa.table({"id": ids, "x": ids * 2.0}), directory / f"{i}.parquet")
    return directory


def through_fsspec(directory):
    """The files read with Python's open(), so that a worker can see which it opens."""
    return ld.read_parquet(
        str(directory), filesystem=pafs.PyFileSystem(pafs.FSSpecHandler(LocalFileSystem()))
    )


def test_each_worker_reads_only_its_own_files_and_every_epoch_again(parquet_dir, run_config):
    def train_func():
        import sys

        opened = set()

        def record(event, args):
            if event == "open" and str(args[0]).endswith(".parquet"):
                opened.add(str(args[0]).rsplit("/", 1)[-1])

        sys.addaudithook(record)  # this worker process ends with the run
        shard = train.get_dataset_shard("train")
        for epoch in range(2):
            ids = [int(i) for b in shard.iter_torch_batches(batch_size=16) for i in b["id"]]
            train.report({"epoch": epoch, "ids": ids, "files": sorted(opened)})

    callback = EveryRank()
    run(train_func, run_config, callback, datasets={"train": through_fsspec(parquet_dir)})
    assert len(callback.steps) == 2
    for step in callback.steps:
        ids = [rank["ids"] for rank in step]
        assert len(ids[0]) == len(ids[1]) == NUM_FILES * ROWS_PER_FILE // 2
        assert sorted(ids[0] + ids[1]) == list(range(NUM_FILES * ROWS_PER_FILE))
        files = [set(rank["files"]) for rank in step]
        assert files == [{"0.parquet", "1.parquet"}, {"2.parquet", "3.parquet"}]
    assert callback.steps[0][0]["ids"] == callback.steps[1][0]["ids"]  # the epoch re-iterates


def test_datasets_left_out_of_the_split_go_whole_to_every_worker(parquet_dir, run_config):
    def train_func():
        train_rows = train.get_dataset_shard("train").count()
        valid_rows = sum(len(b["id"]) for b in train.get_dataset_shard("valid").iter_batches())
        train.report({"train": train_rows, "valid": valid_rows})

    callback = EveryRank()
    datasets = {"train": ld.read_parquet(str(parquet_dir)), "valid": ld.range(30)}
    run(
        train_func,
        run_config,
        callback,
        datasets=datasets,
        dataset_config=DataConfig(datasets_to_split=["train"]),
    )
    assert [(r["train"], r["valid"]) for r in callback.steps[0]] == [(100, 30), (100, 30)]


def test_an_unknown_dataset_name_lists_the_names_given(run_config):
    def train_func():
        train.get_dataset_shard("test")

    with pytest.raises(TrainingFailedError, match=r"'test'.*\['train', 'valid'\]"):
        run(
            train_func,
            run_config,
            EveryRank(),
            datasets={"train": ld.range(4), "valid": ld.range(4)},
        )


def test_a_fitted_preprocessor_is_applied_in_the_workers(parquet_dir, run_config):
    def train_func():
        values = [float(v) for b in train.get_dataset_shard("train").iter_batches() for v in b["x"]]
        train.report({"sum": sum(values), "count": len(values)})

    ds = ld.read_parquet(str(parquet_dir))
    scaled = StandardScaler(["x"]).fit(ds).transform(ds)
    callback = EveryRank()
    run(train_func, run_config, callback, datasets={"train": scaled})
    ranks = callback.steps[0]
    assert [r["count"] for r in ranks] == [100, 100]
    assert sum(r["sum"] for r in ranks) == pytest.approx(0.0, abs=1e-9)  # standardized


def test_the_older_pipeline_api_in_workers(run_config):
    def train_func():
        epochs = train.get_dataset_shard("train").iter_epochs()
        import torch

        for epoch in range(3):
            torch_ds = next(epochs).to_torch(
                label_column="y",
                feature_columns=["x"],
                label_column_dtype=torch.float,
                feature_column_dtypes=torch.float,
                batch_size=8,
            )
            xs = [round(float(v), 6) for features, _ in torch_ds for v in features[:, 0]]
            train.report({"epoch": epoch, "xs": xs})

    items = [{"x": i / 40, "y": 2 * i / 40} for i in range(40)]
    pipeline = ld.from_items(items).repeat().random_shuffle_each_window(seed=0)
    callback = EveryRank()
    run(train_func, run_config, callback, datasets={"train": pipeline})
    orders = []
    for step in callback.steps:
        a, b = step[0]["xs"], step[1]["xs"]
        assert len(a) == len(b) == 20 and not set(a) & set(b)
        orders.append(a)
    assert sorted(orders[0]) == sorted(orders[1]) and orders[0] != orders[1]  # reshuffled
