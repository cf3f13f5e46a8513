"""DatasetPipeline: repeat(), random_shuffle_each_window(), iter_epochs(), split()."""

import pytest

import lockstep.data as ld
from tests.helpers import epochs_as_torch


def test_repeat_iterates_every_epoch():
    pipe = ld.range(3).repeat(2)
    assert [int(i) for b in pipe.iter_batches(batch_size=2) for i in b["id"]] == [0, 1, 2] * 2
    assert [e.count() for e in pipe.iter_epochs()] == [3, 3]


def test_repeat_forever_stops_where_the_caller_stops():
    epochs = ld.range(2).repeat().iter_epochs()
    assert [next(epochs).count() for _ in range(5)] == [2] * 5
    rows = iter(ld.range(2).repeat().iter_rows())
    assert [next(rows)["id"] for _ in range(5)] == [0, 1, 0, 1, 0]
    rows.close()


def test_each_epoch_is_reshuffled():
    pipe = ld.range(50).repeat(3).random_shuffle_each_window(seed=7)
    orders = [[r["id"] for r in e.take_all()] for e in pipe.iter_epochs()]
    assert all(sorted(o) == list(range(50)) for o in orders)
    assert orders[0] != orders[1] != orders[2]
    again = [[r["id"] for r in e.take_all()] for e in pipe.iter_epochs()]
    assert again == orders  # a seed makes it reproducible


def test_split_pipelines_keep_their_rows_apart_every_epoch():
    pipe = ld.range(10).repeat(2).random_shuffle_each_window()
    parts = pipe.split(2, equal=True)
    for epoch_a, epoch_b in zip(parts[0].iter_epochs(), parts[1].iter_epochs(), strict=True):
        a = {r["id"] for r in epoch_a.take_all()}
        b = {r["id"] for r in epoch_b.take_all()}
        assert len(a) == len(b) == 5 and not a & b


def test_the_older_ray_train_example_runs():
    """The code of a Ray 1.x example: split_at_indices, repeat, iter_epochs, to_torch."""
    dataset = ld.from_items([{"x": i / 100, "y": 5 * i / 100 + 10} for i in range(100)])
    train_ds, valid_ds = dataset.random_shuffle().split_at_indices([80])
    train_pipe = train_ds.repeat().random_shuffle_each_window()
    shard = train_pipe.split(2, equal=True)[0]
    for torch_ds in epochs_as_torch(shard.iter_epochs(), count=3, batch_size=16):
        assert sum(len(y) for _, y in torch_ds) == 40
    assert valid_ds.repeat().schema().names == ["x", "y"]


def test_bad_repeat_count():
    with pytest.raises(ValueError, match="non-negative int"):
        ld.range(2).repeat(-1)
    assert "forever" in repr(ld.range(2).repeat())


def test_a_pipeline_pickles_as_its_description():
    import pickle

    pipe = ld.range(4).repeat(2).random_shuffle_each_window(seed=3)
    for _ in pipe.iter_batches():
        pass  # a pass leaves stats behind, which the copy does not take
    copy = pickle.loads(pickle.dumps(pipe))
    assert repr(copy) == repr(pipe)
    assert copy._last_stats is None
    expected = [[r["id"] for r in epoch.take_all()] for epoch in pipe.iter_epochs()]
    assert [[r["id"] for r in epoch.take_all()] for epoch in copy.iter_epochs()] == expected
