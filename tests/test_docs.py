"""The documentation cannot rot: every README command and every example is run here."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def bash_commands() -> list[str]:
    return [block.strip() for block in blocks("bash") if "\n" not in block.strip()]


def test_ci_runs_the_readme_test_command():
    test_command = next(c for c in bash_commands() if "pytest" in c)
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_command in ci_lines


def test_readme_main_command_installs_and_runs_the_quickstart():
    main_command = bash_commands()[0]
    assert main_command == 'pip install -e ".[demo]" && lockstep demo'
    runs = ROOT / "runs"
    before = set(runs.iterdir()) if runs.exists() else set()
    try:
        done = subprocess.run(
            ["bash", "-c", main_command], cwd=ROOT, capture_output=True, text=True, timeout=900
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Validation accuracy:" in done.stdout
        (made,) = set(runs.iterdir()) - before
        assert (made / "training_curves.png").exists()
        assert (made / "run_state.json").exists()
    finally:
        for path in set(runs.iterdir()) - before if runs.exists() else ():
            shutil.rmtree(path, ignore_errors=True)
        if runs.exists() and not any(runs.iterdir()):
            runs.rmdir()


@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_readme_python_blocks_run(index, tmp_path):
    code = blocks("python")[index]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert re.search(r"\{'[\w-]+': ", done.stdout), done.stdout  # it printed result.metrics


EXAMPLES = {
    "quickstart.py": ["--epochs", "6"],
    "torch_two_layer.py": ["--epochs", "2"],
    "torch_convnet_checkpoint.py": ["--epochs", "2"],
    "torch_linear_regression_data.py": ["--epochs", "3"],
    "legacy_dataset_pipeline.py": ["--epochs", "2"],
    "xgboost_breast_cancer.py": [],
    "tensorflow_quickstart.py": [],
    "horovod_torch.py": ["--epochs", "3"],
}


def test_every_example_is_run_by_a_test():
    assert sorted(p.name for p in (ROOT / "examples").glob("*.py")) == sorted(EXAMPLES)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_runs(name, tmp_path):
    args = [*EXAMPLES[name], "--storage-path", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert done.returncode == 0, done.stdout + done.stderr
