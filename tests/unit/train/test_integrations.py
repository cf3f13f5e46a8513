"""lockstep.train.integrations: the GBDT trainers under their older name, imported lazily."""

import subprocess
import sys

import pytest


@pytest.mark.processes
def test_importing_lockstep_train_imports_no_gbdt_framework():
    code = (
        "import sys, lockstep.train\n"
        "assert lockstep.train.integrations.__name__ == 'lockstep.train.integrations'\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('xgboost', 'lightgbm')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_trainers_resolve_on_first_use():
    from lockstep.train import integrations
    from lockstep.train.lightgbm import LightGBMTrainer
    from lockstep.train.xgboost import XGBoostTrainer

    assert integrations.XGBoostTrainer is XGBoostTrainer
    assert integrations.LightGBMTrainer is LightGBMTrainer
    assert sorted(dir(integrations)) == ["LightGBMTrainer", "XGBoostTrainer"]
    with pytest.raises(AttributeError, match="no attribute 'TorchTrainer'"):
        integrations.TorchTrainer  # noqa: B018
