"""Two Ray nodes on one machine: placement across nodes, DDP across them, and a node dying."""

from __future__ import annotations

import dataclasses
import os
import threading
import time

import pytest

from lockstep import train
from lockstep.testing import train_epochs
from lockstep.train import FailureConfig, ScalingConfig
from lockstep.train.torch import TorchTrainer, prepare_model
from tests.helpers import EveryRank, latest_checkpoint, running_alongside

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_connected")]


def where_am_i():
    import ray

    ctx = train.get_context()
    train.report(
        {
            "node": ray.get_runtime_context().get_node_id(),
            "node_rank": ctx.get_node_rank(),
            "local_rank": ctx.get_local_rank(),
            "local_world_size": ctx.get_local_world_size(),
        }
    )


def config_with(run_config, callback, **kwargs):
    return dataclasses.replace(run_config, callbacks=[callback], **kwargs)


def where_spread_workers_are(num_workers, run_config):
    """Each rank's node and ranks, with ``num_workers`` workers spread over the nodes."""
    ranks = EveryRank()
    TorchTrainer(
        where_am_i,
        scaling_config=ScalingConfig(
            num_workers=num_workers, placement_strategy="SPREAD", executor="ray"
        ),
        run_config=config_with(run_config, ranks),
    ).fit()
    return ranks.steps[0]


def test_spread_puts_one_worker_on_each_node(second_node, run_config):
    step = where_spread_workers_are(2, run_config)
    assert len({m["node"] for m in step}) == 2
    assert [m["node_rank"] for m in step] == [0, 1]
    assert [m["local_rank"] for m in step] == [0, 0]
    assert [m["local_world_size"] for m in step] == [1, 1]


def test_ranks_on_a_node_are_contiguous(second_node, run_config):
    step = where_spread_workers_are(4, run_config)
    nodes = [m["node"] for m in step]
    assert len(set(nodes)) == 2
    # one block of ranks per node, numbered in order, local ranks counting from 0
    assert [m["node_rank"] for m in step] == sorted(m["node_rank"] for m in step)
    for node in set(nodes):
        on_node = [m for m in step if m["node"] == node]
        assert [m["local_rank"] for m in on_node] == list(range(len(on_node)))
        assert {m["local_world_size"] for m in on_node} == {len(on_node)}


def ddp_across_nodes(config):
    import torch

    torch.manual_seed(train.get_context().get_world_rank())  # different data per rank
    model = prepare_model(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(64, 4)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    losses = []
    for _ in range(config["steps"]):
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    weights = model.module.weight.detach().flatten().tolist()
    train.report({"first": losses[0], "last": losses[-1], "weights": weights})


def test_ddp_trains_across_two_nodes(second_node, run_config):
    ranks = EveryRank()
    TorchTrainer(
        ddp_across_nodes,
        train_loop_config={"steps": 30},
        scaling_config=ScalingConfig(
            num_workers=2, placement_strategy="STRICT_SPREAD", executor="ray"
        ),
        run_config=config_with(run_config, ranks),
    ).fit()
    rank0, rank1 = ranks.steps[0]
    assert rank0["weights"] == rank1["weights"]  # DDP kept the two nodes in step
    assert rank0["last"] < rank0["first"] / 4


def test_a_node_dying_mid_run_is_survived_from_the_last_checkpoint(
    ray_cluster, second_node, run_config
):
    run_dir = os.path.join(run_config.storage_path, run_config.name)
    killed = threading.Event()

    def kill_when_checkpointed():
        deadline = time.monotonic() + 120
        while latest_checkpoint(run_dir) != "checkpoint_000001" and time.monotonic() < deadline:
            time.sleep(0.05)
        ray_cluster.kill_node(second_node)
        killed.set()

    with running_alongside(kill_when_checkpointed):
        result = TorchTrainer(
            # long enough for Ray to notice: a worker outlives its raylet by about 3 s
            train_epochs,
            train_loop_config={"epochs": 12, "sleep_s": 0.5},
            scaling_config=ScalingConfig(
                num_workers=2, placement_strategy="SPREAD", executor="ray"
            ),
            run_config=dataclasses.replace(
                run_config, failure_config=FailureConfig(max_failures=1)
            ),
        ).fit()
    assert killed.is_set()
    epochs = result.metrics_dataframe["epoch"].tolist()
    assert epochs[-1] == 11 and epochs.count(0) == 1  # never restarted from scratch
    assert result.return_value < 12  # the second attempt resumed from a checkpoint
