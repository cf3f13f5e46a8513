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


def test_tunes_import_contract_names_every_private_module_of_lockstep_train():
    """An import-linter wildcard replaces whole names only: the contract lists lockstep.train's
    private modules one by one, so a new one must join the list."""
    import pkgutil

    import tomllib

    import lockstep.train

    with open(ROOT / "pyproject.toml", "rb") as f:
        contracts = tomllib.load(f)["tool"]["importlinter"]["contracts"]
    (tune,) = [c for c in contracts if c.get("source_modules") == ["lockstep.tune"]]
    private = {
        f"lockstep.train.{m.name}"
        for m in pkgutil.iter_modules(lockstep.train.__path__)
        if m.name.startswith("_")
    }
    assert private and private <= set(tune["forbidden_modules"])
