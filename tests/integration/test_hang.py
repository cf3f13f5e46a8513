"""A run that hangs is named, not waited on forever: the stuck rank and where, every rank's
stack in errors/attempt_N.txt, then a restart or the error (FailureConfig).

hang_timeout_s is short here: the hang is the thing being tested.
"""

from __future__ import annotations

import importlib
import os
import tempfile
import threading

import pytest

from lockstep import train
from lockstep.train import (
    DataParallelTrainer,
    FailureConfig,
    RunConfig,
    ScalingConfig,
    TrainingFailedError,
)
from tests.helpers import hang_of

TWO = ScalingConfig(num_workers=2)
HERE = os.path.basename(__file__)


def run_config(tmp_path, *, hang_timeout_s=1.0, max_failures=0, name="hung"):
    return RunConfig(
        name=name,
        storage_path=str(tmp_path),
        verbose=0,
        failure_config=FailureConfig(hang_timeout_s=hang_timeout_s, max_failures=max_failures),
    )


def stuck_here():
    threading.Event().wait()  # forever: only the driver can end this


def line_of(function, text):
    """The line number of ``text`` in ``function``'s source, for the expected message."""
    import inspect

    lines, first = inspect.getsourcelines(function)
    return first + next(i for i, line in enumerate(lines) if text in line)


def rank1_hangs_at_step_2(config):
    for step in range(4):
        if step == 2 and train.get_context().get_world_rank() == 1:
            marker = config.get("marker")
            if marker is None or not os.path.exists(marker):
                if marker is not None:
                    open(marker, "w").close()
                stuck_here()
        train.report({"step": step})
    return train.get_context().get_world_rank()


def test_a_hung_rank_is_named_with_where_it_is_stuck(tmp_path):
    trainer = DataParallelTrainer(
        rank1_hangs_at_step_2, scaling_config=TWO, run_config=run_config(tmp_path)
    )
    with pytest.raises(TrainingFailedError) as raised:
        trainer.fit()
    error = raised.value
    failure = error.root_cause
    assert (failure.rank, failure.kind) == (1, "hang")
    where = f"stuck_here() at {HERE}:{line_of(stuck_here, 'Event().wait()')}"
    assert str(error).startswith(
        f"Training failed: rank 1 (pid {failure.pid}) made no progress for "
    )
    assert f" s, in {where}; rank 0 waiting in report() for step 3\n" in str(error)
    # the user's stack in the message, outermost first
    assert f"line {line_of(rank1_hangs_at_step_2, 'stuck_here()')}, in rank1_hangs_at_step_2" in (
        str(error)
    )
    stacks = (tmp_path / "hung" / "errors" / "attempt_0.txt").read_text()
    assert stacks.startswith(f"rank 1 (pid {failure.pid}) made no progress for ")
    rank0, rank1 = stacks.split("=== rank 0 ")[1].split("=== rank 1 ")
    assert "2 reports" in rank1 and "in stuck_here" in rank1
    assert "3 reports" in rank0 and "in _exchange" in rank0  # report()'s wait


def test_a_hang_is_a_worker_failure_that_restarts(tmp_path):
    trainer = DataParallelTrainer(
        rank1_hangs_at_step_2,
        train_loop_config={"marker": str(tmp_path / "hung-once")},
        scaling_config=TWO,
        run_config=run_config(tmp_path, max_failures=1),
    )
    result = trainer.fit()
    assert result.metrics == {"step": 3}
    assert result.return_value == 0
    assert (tmp_path / "hung" / "errors" / "attempt_0.txt").exists()
    assert not (tmp_path / "hung" / "errors" / "attempt_1.txt").exists()


def long_step_with_heartbeats(config):
    # each step takes longer than hang_timeout_s; the heartbeats say it is alive
    for step in range(2):
        for _ in range(config["beats"]):
            train.heartbeat()
            threading.Event().wait(0.1)  # the work of one batch
        train.report({"step": step})


def test_heartbeats_keep_a_long_step_alive(tmp_path):
    trainer = DataParallelTrainer(
        long_step_with_heartbeats,
        train_loop_config={"beats": 25},  # 2.5 s a step
        scaling_config=TWO,
        run_config=run_config(tmp_path, hang_timeout_s=1.5),
    )
    assert trainer.fit().metrics == {"step": 1}
    assert not (tmp_path / "hung" / "errors").exists()


def torch_rank0_skips_an_all_reduce():
    """Rank 1 blocks in gloo's all_reduce (C++), which rank 0 never joins: rank 0 waits in
    report(). Every rank waits; rank 1 reached fewer steps."""
    import torch
    import torch.distributed as dist

    rank = train.get_context().get_world_rank()
    train.report({"step": 0})
    if rank == 1:
        dist.all_reduce(torch.ones(1))
    train.report({"step": 1})


def test_a_rank_blocked_in_a_gloo_collective_answers_with_its_stack(tmp_path):
    from lockstep.train.torch import TorchTrainer

    trainer = TorchTrainer(
        torch_rank0_skips_an_all_reduce, scaling_config=TWO, run_config=run_config(tmp_path)
    )
    failure = hang_of(trainer)
    line = line_of(torch_rank0_skips_an_all_reduce, "dist.all_reduce")
    assert f"in torch_rank0_skips_an_all_reduce() at {HERE}:{line}; " in failure.summary
    assert failure.summary.endswith("; rank 0 waiting in report() for step 2")
    stacks = (tmp_path / "hung" / "errors" / "attempt_0.txt").read_text()
    assert "torch/distributed/distributed_c10d.py" in stacks.split("=== rank 1 ")[1]


def xgboost_rank1_hangs(config):
    import xgboost

    class Hang(xgboost.callback.TrainingCallback):
        def after_iteration(self, model, epoch, evals_log):
            if epoch == 2 and train.get_context().get_world_rank() == 1:
                stuck_here()
            return False

    frame = train.get_dataset_shard("train").materialize().to_pandas()
    data = xgboost.DMatrix(frame.drop(columns=["target"]), label=frame["target"])
    xgboost.train({"max_depth": 3}, data, num_boost_round=6, callbacks=[Hang()])


def stuck_for_a_while():
    threading.Event().wait(3.0)  # a thread cannot be killed: this one ends by itself


def inline_hangs():
    train.report({"step": 0})
    stuck_for_a_while()
    train.report({"step": 1})


def test_an_inline_run_that_hangs_is_named_too(tmp_path):
    trainer = DataParallelTrainer(
        inline_hangs,
        scaling_config=ScalingConfig(num_workers=0),
        run_config=run_config(tmp_path),
    )
    with pytest.raises(TrainingFailedError) as raised:
        trainer.fit()
    failure = raised.value.root_cause
    assert (failure.rank, failure.pid, failure.kind) == (0, os.getpid(), "hang")
    assert f", in stuck_for_a_while() at {HERE}:" in failure.summary


def slow_checkpoint_upload(config):
    from lockstep.train import Checkpoint

    def upload(checkpoint, dir_name):
        threading.Event().wait(2.5)  # a big checkpoint on its way to storage
        return checkpoint

    with tempfile.TemporaryDirectory() as d:
        train.report(
            {"step": 0},
            checkpoint=Checkpoint.from_directory(d),
            checkpoint_upload_mode=train.CheckpointUploadMode.NO_UPLOAD,
            checkpoint_upload_fn=upload,
        )


def test_writing_a_checkpoint_longer_than_the_timeout_is_no_hang(tmp_path):
    trainer = DataParallelTrainer(
        slow_checkpoint_upload,
        scaling_config=TWO,
        run_config=run_config(tmp_path, hang_timeout_s=1.5),
    )
    assert trainer.fit().metrics == {"step": 0}


def lightgbm_rank1_hangs():
    import lightgbm

    from lockstep.train.lightgbm import get_network_params

    def hang(env):
        if env.iteration == 2 and train.get_context().get_world_rank() == 1:
            stuck_here()

    frame = train.get_dataset_shard("train").materialize().to_pandas()
    data = lightgbm.Dataset(frame.drop(columns=["target"]), label=frame["target"])
    params = {"objective": "binary", "verbose": -1, "tree_learner": "data", "pre_partition": True}
    lightgbm.train({**params, **get_network_params()}, data, num_boost_round=6, callbacks=[hang])


@pytest.mark.parametrize(
    "trainer_path, train_func",
    [
        ("lockstep.train.xgboost.XGBoostTrainer", xgboost_rank1_hangs),  # its all-reduce
        ("lockstep.train.lightgbm.LightGBMTrainer", lightgbm_rank1_hangs),  # its network
    ],
    ids=["xgboost", "lightgbm"],
)
def test_a_gbdt_rank_blocked_in_its_collective_is_told_apart(tmp_path, trainer_path, train_func):
    from tests.integration.gbdt_data import datasets

    module, name = trainer_path.rsplit(".", 1)
    trainer_cls = getattr(importlib.import_module(module), name)
    trainer = trainer_cls(
        train_func,
        datasets={"train": datasets()["train"]},
        scaling_config=TWO,
        run_config=run_config(tmp_path, hang_timeout_s=2.0),
    )
    failure = hang_of(trainer)
    assert f", in stuck_here() at {HERE}:" in failure.summary
    assert failure.summary.endswith("; rank 0 waiting in a collective")


def rank1_hangs_deaf():
    import signal

    train.report({"step": 0})
    if train.get_context().get_world_rank() == 1:
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # faulthandler's handler is gone
        stuck_here()
    train.report({"step": 1})


def test_a_rank_that_does_not_answer_the_signal_is_read_with_py_spy(tmp_path):
    trainer = DataParallelTrainer(
        rank1_hangs_deaf, scaling_config=TWO, run_config=run_config(tmp_path)
    )
    failure = hang_of(trainer)
    assert f", in stuck_here() at {HERE}:{line_of(stuck_here, 'Event().wait()')}; " in (
        failure.summary
    )
    assert failure.summary.endswith("; rank 0 waiting in report() for step 2")
