"""lockstep.tune imports Optuna (and every other heavy framework) only when a search uses it."""

import subprocess
import sys

HEAVY = ["torch", "tensorflow", "xgboost", "lightgbm", "ray", "optuna", "sqlalchemy"]


def test_importing_tune_imports_no_heavy_framework():
    code = (
        "import sys\nimport lockstep.tune, lockstep.tune.search, lockstep.tune.schedulers, "
        "lockstep.tune.search.optuna, lockstep.tune.stopper\n"
        "print(' '.join(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert [m for m in out.stdout.split() if m.split(".")[0] in HEAVY] == []
