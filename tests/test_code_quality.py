"""Lint, format, types and import layering run as part of the test suite."""

import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "command",
    [
        ["ruff", "check", "--no-cache", "src", "tests", "examples", "benchmarks"],
        ["ruff", "format", "--no-cache", "--check", "src", "tests", "examples", "benchmarks"],
        ["lint-imports", "--no-cache"],
        ["mypy", "--cache-dir", "{tmp}"],
    ],
    ids=["ruff-check", "ruff-format", "import-layers", "mypy"],
)
@pytest.mark.timeout(600)  # mypy, cold, checks every module of lockstep and its stubs
def test_tool_passes(command, tmp_path):
    # No tool's cache goes into the checkout: the suite writes nothing into the working tree.
    command = [part.replace("{tmp}", str(tmp_path)) for part in command]
    assert shutil.which(command[0]), f"{command[0]} is not installed: pip install -e '.[test]'"
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
