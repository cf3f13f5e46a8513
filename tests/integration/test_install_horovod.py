"""scripts/install-horovod.sh says what it does: each stage as it starts, and the build log's
path before the minutes of compiling; Ctrl-C during the build leaves nothing running."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys

import psutil
import pytest

pytestmark = [pytest.mark.processes, pytest.mark.slow]

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "install-horovod.sh"


def test_the_build_says_its_stages_and_its_log_before_compiling(tmp_path):
    cache = tmp_path / "cache"
    script = subprocess.Popen(
        ["bash", str(SCRIPT)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: Ctrl-C reaches the whole build
        env={
            **os.environ,
            "PYTHON": sys.executable,
            "HOROVOD_REBUILD": "1",  # build, however it is installed here
            "HOROVOD_WHEEL_CACHE": str(cache),
        },
    )
    assert script.stdout is not None
    said = []
    for line in script.stdout:
        if line.startswith("install-horovod: "):
            said.append(line.rstrip("\n").removeprefix("install-horovod: "))
        if "the compiler's output: " in line:
            break
    group = psutil.Process(script.pid).children(recursive=True)
    os.killpg(script.pid, signal.SIGINT)  # Ctrl-C at a terminal
    rest, _ = script.communicate(timeout=120)
    assert said[0] == f"horovod 0.28.1 for {sys.executable}: looking at what is installed"
    assert said[1] == "[1/4] downloading the horovod 0.28.1 source"
    assert said[2] == "[2/4] installing the build requirements"
    assert said[3].startswith("[3/4] compiling Horovod's C++ ops for PyTorch")
    assert said[3].endswith(": 5 min on 2 free cores, 10 or more when they are busy")
    log = pathlib.Path(said[4].removeprefix("      the compiler's output: "))
    assert log.parent.parent == cache and log.name in ("build.log", "build-tf.log")
    assert log.exists()
    assert script.returncode == 130, rest
    assert "install-horovod: interrupted; nothing was installed" in rest
    _, alive = psutil.wait_procs(group, timeout=30)
    assert alive == []
