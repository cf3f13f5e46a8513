"""scripts/gpu-check.sh, as a later run on a GPU machine starts it, here in its dry run: the
same steps on the CPU (every GPU test skips where there is no GPU, the benchmark runs tiny),
and the table it prints last."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_gpu_check_runs_every_gpu_test_and_the_benchmark_and_prints_a_table(tmp_path):
    env = {**os.environ, "GPU_CHECK_DRY": "1", "OUT": str(tmp_path), "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", "scripts/gpu-check.sh"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    table = done.stdout[done.stdout.index("GPU check (DRY RUN, no GPU): ") :].splitlines()
    source = (ROOT / "tests" / "integration" / "test_gpu.py").read_text()
    tests = re.findall(r"^def (test_\w+)", source, re.MULTILINE)
    rows = [line.split() for line in table if line.startswith("test_gpu.py::")]
    assert {row[0].split("::")[1].split("[")[0] for row in rows} == set(tests)
    expected = "passed" if torch.cuda.is_available() else "skipped"
    assert {row[1] for row in rows} == {expected}
    bench = next(i for i, line in enumerate(table) if line.startswith("benchmark gpu_ddp.py on "))
    assert re.match(
        r"  samples/s: lockstep [\d,]+, plain torch.distributed [\d,]+, ratio ", table[bench + 1]
    )
    assert table[bench + 2].startswith("  to the first report: lockstep ")
    assert re.match(r"\d+ passed, 0 failed, \d+ skipped; OK in \d+ s; files in ", table[-1])
    assert (tmp_path / "bench.json").exists() and (tmp_path / "gpu-tests.log").exists()
