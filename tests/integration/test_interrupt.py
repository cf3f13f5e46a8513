"""Ctrl-C sent to a real `lockstep demo`: a graceful stop, one line saying how to continue,
exit code 130, and nothing left behind."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import textwrap

import psutil

LOCKSTEP = os.path.join(os.path.dirname(sys.executable), "lockstep")
MARK = "LOCKSTEP_TEST_INTERRUPT_MARK"


def start_demo(tmp_path, mark: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "LOCKSTEP_STORAGE_PATH": str(tmp_path),
        "LOCKSTEP_PROGRESS_INTERVAL_S": "0",  # a plain line per report: we wait for one
        MARK: mark,
    }
    return subprocess.Popen(
        [LOCKSTEP, "demo", "--epochs", "200", "--limit", "200", "--name", "demo"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def wait_for_iteration(proc: subprocess.Popen[str], iteration: int) -> list[str]:
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if f"| iter {iteration}/200 |" in line:
            return lines
    raise AssertionError("".join(lines))


def marked_processes(mark: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(MARK) == mark:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def assert_nothing_left(mark: str, pid: int) -> None:
    # The fork server notices its driver is gone, and exits, a moment later.
    _gone, alive = psutil.wait_procs(marked_processes(mark), timeout=10)
    assert not alive, [p.cmdline() for p in alive]
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"lockstep-table-{pid}-")]


def test_first_ctrl_c_stops_keeps_the_checkpoint_and_says_how_to_continue(tmp_path):
    mark = secrets.token_hex(8)
    proc = start_demo(tmp_path, mark)
    wait_for_iteration(proc, 2)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    last = err.splitlines()[-1]
    run = tmp_path / "demo"
    match = re.fullmatch(
        rf"\[lockstep\] stopped by Ctrl-C at iteration (\d+), latest checkpoint "
        rf"(checkpoint_\d+); run in {re.escape(str(run))}; to continue: lockstep demo "
        r"--name demo --epochs 200 --workers 2 --seed 0 --limit 200",
        last,
    )
    assert match, last
    state = json.loads((run / "run_state.json").read_text())
    assert state["status"] == "interrupted"
    assert state["training_iteration"] == int(match[1]) >= 2
    assert state["latest"] == match[2]
    assert (run / match[2] / "model.pt").exists()  # the latest committed checkpoint stays
    assert_nothing_left(mark, proc.pid)

    # Running the same command again continues from it.
    again = subprocess.run(
        [LOCKSTEP, "demo", "--epochs", str(int(match[1]) + 1), "--limit", "200", "--name", "demo"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "LOCKSTEP_STORAGE_PATH": str(tmp_path)},
    )
    assert again.returncode == 0, again.stderr
    assert f"(continuing from {match[2]})" in again.stderr


def test_second_ctrl_c_ends_at_once(tmp_path):
    mark = secrets.token_hex(8)
    proc = start_demo(tmp_path, mark)
    wait_for_iteration(proc, 1)
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert err.splitlines()[-1].startswith("[lockstep] stopped by Ctrl-C at iteration ")
    assert_nothing_left(mark, proc.pid)


STUBBORN = textwrap.dedent("""
    import os, signal, sys, time
    from lockstep import train
    from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig

    def train_func(config):
        # told to stop, this worker says so and carries on: only a kill ends it
        signal.signal(signal.SIGTERM, lambda *_: open(config["told"], "w").close())
        while True:
            train.report({"loss": 1.0})
            time.sleep(0.05)

    DataParallelTrainer(
        train_func,
        train_loop_config={"told": sys.argv[2]},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="stubborn", storage_path=sys.argv[1]),
    ).fit()
""")


def test_second_ctrl_c_while_workers_are_given_their_grace_kills_them_at_once(tmp_path):
    from tests.integration.test_restore import wait_for

    script, told = tmp_path / "stubborn.py", tmp_path / "told"
    script.write_text(STUBBORN)
    mark = secrets.token_hex(8)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path), str(told)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # without the second Ctrl-C the workers would have ten minutes to stop
        env={
            **os.environ,
            "LOCKSTEP_WORKER_SHUTDOWN_GRACE_S": "600",
            "LOCKSTEP_PROGRESS_INTERVAL_S": "0",
            MARK: mark,
        },
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if "| loss=1 |" in line:  # every worker reported: each has its SIGTERM handler
            break
    proc.send_signal(signal.SIGINT)
    wait_for(told.exists)  # the graceful stop has begun: the workers were told
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.splitlines()[-1].startswith("[lockstep] stopped by Ctrl-C at iteration "), err
    assert f"run in {tmp_path / 'stubborn'}; to continue: DataParallelTrainer.restore(" in err
    assert_nothing_left(mark, proc.pid)
