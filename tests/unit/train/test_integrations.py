"""lockstep.train.integrations: the GBDT trainers under their older name, imported lazily."""

import pytest

from tests.helpers import imported_after


@pytest.mark.processes
def test_importing_lockstep_train_imports_no_gbdt_framework():
    modules = imported_after(
        "import lockstep.train\n"
        "assert lockstep.train.integrations.__name__ == 'lockstep.train.integrations'"
    )
    assert [m for m in modules if m.split(".")[0] in ("xgboost", "lightgbm")] == []


def test_the_trainers_resolve_on_first_use():
    from lockstep.train import integrations
    from lockstep.train.lightgbm import LightGBMTrainer
    from lockstep.train.xgboost import XGBoostTrainer

    assert integrations.XGBoostTrainer is XGBoostTrainer
    assert integrations.LightGBMTrainer is LightGBMTrainer
    assert sorted(dir(integrations)) == ["LightGBMTrainer", "XGBoostTrainer"]
    with pytest.raises(AttributeError, match="no attribute 'TorchTrainer'"):
        integrations.TorchTrainer  # noqa: B018
