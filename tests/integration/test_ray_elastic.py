"""An elastic run on a Ray cluster of two worker nodes, each on a host of its own: a node
dies and the run goes on with fewer workers; a node joins and the run grows again."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from lockstep.train import (
    CheckpointConfig,
    DataParallelTrainer,
    FailureConfig,
    ScalingConfig,
    UserCallback,
)
from tests.helpers import running_alongside

from .test_elastic import ROWS, train_until_resized

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_connected")]

# Each worker needs one slot, and only the worker nodes have slots: the head holds none.
SLOT = {"elastic_slot": 1}


class NodeEvents(UserCallback):
    """Tells the test, from the driver, the world size of every step."""

    def __init__(self):
        self.sizes: list[int] = []
        self.ended = False
        self.changed = threading.Condition()

    def __getstate__(self):
        return {}  # saved with the trainer's arguments: nothing of this run's to keep

    def __setstate__(self, state):
        self.__init__()

    def after_report(self, run_context, metrics, checkpoint):
        with self.changed:
            self.sizes.append(metrics[0]["world_size"])
            self.changed.notify_all()

    def end(self) -> None:
        with self.changed:
            self.ended = True
            self.changed.notify_all()

    def wait_for(self, size: int) -> None:
        with self.changed:
            self.changed.wait_for(lambda: size in self.sizes or self.ended)
            if size not in self.sizes:
                raise AssertionError(f"the run ended before it reported at world size {size}")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_lost_node_shrinks_the_run_and_a_new_one_grows_it(ray_cluster, run_config):
    import ray

    from lockstep import data

    nodes = [ray_cluster.add_node(host, num_cpus=1, resources=SLOT) for host in ("node3", "node4")]
    ray_cluster.wait_for_nodes(3)
    events = NodeEvents()

    def change_the_cluster():
        events.wait_for(2)
        ray_cluster.kill_node(nodes.pop())  # a machine dies
        events.wait_for(1)
        nodes.append(ray_cluster.add_node("node4", num_cpus=1, resources=SLOT))  # one joins

    try:
        with running_alongside(change_the_cluster, stop=events.end):
            result = DataParallelTrainer(
                train_until_resized,
                train_loop_config={"max_epochs": 3000, "sleep_s": 0.1},
                scaling_config=ScalingConfig(
                    num_workers=(1, 2),
                    resources_per_worker={"CPU": 1, **SLOT},
                    elastic_resize_monitor_interval_s=1.0,
                    executor="ray",
                ),
                datasets={"train": data.range(ROWS)},
                run_config=dataclasses.replace(
                    run_config,
                    callbacks=[events],
                    checkpoint_config=CheckpointConfig(num_to_keep=2),
                    # the node lost is a failure, as in Ray; growing is not
                    failure_config=FailureConfig(max_failures=1),
                ),
            ).fit()
    finally:
        for host in nodes:
            ray_cluster.kill_node(host)
        ray_cluster.wait_for_nodes_dead(1)
    assert result.metrics["sizes"] == [2, 1, 2]
    epochs = result.metrics_dataframe["epoch"].tolist()
    assert epochs == list(range(len(epochs)))  # every restart resumed from the last checkpoint
    assert ray.is_initialized()


def test_a_min_the_cluster_cannot_hold_now_is_a_warning_that_the_run_waits():
    with pytest.warns(UserWarning, match=r"cannot hold 9 workers.*the run waits until they fit"):
        DataParallelTrainer(
            train_until_resized,
            scaling_config=ScalingConfig(num_workers=(9, 12), executor="ray"),
        )
