"""Lint, format, types and import layering run as part of the test suite."""

import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "command",
    [
        ["ruff", "check", "src", "tests", "examples", "benchmarks"],
        ["ruff", "format", "--check", "src", "tests", "examples", "benchmarks"],
        ["lint-imports"],
        ["mypy"],
    ],
    ids=["ruff-check", "ruff-format", "import-layers", "mypy"],
)
def test_tool_passes(command):
    assert shutil.which(command[0]), f"{command[0]} is not installed: pip install -e '.[test]'"
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
