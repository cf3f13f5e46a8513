"""The worker-group contract: what every executor must do, checked through a real fit().

A new executor subclasses WorkerGroupContract and overrides the ``scaling_config`` fixture
(and ``can_kill_workers`` when its workers are not separate processes).
"""

from __future__ import annotations

import dataclasses
import json
import os
import runpy
import secrets
import signal
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from lockstep import train
from lockstep.testing import Fault, train_epochs
from lockstep.train import (
    Checkpoint,
    CheckpointConfig,
    CheckpointUploadMode,
    DataParallelTrainer,
    FailureConfig,
    ScalingConfig,
    TrainingFailedError,
)
from tests.helpers import EveryRank, worker_processes

USER_SCRIPT = """\
from lockstep import train


def helper(step):
    raise ValueError(f"bad batch {step}")


def train_func():
    train.report({"step": 0})
    helper(3)
"""

DATA_SCRIPT = """\
from lockstep import train


def to_dict(row):
    raise ValueError(f"bad row {row['id']}")


def train_func():
    for _ in train.get_dataset_shard("train").iter_rows():
        pass
"""


def on_disk(result):
    return sorted(n for n in os.listdir(result.path) if n.startswith("checkpoint_"))


def epochs_in(result):
    return [row["epoch"] for row in result.metrics_dataframe.to_dict("records")]


class WorkerGroupContract:
    can_kill_workers = True

    @pytest.fixture
    def scaling_config(self) -> ScalingConfig:
        raise NotImplementedError

    @pytest.fixture
    def world_size(self, scaling_config) -> int:
        return max(1, scaling_config.num_workers)

    def fit(self, fn, scaling_config, run_config, **kwargs):
        return DataParallelTrainer(
            fn, scaling_config=scaling_config, run_config=run_config, **kwargs
        ).fit()

    # reports and results

    def test_reports_are_recorded_in_order(self, scaling_config, run_config):
        def train_func():
            rank = train.get_context().get_world_rank()
            for i in range(20):
                train.report({"i": i, "rank": rank})

        result = self.fit(train_func, scaling_config, run_config)
        assert result.metrics == {"i": 19, "rank": 0}
        rows = result.metrics_dataframe.to_dict("records")
        assert [r["i"] for r in rows] == list(range(20))
        assert [r["training_iteration"] for r in rows] == list(range(1, 21))
        assert {r["rank"] for r in rows} == {0}
        assert result.checkpoint is None and result.best_checkpoints == []

    def test_context_values(self, scaling_config, run_config, world_size):
        recorder = EveryRank()

        def train_func():
            ctx = train.get_context()
            train.report(
                {
                    "world_rank": ctx.get_world_rank(),
                    "world_size": ctx.get_world_size(),
                    "local_rank": ctx.get_local_rank(),
                    "local_world_size": ctx.get_local_world_size(),
                    "node_rank": ctx.get_node_rank(),
                    "name": ctx.get_experiment_name(),
                    "metadata": ctx.get_metadata(),
                }
            )

        config = dataclasses.replace(run_config, name="ctx", callbacks=[recorder])
        self.fit(train_func, scaling_config, config, metadata={"owner": "me"})
        (step,) = recorder.steps
        assert [m["world_rank"] for m in step] == list(range(world_size))
        assert sorted(m["local_rank"] for m in step) == list(range(world_size))
        assert {m["world_size"] for m in step} == {world_size}
        assert {m["local_world_size"] for m in step} == {world_size}
        assert {m["node_rank"] for m in step} == {0}
        assert {m["name"] for m in step} == {"ctx"}
        assert step[0]["metadata"] == {"owner": "me"}

    def test_return_value_is_rank_zeros(self, scaling_config, run_config):
        result = self.fit(
            lambda: {"rank": train.get_context().get_world_rank()}, scaling_config, run_config
        )
        assert result.return_value == {"rank": 0}
        assert result.metrics is None

    def test_function_with_config(self, scaling_config, run_config):
        result = self.fit(
            lambda config: config["x"] * 2, scaling_config, run_config, train_loop_config={"x": 21}
        )
        assert result.return_value == 42

    # checkpoints

    def test_checkpoints_retained_on_disk(self, scaling_config, run_config):
        config = dataclasses.replace(
            run_config,
            name="keep",
            checkpoint_config=CheckpointConfig(
                num_to_keep=2, checkpoint_score_attribute="loss", checkpoint_score_order="max"
            ),
        )
        result = self.fit(train_epochs, scaling_config, config, train_loop_config={"epochs": 5})
        # highest loss first: epochs 0 and 1, plus the latest (4) until a newer one exists
        assert on_disk(result) == ["checkpoint_000000", "checkpoint_000001", "checkpoint_000004"]
        assert os.listdir(os.path.join(result.path, "checkpoint_000001")) == ["epoch.txt"]
        assert result.checkpoint.path == os.path.join(result.path, "checkpoint_000004")
        # as Ray: the num_to_keep best, worst to best; the latest is not among them
        assert [m["epoch"] for _, m in result.best_checkpoints] == [1, 0]
        best_low = result.get_best_checkpoint("loss", "min")
        assert best_low.path == os.path.join(result.path, "checkpoint_000001")
        assert not os.path.exists(os.path.join(result.path, ".staging"))

    def test_checkpoint_files_merge_from_every_rank(self, scaling_config, run_config, world_size):
        def train_func():
            rank = train.get_context().get_world_rank()
            with tempfile.TemporaryDirectory(prefix="lockstep-test-") as d:
                with open(os.path.join(d, f"rank{rank}.txt"), "w") as f:
                    f.write(str(rank))
                train.report({"rank": rank}, checkpoint=Checkpoint.from_directory(d))
            return train.get_checkpoint().path

        result = self.fit(train_func, scaling_config, run_config)
        expected = [f"rank{r}.txt" for r in range(world_size)]
        assert sorted(os.listdir(result.checkpoint.path)) == expected
        assert result.return_value == result.checkpoint.path

    def test_same_named_files_from_every_rank_are_never_mixed(self, scaling_config, run_config):
        def train_func():
            rank = train.get_context().get_world_rank()
            for step in range(5):
                with tempfile.TemporaryDirectory(prefix="lockstep-test-") as d:
                    with open(os.path.join(d, "state.json"), "w") as f:
                        f.write(f'{{"rank": {rank}, "padding": "{"x" * 100000 * (rank + 1)}"}}')
                    train.report({"step": step}, checkpoint=Checkpoint.from_directory(d))

        result = self.fit(train_func, scaling_config, run_config)
        ranks = []
        for checkpoint, _ in result.best_checkpoints:
            with open(os.path.join(checkpoint.path, "state.json")) as f:
                ranks.append(json.load(f)["rank"])
        assert ranks == [0] * 5  # every step's checkpoint, each with rank 0's file

    def test_every_rank_sees_each_committed_checkpoint(self, scaling_config, run_config):
        def train_func():
            rank = train.get_context().get_world_rank()
            seen = []
            for epoch in range(3):
                with tempfile.TemporaryDirectory(prefix="lockstep-test-") as d:
                    checkpoint = Checkpoint.from_directory(d) if rank == 0 else None
                    train.report({"epoch": epoch}, checkpoint=checkpoint)
                train.collective.barrier()
                seen.append(os.path.basename(train.get_checkpoint().path))
            train.report({"seen": seen})

        result = self.fit(train_func, scaling_config, run_config)
        assert result.metrics["seen"] == [
            "checkpoint_000000",
            "checkpoint_000001",
            "checkpoint_000002",
        ]

    def test_rerun_with_same_name_continues(self, scaling_config, run_config):
        first = self.fit(train_epochs, scaling_config, run_config, train_loop_config={"epochs": 3})
        second = self.fit(train_epochs, scaling_config, run_config, train_loop_config={"epochs": 5})
        assert first.return_value == 3 and second.return_value == 2
        assert epochs_in(second) == [0, 1, 2, 3, 4]
        assert second.metrics_dataframe["training_iteration"].tolist() == [1, 2, 3, 4, 5]

    def test_resume_from_checkpoint_starts_a_new_run(self, scaling_config, run_config, tmp_path):
        first = self.fit(train_epochs, scaling_config, run_config, train_loop_config={"epochs": 2})
        other = dataclasses.replace(run_config, name="other")
        second = self.fit(
            train_epochs,
            scaling_config,
            other,
            train_loop_config={"epochs": 4},
            resume_from_checkpoint=first.checkpoint,
        )
        assert epochs_in(second) == [2, 3]
        assert first.path != second.path

    # failures

    def test_retry_after_exception_resumes_from_checkpoint(
        self, scaling_config, run_config, world_size
    ):
        last = world_size - 1
        config = dataclasses.replace(
            run_config, name="retry", failure_config=FailureConfig(max_failures=1)
        )
        result = self.fit(
            train_epochs,
            scaling_config,
            config,
            train_loop_config={"epochs": 5, "faults": [Fault(kind="raise", rank=last, at_epoch=2)]},
        )
        assert result.return_value == 3  # the second attempt started at epoch 2
        assert result.metrics["epoch"] == 4
        assert epochs_in(result) == [0, 1, 2, 3, 4]

    def test_exception_fails_with_the_users_traceback(self, scaling_config, run_config):
        def train_func():
            train.report({"step": 0})
            raise ValueError("bad batch")

        with pytest.raises(TrainingFailedError) as info:
            self.fit(train_func, scaling_config, run_config)
        message = str(info.value)
        assert message.startswith("Training failed: rank ")
        assert "raised ValueError: bad batch" in message
        frames = [line for line in message.splitlines() if line.strip().startswith("File ")]
        assert frames[0].endswith(", in train_func") and __file__ in frames[0]
        assert isinstance(info.value.root_cause.exception, ValueError)

    def test_traceback_names_the_scripts_file_and_lines(self, scaling_config, run_config, tmp_path):
        # functions of a script run as __main__ travel by value; their frames keep the file
        script = tmp_path / "user_script.py"
        script.write_text(USER_SCRIPT)
        train_func = runpy.run_path(str(script), run_name="__main__")["train_func"]

        with pytest.raises(TrainingFailedError) as info:
            self.fit(train_func, scaling_config, run_config)
        for text in (str(info.value), info.value.root_cause.traceback):
            assert f'File "{script}", line 5, in helper' in text
            assert 'raise ValueError(f"bad batch {step}")' in text
            assert f'File "{script}", line 10, in train_func' in text
        assert "<dynamic-code>" not in str(info.value)

    def test_a_dataset_transforms_traceback_names_the_scripts_file(
        self, scaling_config, run_config, tmp_path
    ):
        import lockstep.data as ld

        script = tmp_path / "data_script.py"
        script.write_text(DATA_SCRIPT)
        names = runpy.run_path(str(script), run_name="__main__")
        datasets = {"train": ld.range(4).map(names["to_dict"])}

        with pytest.raises(TrainingFailedError) as info:
            self.fit(names["train_func"], scaling_config, run_config, datasets=datasets)
        assert f'File "{script}", line 5, in to_dict' in str(info.value)
        assert "<dynamic-code>" not in str(info.value)

    def test_report_misuse_is_not_retried(self, scaling_config, run_config):
        config = dataclasses.replace(
            run_config, name="misuse", failure_config=FailureConfig(max_failures=3)
        )

        def train_func():
            train.report({"weights": object()})

        with pytest.raises(TrainingFailedError, match="metric 'weights' is a object") as info:
            self.fit(train_func, scaling_config, config)
        assert "after" not in str(info.value).splitlines()[0]  # no restart happened

    def test_score_attribute_missing_from_metrics(self, scaling_config, run_config):
        config = dataclasses.replace(
            run_config,
            name="score",
            checkpoint_config=CheckpointConfig(checkpoint_score_attribute="acc"),
        )
        with pytest.raises(TrainingFailedError, match="'acc' is missing from the metrics"):
            self.fit(train_epochs, scaling_config, config, train_loop_config={"epochs": 1})

    def test_unknown_dataset_name_lists_the_names_given(self, scaling_config, run_config):
        with pytest.raises(TrainingFailedError, match=r"no dataset by that name.*none"):
            self.fit(lambda: train.get_dataset_shard("train"), scaling_config, run_config)

    def test_checkpoint_directory_deleted_before_report(self, scaling_config, run_config):
        def train_func():
            with tempfile.TemporaryDirectory(prefix="lockstep-test-") as d:
                checkpoint = Checkpoint.from_directory(d)
            train.report({"x": 1}, checkpoint=checkpoint)

        with pytest.raises(TrainingFailedError, match="no longer exists"):
            self.fit(train_func, scaling_config, run_config)

    # collectives

    def test_collectives(self, scaling_config, run_config, world_size):
        token = secrets.token_hex(4)

        def train_func():
            rank = train.get_context().get_world_rank()
            train.collective.barrier()
            value = train.collective.broadcast_from_rank_zero(token if rank == 0 else None)
            return value

        result = self.fit(train_func, scaling_config, run_config)
        assert result.return_value == token


class SlowCleanUp:
    """A ``with`` block whose clean-up takes a while, and says where it got to in
    ``marks``: ``cleaning-RANK`` once it began, ``cleaned-RANK`` once it finished."""

    def __init__(self, marks: str, rank: int, stop_again: bool = False) -> None:
        self.marks, self.rank, self.stop_again = marks, rank, stop_again

    def __enter__(self) -> SlowCleanUp:
        return self

    def __exit__(self, *exc: object) -> None:
        _touch(self.marks, f"cleaning-{self.rank}")
        if self.stop_again:  # a second stop (a scheduler's, beside the driver's) comes now
            os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.5)
        _touch(self.marks, f"cleaned-{self.rank}")


def _touch(directory: str, name: str) -> None:
    with open(os.path.join(directory, name), "w"):
        pass


def _wait_for_marks(directory: str, names: list[str]) -> None:
    deadline = time.monotonic() + 60
    while not all(os.path.exists(os.path.join(directory, n)) for n in names):
        assert time.monotonic() < deadline, f"never marked: {names}"
        time.sleep(0.01)


class Marks:
    """Where the ranks of a stop test say how far they got: a file ``STATE-RANK`` each,
    for every rank but 0 (rank 0 fails, and so stops the others)."""

    def __init__(self, tmp_path: Path, world_size: int) -> None:
        self.path, self.others = str(tmp_path / "marks"), range(1, world_size)
        os.mkdir(self.path)

    def fail_once_the_others_are(self, state: str) -> None:
        """Rank 0's part: fail once every other rank marked ``state``."""
        _wait_for_marks(self.path, [f"{state}-{r}" for r in self.others])
        raise RuntimeError("rank 0 fails")

    def of_the_others(self, *states: str) -> list[str]:
        return sorted(f"{state}-{r}" for r in self.others for state in states)

    def seen(self) -> list[str]:
        return sorted(os.listdir(self.path))


class StoppedRankContract(WorkerGroupContract):
    """For executors that stop a worker by unwinding its code (SIGTERM): what it cleans
    up is cleaned up whole, even when the stop comes in the middle of it."""

    def test_a_failing_ranks_clean_up_is_not_cut_short_by_the_stop(
        self, scaling_config, run_config, world_size, tmp_path
    ):
        marks = Marks(tmp_path, world_size)

        def train_func():
            rank = train.get_context().get_world_rank()
            if rank == 0:  # fails once the others are cleaning up: the stop reaches them there
                marks.fail_once_the_others_are("cleaning")
            with SlowCleanUp(marks.path, rank):
                raise ValueError("this rank fails too")

        with pytest.raises(TrainingFailedError):
            self.fit(train_func, scaling_config, run_config)
        assert marks.seen() == marks.of_the_others("cleaning", "cleaned")

    def test_a_second_stop_does_not_cut_short_the_clean_up_of_the_first(
        self, scaling_config, run_config, world_size, tmp_path
    ):
        marks = Marks(tmp_path, world_size)

        def train_func():
            rank = train.get_context().get_world_rank()
            if rank == 0:  # never reports: the others wait in report() until stopped
                marks.fail_once_the_others_are("reporting")
            with SlowCleanUp(marks.path, rank, stop_again=True):
                _touch(marks.path, f"reporting-{rank}")
                train.report({"rank": rank})

        with pytest.raises(TrainingFailedError, match="rank 0 fails"):
            self.fit(train_func, scaling_config, run_config)
        assert marks.seen() == marks.of_the_others("reporting", "cleaning", "cleaned")

    def test_a_stop_lets_a_with_block_exit_whole_then_unwinds_the_rest(
        self, scaling_config, run_config, world_size, tmp_path
    ):
        marks = Marks(tmp_path, world_size)

        def train_func():
            rank = train.get_context().get_world_rank()
            if rank == 0:  # fails once the others' blocks exit: the stop reaches them there
                marks.fail_once_the_others_are("cleaning")
            try:
                with SlowCleanUp(marks.path, rank):
                    pass  # no exception: the block just ends (a temporary directory's would)
                while True:  # the stop is taken here, after the exit, not at the grace's end
                    time.sleep(0.01)
            finally:
                _touch(marks.path, f"unwound-{rank}")

        with pytest.raises(TrainingFailedError, match="rank 0 fails"):
            self.fit(train_func, scaling_config, run_config)
        assert marks.seen() == marks.of_the_others("cleaning", "cleaned", "unwound")


class ProcessDeathContract(StoppedRankContract):
    """For executors whose workers are processes that can be killed."""

    @pytest.mark.parametrize(
        "fault",
        [
            Fault(kind="exit", rank=0, at_epoch=1, exit_code=3),
            Fault(kind="signal", rank=0, at_epoch=1),
        ],
    )
    def test_retry_after_worker_death(self, scaling_config, run_config, fault):
        config = dataclasses.replace(
            run_config, name="death", failure_config=FailureConfig(max_failures=1)
        )
        result = self.fit(
            train_epochs, scaling_config, config, train_loop_config={"epochs": 3, "faults": [fault]}
        )
        assert epochs_in(result) == [0, 1, 2]
        assert result.return_value == 2

    @pytest.fixture
    def death_causes(self) -> dict[str, str]:
        """How this executor describes a worker that exited with code 3, or was killed."""
        return {"exit": r"exited with code 3", "signal": r"was killed by SIGKILL"}

    @pytest.mark.parametrize(
        "fault",
        [
            Fault(kind="exit", rank=0, at_epoch=1, exit_code=3),
            Fault(kind="signal", rank=0, at_epoch=1),
        ],
        ids=["exit", "signal"],
    )
    def test_death_is_reported_with_pid_and_cause(
        self, scaling_config, run_config, fault, death_causes
    ):
        message = rf"rank 0 \(pid \d+\).* {death_causes[fault.kind]}"
        with pytest.raises(TrainingFailedError, match=message) as info:
            self.fit(
                train_epochs,
                scaling_config,
                run_config,
                train_loop_config={"epochs": 3, "faults": [fault]},
            )
        assert not worker_processes()
        assert (
            not psutil.pid_exists(info.value.root_cause.pid)
            or psutil.Process(info.value.root_cause.pid).status() == psutil.STATUS_ZOMBIE
        )

    def test_failure_while_another_rank_hangs(self, scaling_config, run_config, world_size):
        assert world_size >= 2, "this contract runs with at least two workers"
        faults = [Fault(kind="hang", rank=0, at_epoch=1), Fault(kind="raise", rank=1, at_epoch=1)]
        with pytest.raises(TrainingFailedError, match=r"rank 1 .* raised InjectedFailure"):
            self.fit(
                train_epochs,
                scaling_config,
                run_config,
                train_loop_config={"epochs": 3, "faults": faults},
            )

    def test_report_count_mismatch_fails_without_hanging(self, scaling_config, run_config):
        def train_func():
            rank = train.get_context().get_world_rank()
            for i in range(3 if rank == 0 else 2):
                with tempfile.TemporaryDirectory(prefix="lockstep-test-") as d:
                    train.report({"i": i}, checkpoint=Checkpoint.from_directory(d))

        with pytest.raises(TrainingFailedError, match="different number of times"):
            self.fit(train_func, scaling_config, run_config)

    def test_collective_mismatch_fails_without_hanging(self, scaling_config, run_config):
        def train_func():
            if train.get_context().get_world_rank() == 0:
                train.collective.barrier()

        with pytest.raises(
            TrainingFailedError,
            match=r"returned from the training function "
            r"while rank 0 waits in barrier\(\)",
        ):
            self.fit(train_func, scaling_config, run_config)

    # report() is a barrier (Ray's contract), and a mismatch never hangs

    def test_report_is_a_barrier(self, scaling_config, run_config, tmp_path):
        """A rank never gets past report(k) before every rank reported step k."""
        marks = tmp_path / "marks"
        marks.mkdir()

        def train_func():
            rank = train.get_context().get_world_rank()
            for i in range(3):
                if rank == 0 and i == 1:
                    raise RuntimeError("rank 0 fails before its second report")
                train.report({"i": i})
                (marks / f"rank{rank}-{i}").touch()

        with pytest.raises(TrainingFailedError, match="rank 0 fails before its second report"):
            self.fit(train_func, scaling_config, run_config)
        # rank 1 could pass report 0 at most: report 1 waits for rank 0, which never comes
        assert {p.name for p in marks.iterdir()} <= {"rank0-0", "rank1-0"}

    def test_no_rank_leaves_a_report_before_the_last_rank_entered_it(
        self, scaling_config, run_config, world_size, tmp_path
    ):
        """The barrier holds at every step, with SYNC and ASYNC checkpoints among them (a
        local group's steps end with its release line, a commit comes before the end),
        and a SYNC checkpoint is every rank's latest as its report returns."""
        marks = tmp_path / "marks"
        marks.mkdir()

        def train_func():
            rank = train.get_context().get_world_rank()
            last = train.get_context().get_world_size() - 1
            times = []
            for step in range(12):
                if rank == last:
                    time.sleep(0.002)  # the last to report, at every step
                entered = time.monotonic()
                if step % 3 != 2:
                    train.report({"step": step})
                    times.append((entered, time.monotonic()))
                    continue
                sync = step % 6 == 2
                mode = CheckpointUploadMode.SYNC if sync else CheckpointUploadMode.ASYNC
                with tempfile.TemporaryDirectory(prefix="lockstep-test-") as d:
                    Path(d, "step").write_text(str(step))
                    checkpoint = Checkpoint.from_directory(d) if rank == 0 else None
                    train.report({"step": step}, checkpoint=checkpoint, checkpoint_upload_mode=mode)
                times.append((entered, time.monotonic()))
                if sync:
                    latest = train.get_checkpoint()
                    assert Path(latest.path, "step").read_text() == str(step), rank
            (marks / f"rank{rank}.json").write_text(json.dumps(times))

        result = self.fit(train_func, scaling_config, run_config)
        ranks = [json.loads((marks / f"rank{r}.json").read_text()) for r in range(world_size)]
        for step in range(12):
            last_entered = max(times[step][0] for times in ranks)
            assert [times[step][1] >= last_entered for times in ranks] == [True] * world_size
        assert on_disk(result) == [f"checkpoint_00000{i}" for i in range(4)]
        assert [r["step"] for r in result.metrics_dataframe.to_dict("records")] == list(range(12))

    def test_checkpoints_before_a_raise_are_all_committed(self, scaling_config, run_config):
        """Ray commits every checkpoint reported before a rank raises; so does lockstep."""

        def train_func():
            for i in range(3):
                with tempfile.TemporaryDirectory(prefix="lockstep-test-") as d:
                    train.report({"i": i}, checkpoint=Checkpoint.from_directory(d))
            if train.get_context().get_world_rank() == 0:
                raise RuntimeError("after the last report")

        with pytest.raises(TrainingFailedError, match="after the last report"):
            self.fit(train_func, scaling_config, run_config)
        run_dir = os.path.join(run_config.storage_path, os.listdir(run_config.storage_path)[0])
        committed = sorted(n for n in os.listdir(run_dir) if n.startswith("checkpoint_"))
        assert committed == ["checkpoint_000000", "checkpoint_000001", "checkpoint_000002"]

    def test_report_count_mismatch_names_every_rank_count(self, scaling_config, run_config):
        def train_func():
            rank = train.get_context().get_world_rank()
            for i in range(3 if rank == 0 else 2):
                train.report({"i": i})

        with pytest.raises(
            TrainingFailedError,
            match=r"rank 1 returned after 2 reports while rank 0 waits in its report number 3 "
            r"\(reports: rank 0: 3, rank 1: 2 \(returned\)\)",
        ):
            self.fit(train_func, scaling_config, run_config)

    def test_death_while_another_waits_in_report_names_every_count(
        self, scaling_config, run_config
    ):
        def train_func():
            train.report({"i": 0})
            if train.get_context().get_world_rank() == 1:
                os._exit(3)
            train.report({"i": 1})

        with pytest.raises(
            TrainingFailedError, match=r"rank 1 \(pid \d+\).* \(reports: rank 0: [12], rank 1: 1\)"
        ):
            self.fit(train_func, scaling_config, run_config)
        assert not worker_processes()

    @pytest.mark.parametrize("repeat", range(3))
    def test_exit_right_after_report_keeps_that_report(
        self, scaling_config, run_config, tmp_path, repeat
    ):
        """What a worker sent before it died is handled before its death: the restart
        resumes from the checkpoint reported just before the exit, never an older one."""
        died = tmp_path / "died"

        def train_func():
            start = 0
            if checkpoint := train.get_checkpoint():
                start = checkpoint.get_metadata()["epoch"] + 1
            for epoch in range(start, 3):
                with tempfile.TemporaryDirectory(prefix="lockstep-test-") as d:
                    ckpt = Checkpoint.from_directory(d)
                    ckpt.set_metadata({"epoch": epoch})
                    train.report({"epoch": epoch}, checkpoint=ckpt)
                if epoch == 1 and train.get_context().get_world_rank() == 1 and not died.exists():
                    died.touch()
                    os._exit(1)
            return start

        config = dataclasses.replace(
            run_config, name="drain", failure_config=FailureConfig(max_failures=1)
        )
        result = self.fit(train_func, scaling_config, config)
        assert died.exists()
        assert result.return_value == 2  # resumed after epoch 1, not from epoch 0
        assert epochs_in(result) == [0, 1, 2]
