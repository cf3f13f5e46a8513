"""The documentation cannot rot: every README command and every example is run here."""

from __future__ import annotations

import os
import pathlib
import re
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
    # the one command installs what the multi-node tests run on, before the tests
    assert test_command.index("bash scripts/install-schedulers.sh") < test_command.index("pytest")


def test_extras_give_ranges_and_fresh_machine_commands_name_the_installed_torch():
    import tomllib
    import torch

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [r for reqs in project["optional-dependencies"].values() for r in reqs]
    assert [r for r in requirements + project["dependencies"] if "==" in r] == []
    exact = f"torch=={torch.__version__.split('+')[0]}"
    installs = [c for c in bash_commands() if c.startswith("pip install")]
    assert installs and all(c.startswith(f"pip install {exact} -e ") for c in installs)
    assert f"pip install {exact} -e " in (ROOT / ".ci" / "run").read_text()


def test_readme_main_command_installs_and_runs_the_quickstart(tmp_path):
    main_command = bash_commands()[0]
    assert main_command == 'pip install torch==2.13.0 -e ".[demo]" && lockstep demo'
    # The default storage place, moved by its environment variable into this test's directory.
    done = subprocess.run(
        ["bash", "-c", main_command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "LOCKSTEP_STORAGE_PATH": str(tmp_path)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Validation accuracy:" in done.stdout
    (made,) = tmp_path.iterdir()
    assert f"Run directory: {made}" in done.stdout
    assert (made / "training_curves.png").exists()
    assert (made / "run_state.json").exists()


@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_readme_python_blocks_run(index, tmp_path):
    code = blocks("python")[index]
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "LOCKSTEP_STORAGE_PATH": str(tmp_path / "results")},
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
    "tune_objective_search_space.py": [],
    "tune_xgboost_breast_cancer.py": [],
    "tracking_mlflow_tensorboard.py": [],
    "tensorflow_quickstart.py": [],
    "horovod_torch.py": ["--epochs", "3"],
    "cluster_train.py": ["--epochs", "3"],
}


# What an example must print, where its run proves more than its exit status.
PRINTS = {
    # the material's StopperCallback interrupts fit() from on_step_begin; restore finishes
    "tune_xgboost_breast_cancer.py": "Failing after 1 finished trial(s).; restoring",
}


def test_every_example_is_run_by_a_test():
    assert sorted(p.name for p in (ROOT / "examples").glob("*.py")) == sorted(EXAMPLES)


EXTRAS = {
    "quickstart.py": "",
    "torch_two_layer.py": "[torch]",
    "torch_convnet_checkpoint.py": "[demo]",
    "torch_linear_regression_data.py": "[torch]",
    "legacy_dataset_pipeline.py": "[torch]",
    "xgboost_breast_cancer.py": "[xgboost,sklearn]",
    "tune_objective_search_space.py": "[tune]",
    "tune_xgboost_breast_cancer.py": "[tune,xgboost,sklearn]",
    "tracking_mlflow_tensorboard.py": "[tracking]",
    "tensorflow_quickstart.py": "[tensorflow]",
    "horovod_torch.py": "[torch]",
    "cluster_train.py": "[torch]",
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_runs_as_its_header_says_into_the_default_storage(name, tmp_path):
    header = (ROOT / "examples" / name).read_text().split('"""')[1]
    install = f'pip install -e ".{EXTRAS[name]}"' if EXTRAS[name] else "pip install -e ."
    assert f"    {install}" in header
    assert f"    python examples/{name}" in header
    assert f"| `examples/{name}` |" in README and f"| `{install}` |" in README
    # As written: run from the repository's root, no --storage-path, so the default place
    # (moved into this test's directory by its environment variable) is used.
    results = tmp_path / "lockstep_results"
    done = subprocess.run(
        [sys.executable, f"examples/{name}", *EXAMPLES[name]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "LOCKSTEP_STORAGE_PATH": str(results)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert PRINTS.get(name, "") in done.stdout
    runs = sorted(p for p in results.iterdir() if p.is_dir())
    assert runs, "the example wrote no run into the default storage place"
    assert f"[lockstep] run directory: {runs[-1]}" in done.stderr
