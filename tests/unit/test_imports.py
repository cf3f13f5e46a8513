"""import lockstep, lockstep.train (and lockstep.data) import no heavy framework."""

import pytest

from tests.helpers import imported_after

pytestmark = pytest.mark.processes  # each test imports in a fresh interpreter

HEAVY = ["torch", "tensorflow", "xgboost", "lightgbm", "ray", "optuna"]


def test_public_packages_import_no_heavy_framework():
    modules = imported_after(
        "import lockstep, lockstep.train, lockstep.testing, lockstep.data, "
        "lockstep.data.preprocessors, lockstep.train.callbacks, lockstep.tune.logger, "
        "lockstep.air.integrations.mlflow, lockstep.air.integrations.wandb"
    )
    assert [m for m in modules if m.split(".")[0] in HEAVY] == []


def test_a_worker_imports_no_storage_or_dataframe_library_at_start():
    # fsspec, pyarrow and pandas cost a worker 60-300 ms; they load only when used
    modules = imported_after("import lockstep._internal.execution.worker.main")
    assert [m for m in modules if m.split(".")[0] in {"fsspec", "pyarrow", "pandas", *HEAVY}] == []


def test_the_demo_command_says_its_first_line_before_any_heavy_import():
    # lockstep.train alone takes most of a second under load; torch seconds
    modules = imported_after("import lockstep.cli._main, lockstep.cli._demo_command")
    assert [m for m in modules if m.split(".")[0] in HEAVY or m == "lockstep.train"] == []


def test_a_run_without_datasets_leaves_the_data_libraries_unloaded(tmp_path):
    # lockstep.data brings pyarrow: a third of a second of a script's start, and a worker
    # forked from such a driver holds pyarrow's threads
    modules = imported_after(
        "from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig\n"
        "DataParallelTrainer(lambda: None, scaling_config=ScalingConfig(num_workers=2),\n"
        f"    run_config=RunConfig(storage_path={str(tmp_path)!r}, verbose=0)).fit()"
    )
    assert "lockstep.train._trainer" in modules
    assert [m for m in modules if m.split(".")[0] in {"pyarrow", "pandas"}] == []
    assert "lockstep.data" not in modules
