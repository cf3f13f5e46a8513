"""What a user sees on the terminal: worker output tagged by rank, and run progress."""

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import textwrap

from lockstep import train
from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig


def chatty(config):
    rank = train.get_context().get_world_rank()
    print(f"hello from {rank}")
    print(f"warning on {rank}", file=sys.stderr)
    for epoch in range(config["epochs"]):
        train.report({"epoch": epoch, "loss": 1.0 / (epoch + 1)})


def test_worker_output_is_tagged_with_its_rank(tmp_path, capfd):
    DataParallelTrainer(
        chatty,
        train_loop_config={"epochs": 1},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(tmp_path), verbose=0),
    ).fit()
    out, err = capfd.readouterr()
    assert sorted(line for line in out.splitlines() if "hello" in line) == [
        "(rank 0) hello from 0",
        "(rank 1) hello from 1",
    ]
    assert "(rank 1) warning on 1" in err.splitlines()


def test_verbose_zero_prints_nothing_of_its_own(tmp_path, capfd):
    DataParallelTrainer(
        lambda: train.report({"x": 1}), run_config=RunConfig(storage_path=str(tmp_path), verbose=0)
    ).fit()
    out, err = capfd.readouterr()
    assert "[lockstep]" not in out + err


def test_plain_lines_when_not_a_terminal(tmp_path, capfd):
    DataParallelTrainer(
        chatty,
        train_loop_config={"epochs": 3},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="plain", storage_path=str(tmp_path), verbose=2),
    ).fit()
    err = capfd.readouterr().err
    assert "\x1b" not in err and "\r" not in err  # no control characters in a log
    ours = [line for line in err.splitlines() if line.startswith("[lockstep]")]
    run = tmp_path / "plain"
    assert ours[:2] == [f"[lockstep] run 'plain' in {run}", "[lockstep] starting 2 workers ..."]
    assert re.fullmatch(r"\[lockstep\] 2 workers ready in \d+\.\d s", ours[2])
    assert "[lockstep] iter 3: loss=0.3333 epoch=2" in ours
    finished = next(i for i, line in enumerate(ours) if "] finished in " in line)
    assert re.fullmatch(
        r"\[lockstep\] finished in \d+\.\ds \(the whole fit\(\): starting the workers, "
        r"training, stopping them\): 3 reports, 0 restarts",
        ours[finished],
    )
    # (the categories of 50 ms or more, and training: a forked start may take less)
    assert re.fullmatch(
        r"\[lockstep\] time: goodput \d+%: (starting \S+, )?training .*", ours[finished + 1]
    )
    assert ours[-2:] == [
        f"[lockstep] run directory: {run}",
        f"[lockstep] see it with: lockstep runs show {run}",
    ]


def test_plain_status_line_at_most_every_interval(tmp_path, capfd, monkeypatch):
    monkeypatch.setenv("LOCKSTEP_PROGRESS_INTERVAL_S", "3600")
    DataParallelTrainer(
        chatty,
        train_loop_config={"epochs": 5},
        run_config=RunConfig(name="rare", storage_path=str(tmp_path), progress_total=5),
    ).fit()
    err = capfd.readouterr().err
    status = [line for line in err.splitlines() if " reports/s | " in line]
    assert len(status) == 1  # the first one only: the next is an hour away
    assert re.match(r"\[lockstep\] rare \| iter \d/5 \| ", status[0])
    assert "| attempt 1 (restarts 0) | workers 1/1" in status[0]


SCRIPT = textwrap.dedent("""
    import sys, time
    from lockstep import train
    from lockstep.train import CheckpointConfig, DataParallelTrainer, RunConfig, ScalingConfig

    def train_func():
        for epoch in range(4):
            time.sleep(0.3)
            train.report({"epoch": epoch, "loss": 0.5, "accuracy": 0.25 * epoch})

    DataParallelTrainer(
        train_func,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            name="live-run-with-a-rather-long-name",
            storage_path=sys.argv[1],
            progress_total=4,
            checkpoint_config=CheckpointConfig(checkpoint_score_attribute="accuracy"),
        ),
    ).fit()
""")


def run_in_terminal(tmp_path, columns: int) -> str:
    """Run SCRIPT in a pseudo-terminal ``columns`` wide; return all it wrote."""
    script = tmp_path / "live.py"
    script.write_text(SCRIPT)
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / str(columns))],
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
        close_fds=True,
        env=env,
    )
    os.close(secondary)
    output = b""
    try:
        while True:
            ready, _, _ = select.select([primary], [], [], 30)
            if not ready:
                break
            try:
                chunk = os.read(primary, 4096)
            except OSError:  # the terminal closed: the script exited
                break
            if not chunk:
                break
            output += chunk
    finally:
        proc.wait(timeout=30)
        os.close(primary)
    raw = output.decode("utf-8", "replace")
    assert proc.returncode == 0, raw
    return raw


def visible(raw: str) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw)


def test_live_status_line_on_a_terminal(tmp_path):
    raw = run_in_terminal(tmp_path, columns=250)
    assert "\x1b[2K" in raw  # the line is erased and redrawn in place
    text = visible(raw)
    assert "[lockstep] starting 2 workers ..." in text
    assert re.search(
        r"live-run-with-a-rather-long-name \| iter 2/4 \| \d+\.\ds elapsed, ETA \d+\.\ds \| "
        r"accuracy=0\.25 loss=0\.5 epoch=1 \| \d+\.\d\d reports/s \| goodput \d+% \| "
        r"attempt 1 \(restarts 0\) \| workers 2/2",
        text,
    )
    # the last frame says how the run ended, not "workers 0/2"
    assert re.search(
        r"iter 4/4 \| .* \| accuracy=0\.75 .* \| attempt 1 \(restarts 0\) \| finished", text
    )
    assert "workers 0/2" not in text
    assert re.search(r"\[lockstep\] finished in \d+\.\ds \(the whole fit\(\): .*\): 4 rep", text)
    assert "[lockstep] see it with: lockstep runs show " in text


def test_live_status_line_is_cut_to_the_terminal_width(tmp_path):
    text = visible(run_in_terminal(tmp_path, columns=60))
    status = [s for s in re.split(r"[\r\n]", text) if s.startswith("live-run-with")]
    assert status, text
    assert all(len(s) <= 60 for s in status), status
    assert any(s.endswith("…") for s in status)


def reports_a_tensor():
    import torch

    train.report({"loss": torch.ones(3)})


def test_a_workers_error_shows_the_users_frames_and_names_the_error_file(tmp_path):
    import pytest

    from lockstep.train import TrainingFailedError

    with pytest.raises(TrainingFailedError) as raised:
        DataParallelTrainer(
            reports_a_tensor,
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(name="bad", storage_path=str(tmp_path), verbose=0),
        ).fit()
    message = str(raised.value)
    lines = message.splitlines()
    assert re.fullmatch(
        r"Training failed: rank \d \(pid \d+\) raised UsageError: metric 'loss' is a Tensor.*",
        lines[0],
    )
    traceback = lines[lines.index("Traceback (most recent call last):") :]
    frames = [line for line in traceback if line.strip().startswith("File ")]
    assert frames == [f'  File "{__file__}", line {_line_of("torch.ones(3)")}, in reports_a_tensor']
    assert "The above exception" not in message  # how lockstep came to raise it is left out
    error_file = tmp_path / "bad" / "error.txt"
    assert lines[-1] == f"The full error, every worker's traceback included: {error_file}"
    full = error_file.read_text()
    assert full.startswith(message)
    assert (
        "lockstep/_internal/execution/worker/report_checks.py" in full
    )  # the whole story is kept there
    assert raised.value.root_cause.rank in (0, 1)


def _line_of(text: str) -> int:
    with open(__file__) as source:
        return next(
            i for i, line in enumerate(source, 1) if text in line and "_line_of" not in line
        )
