"""Ported from Ray's python/ray/train/v2/tests/test_result.py (imports changed to lockstep,
Ray's cluster fixture dropped, every assertion kept).

Left out: the ``pass_storage_filesystem`` cases (Ray's internal ``StorageContext``) and
``test_result_from_path_validation``'s second half, which names Ray's own snapshot file
(``checkpoint_manager_snapshot.json``; lockstep's is ``run_state.json``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lockstep import train
from lockstep.train import (
    Checkpoint,
    CheckpointConfig,
    Result,
    RunConfig,
    ScalingConfig,
    WorkerGroupError,
)
from lockstep.train.torch import TorchTrainer
from tests.integration.ray_train.helpers import dict_checkpoint, load_dict


def failing_after_checkpoints(name: str, storage_path: str, iterations: int, keep: int):
    """Ray's build_dummy_trainer: reports ``iterations`` checkpoints (rank 0 attaches each,
    metric_a rising, metric_b falling, noise in between), then raises."""

    def loop(config):
        for i in range(iterations):
            train.report({"metric_a": -100, "metric_b": -100})
            if train.get_context().get_world_rank() == 0:
                with dict_checkpoint({"iter": i}) as checkpoint:
                    train.report({"metric_a": i, "metric_b": -i}, checkpoint=checkpoint)
            else:
                train.report({"metric_a": i, "metric_b": -i})
        raise RuntimeError()

    return TorchTrainer(
        train_loop_per_worker=loop,
        train_loop_config={"a": 1, "b": 2},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            name=name,
            storage_path=storage_path,
            verbose=0,
            checkpoint_config=CheckpointConfig(
                num_to_keep=keep,
                checkpoint_score_attribute="metric_a",
                checkpoint_score_order="max",
            ),
        ),
    )


def test_result_repr():
    res = Result(
        metrics={"iter": 0, "metric": 1.0},
        checkpoint=Checkpoint("/bucket/path/ckpt0"),
        error=None,
        path="/bucket/path",
    )
    assert isinstance(repr(res), str)
    assert "Checkpoint(filesystem=local, path=/bucket/path/ckpt0)" in repr(res)
    assert "metrics={'iter': 0, 'metric': 1.0}" in repr(res)


def test_get_best_checkpoint():
    res = Result(
        metrics={},
        checkpoint=None,
        error=None,
        path="/bucket/path",
        best_checkpoints=[
            (Checkpoint(f"/bucket/path/ckpt{i}"), {"iter": i, "metric": float(i + 1)})
            for i in range(4)
        ],
    )
    assert res.get_best_checkpoint(metric="metric", mode="max").path == "/bucket/path/ckpt3"
    assert res.get_best_checkpoint(metric="metric", mode="min").path == "/bucket/path/ckpt0"


@pytest.mark.slow
@pytest.mark.parametrize("trailing_slash", [False, True])
@pytest.mark.parametrize(
    ("storage", "path_type"), [("local", "str"), ("local", "PathLike"), ("remote", "str")]
)
def test_result_restore(request, tmp_path, storage, path_type, trailing_slash):
    if storage == "local":
        storage_path = str(tmp_path)
    else:
        request.getfixturevalue("s3_endpoint")
        storage_path = "s3://lockstep-runs/ray-tests"
    iterations, keep = 5, 3
    with pytest.raises(WorkerGroupError):
        failing_after_checkpoints("test_result_restore_v2", storage_path, iterations, keep).fit()
    trial_dir = f"{storage_path}/test_result_restore_v2" + ("/" if trailing_slash else "")
    result = Result.from_path(Path(trial_dir) if path_type == "PathLike" else trial_dir)

    assert result.checkpoint
    assert len(result.best_checkpoints) == keep
    best_a = result.get_best_checkpoint(metric="metric_a", mode="max")
    assert load_dict(best_a)["iter"] == iterations - 1
    best_b = result.get_best_checkpoint(metric="metric_b", mode="max")
    assert load_dict(best_b)["iter"] == iterations - keep
    with pytest.raises(RuntimeError, match=r"Invalid metric name.*"):
        result.get_best_checkpoint(metric="invalid_metric", mode="max")


@pytest.mark.parametrize("path_type", ["str", "PathLike"])
def test_result_from_path_validation(tmp_path, path_type):
    missing = str(tmp_path / "nonexistent_experiment")
    with pytest.raises(RuntimeError, match=r"Experiment folder .* doesn't exist!"):
        Result.from_path(Path(missing) if path_type == "PathLike" else missing)
