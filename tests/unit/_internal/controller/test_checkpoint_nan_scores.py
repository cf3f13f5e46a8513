"""A NaN score (a diverging loss) keeps its checkpoint and ranks it below every number,
whatever the order, as Ray ranks it."""

import math

import pytest

from lockstep._core.config import CheckpointConfig
from lockstep._core.run_state import RunState
from lockstep._core.storage import StorageDir
from lockstep._internal.controller.checkpoint_manager import CheckpointManager


@pytest.mark.parametrize("order", ["min", "max"])
def test_a_nan_score_ranks_last_and_is_evicted_first(tmp_path, order):
    run_dir = StorageDir.from_uri(tmp_path / "run")
    run_dir.makedirs()
    config = CheckpointConfig(
        num_to_keep=2, checkpoint_score_attribute="loss", checkpoint_score_order=order
    )
    manager = CheckpointManager.open(run_dir, config)
    for i, loss in enumerate([float("nan"), 3.0, 7.0, 5.0]):
        run_dir.makedirs(f".staging/s{i}/rank_00000")
        manager.commit(f".staging/s{i}", {"loss": loss}, training_iteration=i + 1)
    kept = [r.metrics["loss"] for r in manager.state.checkpoints]
    assert not any(math.isnan(score) for score in kept)
    assert kept == ([5.0, 3.0] if order == "min" else [5.0, 7.0])  # best last
    # the snapshot on disk reads back with the same order
    reread = RunState.from_json(run_dir.read_bytes("run_state.json"))
    assert [r.metrics["loss"] for r in reread.checkpoints] == kept


def test_a_nan_score_is_kept_while_nothing_is_evicted(tmp_path):
    run_dir = StorageDir.from_uri(tmp_path / "run")
    run_dir.makedirs()
    config = CheckpointConfig(checkpoint_score_attribute="loss", checkpoint_score_order="min")
    manager = CheckpointManager.open(run_dir, config)
    for i, loss in enumerate([2.0, float("nan"), 1.0]):
        run_dir.makedirs(f".staging/s{i}/rank_00000")
        manager.commit(f".staging/s{i}", {"loss": loss}, training_iteration=i + 1)
    kept = [r.metrics["loss"] for r in manager.state.checkpoints]
    assert math.isnan(kept[0]) and kept[1:] == [2.0, 1.0]  # worst first, best last
