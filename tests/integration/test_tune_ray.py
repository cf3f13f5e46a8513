"""Tune trials whose trainers run on a real Ray cluster: admitted by the cluster's CPUs,
and leaving no placement group or actor behind, stopped or finished."""

from __future__ import annotations

import pytest

from lockstep import train
from lockstep.train import DataParallelTrainer, ScalingConfig
from tests.helpers import fit_acc_trials_one_at_a_time_under_asha
from tests.integration.test_ray import live_placement_groups

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_connected")]


def steps(config):
    for _ in range(3):
        train.report({"acc": config["acc"], "node": train.get_context().node_ip})


def test_trainer_trials_on_ray_release_their_placement_groups(tmp_path):
    import ray

    from lockstep.tune._resources import machine_resources

    assert machine_resources()["CPU"] == ray.cluster_resources()["CPU"]
    trainer = DataParallelTrainer(
        steps,
        train_loop_config={"acc": 0.0},
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
    )
    results = fit_acc_trials_one_at_a_time_under_asha(trainer, [0.9, 0.1, 0.8], 3, tmp_path)
    # rungs at 1 and 2: 0.1 falls below 0.9 at the first, 0.8 below 0.9 at the second
    assert [r.metrics["training_iteration"] for r in results] == [3, 1, 2]
    assert results.num_errors == 0
    assert live_placement_groups() == []
