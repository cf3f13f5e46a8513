"""lockstep.tune imports Optuna (and every other heavy framework) only when a search uses it."""

from tests.helpers import imported_after

HEAVY = ["torch", "tensorflow", "xgboost", "lightgbm", "ray", "optuna", "sqlalchemy"]


def test_importing_tune_imports_no_heavy_framework():
    modules = imported_after(
        "import lockstep.tune, lockstep.tune.search, lockstep.tune.schedulers, "
        "lockstep.tune.search.optuna, lockstep.tune.stopper"
    )
    assert [m for m in modules if m.split(".")[0] in HEAVY] == []
