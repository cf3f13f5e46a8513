"""SIGTERM to a real driver (a scheduler's, a spot reclaim's): the workers are told, report
one more checkpoint, every process exits before the deadline, and the run continues to the
same result as one never stopped."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from lockstep.train import DataParallelTrainer, Result
from tests.integration.test_interrupt import MARK, assert_nothing_left

STEPS = 30

# No `if __name__ == "__main__"` guard, as in Ray Train scripts: workers never import __main__.
SCRIPT = textwrap.dedent("""
    import json, os, sys, tempfile, time
    from lockstep import train
    from lockstep.train import (
        Checkpoint, DataParallelTrainer, FailureConfig, RunConfig, ScalingConfig,
    )

    def train_func(config):
        rank = train.get_context().get_world_rank()
        start, w = 0, 1.0
        if checkpoint := train.get_checkpoint():
            with checkpoint.as_directory() as d:
                start, w = json.load(open(os.path.join(d, "state.json")))
        saved = False
        for step in range(start, config["steps"]):
            time.sleep(config["sleep_s"])  # the pace of a real step
            w = w * 0.5 + step
            info = train.get_preemption_info()
            save = step % 10 == 9
            if info is not None and not saved:  # the run stops after this report: save now
                saved = save = True
                seen = {"step": step, "reason": info.reason, "deadline_ms": info.deadline_ms,
                        "ranks": info.preempted_ranks}
                with open(os.path.join(config["seen"], f"rank{rank}.json"), "w") as f:
                    json.dump(seen, f)
            if save:
                with tempfile.TemporaryDirectory() as d:
                    json.dump([step + 1, w], open(os.path.join(d, "state.json"), "w"))
                    train.report({"step": step, "w": w}, checkpoint=Checkpoint.from_directory(d))
            else:
                train.report({"step": step, "w": w})
        return w

    result = DataParallelTrainer(
        train_func,
        train_loop_config={"steps": int(sys.argv[3]), "sleep_s": 0.05, "seen": sys.argv[2]},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            name="preempted", storage_path=sys.argv[1],
            failure_config=FailureConfig(preemption_deadline_s=60),
        ),
    ).fit()
    print("final w", repr(result.metrics["w"]))
""")


def uninterrupted_w(steps: int) -> float:
    w = 1.0
    for step in range(steps):
        w = w * 0.5 + step
    return w


def run_script(tmp_path, mark: str, **popen) -> subprocess.Popen[str]:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    (tmp_path / "seen").mkdir(exist_ok=True)
    env = {**os.environ, "LOCKSTEP_PROGRESS_INTERVAL_S": "0", MARK: mark}
    return subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "runs"), str(tmp_path / "seen"), str(STEPS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        **popen,
    )


def wait_for_iteration(driver: subprocess.Popen[str], iteration: int) -> None:
    """Read the driver's progress lines until the one of ``iteration``."""
    assert driver.stderr is not None
    for line in driver.stderr:
        if f"| iter {iteration} |" in line:
            break


def sigterm_mid_training(tmp_path, mark: str) -> tuple[subprocess.Popen[str], str, float]:
    """Start the script, SIGTERM its driver at the fifth step; return it, its stderr and
    when the signal was sent."""
    driver = run_script(tmp_path, mark)
    wait_for_iteration(driver, 5)
    sent = time.time()
    driver.send_signal(signal.SIGTERM)
    _, err = driver.communicate(timeout=120)
    return driver, err, sent


@pytest.mark.slow
def test_sigterm_checkpoints_stops_within_the_deadline_and_the_rerun_continues(tmp_path):
    mark = secrets.token_hex(8)
    driver, err, sent = sigterm_mid_training(tmp_path, mark)
    exited = time.time()
    assert driver.returncode == 130, err
    assert "Traceback" not in err
    assert "[lockstep] stopped by SIGTERM at iteration " in err.splitlines()[-1], err
    assert_nothing_left(mark, driver.pid)

    # Both workers were told, at the same step, with the deadline; the driver kept it.
    seen = [json.loads((tmp_path / "seen" / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert seen[0] == seen[1], seen
    assert seen[0]["reason"] == "SIGTERM" and seen[0]["ranks"] == [0, 1]
    assert sent < seen[0]["deadline_ms"] / 1000 <= sent + 61
    assert exited < seen[0]["deadline_ms"] / 1000

    # The checkpoint they reported on being told is the run's latest, committed.
    run_dir = tmp_path / "runs" / "preempted"
    stopped = Result.from_path(str(run_dir))
    assert stopped.metrics["step"] == seen[0]["step"] < STEPS - 1
    with open(os.path.join(stopped.checkpoint.path, "state.json")) as f:
        assert json.load(f)[0] == seen[0]["step"] + 1
    state = json.loads((run_dir / "run_state.json").read_text())
    assert state["status"] == "interrupted" and state["num_preemptions"] == 0

    # Running the same script again continues to the result of an uninterrupted run.
    again = run_script(tmp_path, mark)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert out.split()[-1] == repr(uninterrupted_w(STEPS))
    rows = Result.from_path(str(run_dir)).metrics_dataframe["step"].tolist()
    assert rows == list(range(STEPS))  # every step once: resumed right after the checkpoint
    assert_nothing_left(mark, again.pid)


@pytest.mark.slow
def test_sigterm_then_restore_continues_to_the_same_result(tmp_path):
    mark = secrets.token_hex(8)
    driver, err, _sent = sigterm_mid_training(tmp_path, mark)
    assert driver.returncode == 130, err
    run_dir = str(tmp_path / "runs" / "preempted")
    assert DataParallelTrainer.can_restore(run_dir)
    result = DataParallelTrainer.restore(run_dir).fit()
    assert result.metrics["w"] == uninterrupted_w(STEPS)
    assert result.return_value == uninterrupted_w(STEPS)
    assert_nothing_left(mark, driver.pid)


SILENT = textwrap.dedent("""
    import sys, time
    from lockstep import train
    from lockstep.train import DataParallelTrainer, FailureConfig, RunConfig, ScalingConfig

    def train_func():
        train.report({"step": 0})
        time.sleep(600)  # one long step that never looks at get_preemption_info()

    DataParallelTrainer(
        train_func,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            name="silent", storage_path=sys.argv[1],
            failure_config=FailureConfig(preemption_deadline_s=5),
        ),
    ).fit()
""")


@pytest.mark.slow
def test_workers_that_never_report_again_are_stopped_by_the_deadline(tmp_path):
    script = tmp_path / "silent.py"
    script.write_text(SILENT)
    mark = secrets.token_hex(8)
    driver = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "LOCKSTEP_PROGRESS_INTERVAL_S": "0", MARK: mark},
    )
    wait_for_iteration(driver, 1)
    sent = time.monotonic()
    driver.send_signal(signal.SIGTERM)
    _, err = driver.communicate(timeout=120)
    assert time.monotonic() - sent < 5  # the deadline, the workers' grace included
    assert driver.returncode == 130, err
    assert "[lockstep] stopped by SIGTERM at iteration 1" in err.splitlines()[-1], err
    assert_nothing_left(mark, driver.pid)
