"""A Ray node drained under a run (a spot reclaim, a scale-down): its workers are told
through get_preemption_info(), report one more checkpoint, and the run restarts from it on
the nodes that stay, counted against max_preemption_failures and not max_failures."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path

import pytest

from lockstep import train
from lockstep.train import (
    Checkpoint,
    DataParallelTrainer,
    FailureConfig,
    Result,
    ScalingConfig,
    UserCallback,
)

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_connected")]

# A drain is seen at the group's next poll of Ray's GCS (once a second), however loaded
# the machine: the first attempt steps until it is told, the restart a few steps more.
STEPS_UNTIL_TOLD = 600  # a drain not seen in a minute fails the test
STEPS_AFTER = 3


def steps_with_a_checkpoint_on_preemption(config):
    import ray

    start, last = 0, STEPS_UNTIL_TOLD
    if checkpoint := train.get_checkpoint():
        with checkpoint.as_directory() as d, open(os.path.join(d, "step")) as f:
            start = int(f.read()) + 1
        last = start + STEPS_AFTER
    told = False
    for step in range(start, last):
        time.sleep(0.1)  # the pace of a real step: the drain is seen mid-run
        info = train.get_preemption_info()
        metrics = {"step": step, "node": ray.get_runtime_context().get_node_id()}
        if info is not None and not told:
            told = True
            metrics["told"] = json.dumps([info.reason, info.preempted_node_to_ranks])
            with tempfile.TemporaryDirectory() as d:
                with open(os.path.join(d, "step"), "w") as f:
                    f.write(str(step))
                train.report(metrics, checkpoint=Checkpoint.from_directory(d))
        else:
            train.report(metrics)


class DrainSecondNode(UserCallback):
    """In the driver, at the second step: ask Ray's GCS to drain the node rank 1 runs on,
    for preemption, with a deadline, as a cloud's spot reclaim does."""

    def __init__(self) -> None:
        self.drained: list[str] = []
        self.steps: list[list[dict]] = []

    def __reduce__(self):  # pickled for restore; the test keeps its own copy
        return (DrainSecondNode, ())

    def after_report(self, run_context, metrics, checkpoint):
        import ray
        from ray.core.generated import autoscaler_pb2

        self.steps.append(metrics)
        if metrics[0]["step"] != 1 or self.drained:
            return
        node = metrics[1]["node"]
        gcs = ray._private.worker.global_worker.gcs_client
        accepted, why = gcs.drain_node(
            node,
            autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION"),
            "spot reclaim",
            int(time.time() * 1000) + 60_000,
        )
        assert accepted, why
        self.drained.append(node)


def test_a_drained_node_checkpoints_and_restarts_counted_apart(second_node, run_config):
    drain = DrainSecondNode()
    result = DataParallelTrainer(
        steps_with_a_checkpoint_on_preemption,
        scaling_config=ScalingConfig(num_workers=2, placement_strategy="SPREAD", executor="ray"),
        run_config=dataclasses.replace(
            run_config,
            callbacks=[drain],
            failure_config=FailureConfig(max_failures=0),  # a preemption is not a failure
        ),
    ).fit()
    told = [step for step in drain.steps if "told" in step[0]]
    assert len(told) == 1  # every rank at the same step, once
    last = told[0][0]["step"] + STEPS_AFTER
    assert result.metrics["step"] == last
    reasons = {json.loads(m["told"])[0] for m in told[0]}
    assert reasons == {"node drained"}
    assert json.loads(told[0][0]["told"])[1] == {drain.drained[0]: [1]}
    # the restart resumed right after the checkpoint reported on being told, off the node
    after = drain.steps[drain.steps.index(told[0]) + 1 :]
    assert after[0][0]["step"] == told[0][0]["step"] + 1
    assert all(m["node"] != drain.drained[0] for step in after for m in step)
    state = json.loads((Path(result.path) / "run_state.json").read_text())
    assert (state["num_failures"], state["num_preemptions"]) == (0, 1)
    assert Result.from_path(result.path).metrics["step"] == last
