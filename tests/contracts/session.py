"""The session contract: every ``lockstep.train`` session function behaves the same wherever
the training function runs, checked through real runs.

A place (a worker process, a spawned one, inline, a Tune function trial, a Ray actor)
subclasses SessionContract and overrides :meth:`SessionContract.run`, which runs a training
function of one worker there. Each training function here writes what it saw into
``config["out"]`` (a JSON file per call), so the test reads the same observations from
every place.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from typing import Any

import pytest

from lockstep import train, tune
from lockstep.train import Checkpoint, CheckpointConfig, collective


@dataclasses.dataclass
class Outcome:
    """A run's end as a test sees it: its error (None when it finished) and directory."""

    error: BaseException | None
    run_dir: str


def observe(config: dict[str, Any], name: str, value: Any) -> None:
    with open(os.path.join(config["out"], f"{name}.json"), "w") as f:
        json.dump(value, f)


def observed(out: str, name: str) -> Any:
    with open(os.path.join(out, f"{name}.json")) as f:
        return json.load(f)


def rows(run_dir: str) -> list[dict[str, Any]]:
    with open(os.path.join(run_dir, "result.json")) as f:
        return [json.loads(line) for line in f if line.strip()]


# -- the training functions, at module level: every place can pickle them -------------------


def reports_three_steps(config):
    for step in range(3):
        train.report({"step": step, "loss": 1.0 / (step + 1)})
    observe(config, "num_reports", 3)


def reports_named_checkpoints(config):
    observe(config, "before", train.get_checkpoint() is None)
    for step in range(2):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.txt"), "w") as f:
                f.write(str(step))
            train.report(
                {"step": step},
                checkpoint=Checkpoint.from_directory(d),
                checkpoint_dir_name=f"mine_{step}",
            )
        observe(config, f"latest_{step}", os.path.basename(train.get_checkpoint().path))
    kept = train.get_all_reported_checkpoints()
    observe(config, "kept", [[os.path.basename(c.checkpoint.path), c.metrics] for c in kept])


def reads_its_context(config):
    ctx = train.get_context()
    observe(
        config,
        "context",
        {
            "world": [ctx.get_world_rank(), ctx.get_world_size()],
            "local": [ctx.get_local_rank(), ctx.get_local_world_size()],
            "node": ctx.get_node_rank(),
            "dir": os.path.basename(ctx.get_trial_dir().rstrip("/")),
            "preemption": train.get_preemption_info(),
        },
    )
    train.heartbeat()
    train.report({"done": 1})


def reports_in_older_forms(config):
    train.report(loss=0.5)
    tune.report({"loss": 0.25})
    observe(config, "tune_context", tune.get_context().get_world_rank())
    observe(config, "tune_checkpoint", tune.get_checkpoint() is None)


def reports_a_non_checkpoint(config):
    train.report({"step": 0}, checkpoint="/not/a/checkpoint")


def checkpoints_without_the_score(config):
    with tempfile.TemporaryDirectory() as d:
        train.report({"loss": 1.0}, checkpoint=Checkpoint.from_directory(d))


def asks_for_an_unknown_dataset(config):
    train.get_dataset_shard("nope")


def uses_the_collectives(config):
    collective.barrier()
    observe(config, "broadcast", collective.broadcast_from_rank_zero({"from": "rank 0"}))
    train.report({"ok": 1})


class SessionContract:
    """What every place must do. Subclasses override :meth:`run`."""

    def run(
        self,
        fn: Any,
        out: str,
        storage: str,
        *,
        checkpoint_config: CheckpointConfig | None = None,
    ) -> Outcome:
        """Run ``fn`` with ``{"out": out}`` as its config, one worker, in this place, with
        storage under ``storage``; max_failures is 0."""
        raise NotImplementedError

    @pytest.fixture
    def out(self, tmp_path):
        path = tmp_path / "out"
        path.mkdir()
        return str(path)

    def test_reports_become_rows_numbered_from_one(self, out, tmp_path):
        outcome = self.run(reports_three_steps, out, str(tmp_path))
        assert outcome.error is None
        logged = rows(outcome.run_dir)
        assert [r["step"] for r in logged] == [0, 1, 2]
        assert [r["training_iteration"] for r in logged] == [1, 2, 3]
        assert observed(out, "num_reports") == 3

    def test_checkpoints_commit_under_the_names_given(self, out, tmp_path):
        outcome = self.run(reports_named_checkpoints, out, str(tmp_path))
        assert outcome.error is None
        assert observed(out, "before") is True
        assert observed(out, "latest_0") == "mine_0" and observed(out, "latest_1") == "mine_1"
        assert observed(out, "kept") == [["mine_0", {"step": 0}], ["mine_1", {"step": 1}]]
        with open(os.path.join(outcome.run_dir, "mine_1", "state.txt")) as f:
            assert f.read() == "1"
        with open(os.path.join(outcome.run_dir, "run_state.json")) as f:
            assert json.load(f)["latest"] == "mine_1"

    def test_the_context_names_one_worker_and_its_run_directory(self, out, tmp_path):
        outcome = self.run(reads_its_context, out, str(tmp_path))
        assert outcome.error is None
        seen = observed(out, "context")
        assert seen["world"] == [0, 1] and seen["local"] == [0, 1] and seen["node"] == 0
        assert seen["dir"] == os.path.basename(outcome.run_dir.rstrip("/"))
        assert seen["preemption"] is None

    def test_older_forms_and_tunes_names_are_the_same_session(self, out, tmp_path):
        outcome = self.run(reports_in_older_forms, out, str(tmp_path))
        assert outcome.error is None
        assert [r["loss"] for r in rows(outcome.run_dir)] == [0.5, 0.25]
        assert observed(out, "tune_context") == 0 and observed(out, "tune_checkpoint") is True

    def test_a_report_of_something_else_than_a_checkpoint_fails_with_the_fix(self, out, tmp_path):
        outcome = self.run(reports_a_non_checkpoint, out, str(tmp_path))
        assert "takes a Checkpoint, got str" in str(outcome.error)
        assert "HINT: checkpoint=Checkpoint.from_directory(dir)" in str(outcome.error)

    def test_a_checkpoint_without_its_score_attribute_fails_naming_it(self, out, tmp_path):
        config = CheckpointConfig(num_to_keep=1, checkpoint_score_attribute="accuracy")
        outcome = self.run(
            checkpoints_without_the_score, out, str(tmp_path), checkpoint_config=config
        )
        assert "accuracy" in str(outcome.error)
        assert not [n for n in os.listdir(outcome.run_dir) if n.startswith("checkpoint_")]

    def test_an_unknown_dataset_is_a_key_error_naming_it(self, out, tmp_path):
        outcome = self.run(asks_for_an_unknown_dataset, out, str(tmp_path))
        assert "get_dataset_shard('nope'): no dataset by that name" in str(outcome.error)

    def test_collectives_of_one_worker_return_its_own_data(self, out, tmp_path):
        outcome = self.run(uses_the_collectives, out, str(tmp_path))
        assert outcome.error is None
        assert observed(out, "broadcast") == {"from": "rank 0"}
