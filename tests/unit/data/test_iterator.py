"""DataIterator: what a worker gets from get_dataset_shard; every call is a new epoch."""

import pickle

import cloudpickle

import lockstep.data as ld
from tests.helpers import epochs_as_torch


def test_every_iteration_is_a_new_epoch_over_the_same_rows():
    it = ld.range(6).iterator()
    epochs = [[int(i) for b in it.iter_batches(batch_size=4) for i in b["id"]] for _ in range(3)]
    assert epochs == [list(range(6))] * 3
    assert [r["id"] for r in it.iter_rows()] == list(range(6))


def test_count_schema_materialize():
    it = ld.range(5).map(lambda r: {"x": r["id"] * 2}).iterator()
    assert it.count() == 5
    assert it.schema().names == ["x"]
    assert it.materialize().take(2) == [{"x": 0}, {"x": 2}]


def test_the_iterator_of_a_split_part_pickles_as_its_description():
    parts = ld.range(100).map(lambda r: {"y": r["id"] + 1}).streaming_split(2, equal=True)
    copy = pickle.loads(cloudpickle.dumps(parts[1]))
    assert [r["y"] for r in copy.iter_rows()] == list(range(51, 101))


def test_iter_epochs_and_to_torch_like_the_older_api():
    import torch

    it = ld.from_items([{"x": float(i), "y": 2.0 * i} for i in range(4)]).iterator()
    for torch_ds in epochs_as_torch(it.iter_epochs(), count=2, batch_size=2):
        labels = torch.cat([y for _, y in torch_ds])
        assert labels.squeeze(1).tolist() == [0.0, 2.0, 4.0, 6.0]
    assert len(list(it.iter_epochs(max_epoch=3))) == 3
    features, _ = next(iter(it.to_torch(label_column="y", batch_size=4)))
    assert features.shape == (4, 1)


def test_stats_report_the_latest_pass():
    it = ld.range(10).iterator()
    assert "No pass" in it.stats()
    for _ in it.iter_batches(batch_size=3):
        pass
    assert "* Last pass: 10 rows in 4 batches" in it.stats()
    assert it.stats().startswith("Dataset iterator time breakdown:\n* Total time overall: ")
    assert repr(it).startswith("DataIterator(Dataset(")
