"""Exactly-once data across restarts: a run restarted from a checkpoint reported mid-epoch
trains on every row once per epoch, also when the number of workers changed."""

import collections
import json
import os
import tempfile

import pytest

import lockstep.data as ld
from lockstep import train
from lockstep.testing import Fault
from lockstep.train import Checkpoint, RunConfig, ScalingConfig
from lockstep.train.torch import TorchTrainer

NUM_ROWS = 48
EPOCHS = 3


def _restored_state():
    """(epoch, step) to continue from: the checkpoint's, as a user's loop keeps them."""
    checkpoint = train.get_checkpoint()
    if checkpoint is None:
        return 0, 0
    with checkpoint.as_directory() as d, open(os.path.join(d, "state.json")) as f:
        state = json.load(f)
    return state["epoch"], state["step"] + 1


def _trained(config, step, epoch, ids, pending):
    """Remember the rows of one step; every second step is checkpointed, and the rows of
    the steps it covers are written down once its report returned (it is committed)."""
    pending.extend((epoch, i) for i in ids)
    Fault(kind="exit", rank=config["fault_rank"], at_epoch=config["fault_step"]).fire_if_due(step)
    if step % 2 == 0:
        train.report({"step": step})
        return
    if config.get("rank0_saves") and train.get_context().get_world_rank() != 0:
        train.report({"step": step})  # rank 0's checkpoint covers this rank's step too
        _write_down(config, pending)
        return
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "state.json"), "w") as f:
            json.dump({"epoch": epoch, "step": step}, f)
        train.report({"step": step}, checkpoint=Checkpoint.from_directory(d))
    _write_down(config, pending)


def _write_down(config, pending):
    rank = train.get_context().get_world_rank()
    with open(os.path.join(config["log_dir"], f"rank{rank}.jsonl"), "a") as f:
        f.write(json.dumps(pending) + "\n")
    pending.clear()


def train_on_batches(config):
    start, step = _restored_state()
    shard = train.get_dataset_shard("train")
    pending = []
    batches = shard.iter_batches(batch_size=4, **config.get("iter_args", {}))
    for epoch in range(start, EPOCHS):
        for batch in batches:
            _trained(config, step, epoch, batch["id"].tolist(), pending)
            step += 1
    _write_down(config, pending)


def train_on_rows(config):
    start, step = _restored_state()
    shard = train.get_dataset_shard("train")
    pending = []
    for epoch in range(start, EPOCHS):
        ids = []
        for row in shard.iter_rows():
            ids.append(row["id"])
            if len(ids) == 3:
                _trained(config, step, epoch, ids, pending)
                ids, step = [], step + 1
    _write_down(config, pending)


def train_on_a_data_loader(config):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from lockstep.train.torch import prepare_data_loader

    start, step = _restored_state()
    data = TensorDataset(torch.arange(NUM_ROWS))
    loader = prepare_data_loader(DataLoader(data, batch_size=4, shuffle=True))
    pending = []
    for epoch in range(start, EPOCHS):
        if train.get_context().get_world_size() > 1:
            loader.sampler.set_epoch(epoch)  # as Ray's guide has it
        for (ids,) in loader:
            _trained(config, step, epoch, ids.tolist(), pending)
            step += 1
    _write_down(config, pending)


def rows_trained(log_dir):
    """Every (epoch, id) written down, by all ranks and attempts, with its count."""
    seen = collections.Counter()
    for name in os.listdir(log_dir):
        with open(os.path.join(log_dir, name)) as f:
            for line in f:
                seen.update(tuple(pair) for pair in json.loads(line))
    return seen


def assert_exactly_once(log_dir):
    seen = rows_trained(log_dir)
    expected = {(epoch, i) for epoch in range(EPOCHS) for i in range(NUM_ROWS)}
    assert set(seen) == expected, sorted(expected ^ set(seen))[:10]
    twice = {row: n for row, n in seen.items() if n > 1}
    assert not twice, sorted(twice)[:10]


def trainer(tmp_path, fn, num_workers, fault_step, *, max_failures=1, **config):
    log_dir = tmp_path / "trained"
    log_dir.mkdir(exist_ok=True)
    return TorchTrainer(
        fn,
        train_loop_config={
            "log_dir": str(log_dir),
            "fault_rank": num_workers - 1,
            "fault_step": fault_step,
            **config,
        },
        datasets={"train": ld.range(NUM_ROWS)},
        scaling_config=ScalingConfig(num_workers=num_workers),
        run_config=RunConfig(
            name="resume",
            storage_path=str(tmp_path / "runs"),
            failure_config=train.FailureConfig(max_failures=max_failures),
            verbose=0,
        ),
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "iter_args",
    [{}, {"local_shuffle_buffer_size": 8, "local_shuffle_seed": 3}],
    ids=["in order", "local shuffle"],
)
def test_a_failure_mid_epoch_gives_every_row_once_per_epoch(tmp_path, iter_args):
    # 24 rows a worker: 6 batches an epoch; the fault is in epoch 1, after a checkpoint
    result = trainer(tmp_path, train_on_batches, 2, fault_step=8, iter_args=iter_args).fit()
    assert result.error is None
    assert_exactly_once(tmp_path / "trained")


@pytest.mark.slow
def test_iter_rows_resumes_at_the_row(tmp_path):
    # 8 steps of 3 rows a worker and epoch; iter_rows reads whole blocks, counted row by row
    result = trainer(tmp_path, train_on_rows, 2, fault_step=11).fit()
    assert result.error is None
    assert_exactly_once(tmp_path / "trained")


@pytest.mark.slow
def test_a_data_loader_resumes_mid_epoch(tmp_path):
    # as Ray's guide has it: only rank 0 saves a checkpoint, every rank reports
    result = trainer(tmp_path, train_on_a_data_loader, 2, fault_step=8, rank0_saves=True).fit()
    assert result.error is None
    assert_exactly_once(tmp_path / "trained")


@pytest.mark.slow
@pytest.mark.parametrize("fn", [train_on_batches, train_on_a_data_loader], ids=["shard", "loader"])
@pytest.mark.parametrize(("before", "after"), [(2, 1), (1, 2)])
def test_restore_with_another_number_of_workers(tmp_path, fn, before, after):
    fault_step = {2: 8, 1: 15}[before]  # in epoch 1, two batches after its last checkpoint
    first = trainer(tmp_path, fn, before, fault_step, max_failures=0)
    with pytest.raises(train.TrainingFailedError):
        first.fit()
    restored = TorchTrainer.restore(
        str(tmp_path / "runs" / "resume"),
        datasets={"train": ld.range(NUM_ROWS)},
        scaling_config=ScalingConfig(num_workers=after),
    )
    assert restored.fit().error is None
    assert_exactly_once(tmp_path / "trained")
