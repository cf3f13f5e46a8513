import json
import os
import subprocess
import sys

import pytest

from lockstep._core.checkpoint import Checkpoint
from lockstep._core.config import CheckpointConfig
from lockstep._core.run_state import RunState
from lockstep._core.storage import StorageDir
from lockstep._internal.controller.checkpoint_manager import CheckpointManager


@pytest.fixture
def run_dir(tmp_path):
    d = StorageDir.from_uri(tmp_path / "run")
    d.makedirs()
    return d


def stage(run_dir, name):
    run_dir.makedirs(name)
    with open(run_dir.join(name, "w.txt"), "w") as f:
        f.write(name)
    return name


def commit(manager, run_dir, i, **metrics):
    stage(run_dir, f".staging/s{i}/rank_00000")
    return manager.commit(f".staging/s{i}", metrics, training_iteration=i + 1)


def on_disk(run_dir):
    return sorted(n for n in run_dir.listdir() if n.startswith("checkpoint_"))


def test_keeps_everything_without_num_to_keep(run_dir):
    manager = CheckpointManager.open(run_dir, CheckpointConfig())
    for i in range(4):
        commit(manager, run_dir, i, loss=i)
    assert on_disk(run_dir) == [f"checkpoint_00000{i}" for i in range(4)]
    assert run_dir.read_text("checkpoint_000002/w.txt") == ".staging/s2/rank_00000"


def test_without_score_keeps_the_newest(run_dir):
    manager = CheckpointManager.open(run_dir, CheckpointConfig(num_to_keep=2))
    for i in range(5):
        commit(manager, run_dir, i)
    assert on_disk(run_dir) == ["checkpoint_000003", "checkpoint_000004"]


@pytest.mark.parametrize(
    ("order", "scores", "expected"),
    [
        ("max", [1, 5, 3, 2], ["checkpoint_000001", "checkpoint_000002", "checkpoint_000003"]),
        ("min", [1, 5, 3, 2], ["checkpoint_000000", "checkpoint_000003"]),
    ],
)
def test_keeps_best_by_score_plus_latest(run_dir, order, scores, expected):
    config = CheckpointConfig(
        num_to_keep=2, checkpoint_score_attribute="acc", checkpoint_score_order=order
    )
    manager = CheckpointManager.open(run_dir, config)
    for i, score in enumerate(scores):
        commit(manager, run_dir, i, acc=score)
    assert on_disk(run_dir) == expected
    assert manager.state.latest == "checkpoint_000003"
    ordered = [r.metrics["acc"] for r in manager.state.checkpoints]
    assert ordered == sorted(ordered, reverse=order == "min")  # best last


def test_snapshot_is_written_before_eviction(run_dir, monkeypatch):
    manager = CheckpointManager.open(run_dir, CheckpointConfig(num_to_keep=1))
    commit(manager, run_dir, 0)

    def crash(rel):
        raise RuntimeError("crash while deleting")

    monkeypatch.setattr(run_dir, "remove", crash)
    # the commit is done once the snapshot is saved: a deletion that fails after it
    # leaves a directory for the next open() to sweep, and fails nothing
    commit(manager, run_dir, 1)
    snapshot = RunState.from_json(run_dir.read_bytes("run_state.json"))
    assert [c.dir_name for c in snapshot.checkpoints] == ["checkpoint_000001"]
    assert snapshot.latest == "checkpoint_000001"
    assert run_dir.exists("checkpoint_000000")  # evicted, not deleted: swept later


def test_reopen_continues_and_cleans_uncommitted(run_dir):
    manager = CheckpointManager.open(run_dir, CheckpointConfig())
    commit(manager, run_dir, 0, loss=1.0)
    # a crash between rename and snapshot, and a half-written staging directory
    stage(run_dir, "checkpoint_000001")
    stage(run_dir, ".staging/s9")
    reopened = CheckpointManager.open(run_dir, CheckpointConfig())
    assert reopened.latest_checkpoint.path.endswith("checkpoint_000000")
    reopened.remove_uncommitted()
    assert on_disk(run_dir) == ["checkpoint_000000"] and not run_dir.exists(".staging")
    commit(reopened, run_dir, 1)
    assert on_disk(run_dir) == ["checkpoint_000000", "checkpoint_000001"]
    assert json.loads(run_dir.read_text("run_state.json"))["next_checkpoint_index"] == 2


def test_reopen_removes_the_copy_a_killed_driver_was_writing(run_dir):
    # a driver killed while it replaced result.json left its temporary copy
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    for name in (f"result.json.tmp-{gone}", f"params.json.tmp-{os.getpid()}", "notes.tmp-x"):
        with open(run_dir.join(name), "w") as f:
            f.write("half")
    removed = CheckpointManager.open(run_dir, CheckpointConfig()).remove_uncommitted()
    assert removed == [f"result.json.tmp-{gone}"]  # a live writer's copy (this one's) stays
    assert sorted(os.listdir(run_dir.path)) == ["notes.tmp-x", f"params.json.tmp-{os.getpid()}"]


def test_ranks_merge_and_rank_zero_wins_a_name_collision(run_dir):
    for rank in (0, 1, 2):
        staged = f".staging/s0/rank_0000{rank}"
        run_dir.makedirs(f"{staged}/sub")
        for name in ("model.pt", f"shard{rank}.pt", f"sub/opt{rank}.pt"):
            with open(run_dir.join(staged, name), "w") as f:
                f.write(f"rank {rank}")
    manager = CheckpointManager.open(run_dir, CheckpointConfig())
    checkpoint = manager.commit(".staging/s0", {}, training_iteration=1)
    files = sorted(
        os.path.relpath(os.path.join(d, f), checkpoint.path)
        for d, _, fs in os.walk(checkpoint.path)
        for f in fs
    )
    assert files == [
        "model.pt",
        "shard0.pt",
        "shard1.pt",
        "shard2.pt",
        "sub/opt0.pt",
        "sub/opt1.pt",
        "sub/opt2.pt",
    ]
    assert run_dir.read_text("checkpoint_000000/model.pt") == "rank 0"
    assert run_dir.listdir() == [".staging", "checkpoint_000000", "run_state.json"]
    assert run_dir.child(".staging").listdir() == []


def test_a_late_commit_of_an_older_checkpoint_does_not_become_the_latest(tmp_path):
    from lockstep._core.config import CheckpointConfig
    from lockstep._core.storage import StorageDir
    from lockstep._internal.controller.checkpoint_manager import CheckpointManager

    run_dir = StorageDir.from_uri(tmp_path / "run")
    run_dir.makedirs()
    manager = CheckpointManager.open(run_dir, CheckpointConfig())
    older = manager.reserve()  # an ASYNC upload still in flight
    for step, reserved in ((1, None), (0, older)):
        staged = f".staging/step_{step:09d}"
        run_dir.makedirs(f"{staged}/rank_00000")
        manager.commit(staged, {"step": step}, step + 1, reserved)
    assert manager.state.latest == "checkpoint_000001"
    assert [c.dir_name for c in manager.state.checkpoints] == [
        "checkpoint_000000",
        "checkpoint_000001",
    ]


def test_own_metadata_wins_over_a_copied_metadata_file_and_reaches_adopted_checkpoints(run_dir):
    manager = CheckpointManager.open(run_dir, CheckpointConfig(), {"preprocessor_pkl": "p"})
    manager.add_metadata({"lockstep_data_positions": {"step": 1}}, own=True)
    staged = stage(run_dir, ".staging/s0/rank_00000")
    # the user's files hold an older checkpoint's metadata file, copied along
    Checkpoint(run_dir.join(staged)).set_metadata(
        {"lockstep_data_positions": {"step": 0}, "preprocessor_pkl": "mine", "user": 1}
    )
    committed = manager.commit(".staging/s0", {}, training_iteration=1)
    assert committed.get_metadata() == {
        "lockstep_data_positions": {"step": 1},
        "preprocessor_pkl": "mine",
        "user": 1,
    }
    stage(run_dir, "mine")  # a checkpoint the workers put in storage themselves
    adopted = manager.adopt(Checkpoint(run_dir.join("mine")), {}, training_iteration=2)
    assert adopted.get_metadata() == {"lockstep_data_positions": {"step": 1}}
