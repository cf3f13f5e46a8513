"""What a user sees on the terminal: worker output tagged by rank, and run progress."""

import os
import pty
import re
import select
import subprocess
import sys
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
        run_config=RunConfig(name="plain", storage_path=str(tmp_path), verbose=2),
    ).fit()
    err = capfd.readouterr().err
    ours = [line for line in err.splitlines() if line.startswith("[lockstep]")]
    assert ours[0] == f"[lockstep] run 'plain' in {tmp_path / 'plain'}"
    assert "[lockstep] iter 3: epoch=2 loss=0.3333" in ours
    assert ours[-1].startswith("[lockstep] finished after ")


SCRIPT = textwrap.dedent("""
    import sys, time
    from lockstep import train
    from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig

    def train_func():
        for epoch in range(4):
            time.sleep(0.3)
            train.report({"epoch": epoch, "loss": 0.5})

    DataParallelTrainer(train_func, scaling_config=ScalingConfig(num_workers=2),
                        run_config=RunConfig(name="live", storage_path=sys.argv[1])).fit()
""")


def test_live_status_line_on_a_terminal(tmp_path):
    script = tmp_path / "live.py"
    script.write_text(SCRIPT)
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path)],
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
        close_fds=True,
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
    assert "\x1b[2K" in raw  # the line is erased and redrawn in place
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw)
    assert "live | iter 2 | epoch=1 loss=0.5 | workers 2/2 | restarts 0 |" in text
    assert "live | iter 4 | epoch=3 loss=0.5 |" in text
    assert "[lockstep] finished after" in text
