"""The GBDT trainers under the name older Ray material uses (``ray.train.integrations``).

Imported on first use, so that ``import lockstep.train`` imports neither xgboost nor
LightGBM.

Example:
    >>> from lockstep.train import integrations
    >>> integrations.XGBoostTrainer.__module__
    'lockstep.train.xgboost._trainer'
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "LightGBMTrainer": "lockstep.train.lightgbm",
    "XGBoostTrainer": "lockstep.train.xgboost",
}

__all__ = ["LightGBMTrainer", "XGBoostTrainer"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)


def __dir__() -> list[str]:
    return sorted(__all__)
