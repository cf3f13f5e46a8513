"""Every public module's __all__, snapshotted: adding or removing a public name is a visible diff.

To accept a change: pytest tests/unit/test_public_api.py --update-api-snapshot
"""

import importlib
import pathlib

import pytest

PUBLIC_MODULES = [
    "lockstep",
    "lockstep.air",
    "lockstep.air.checkpoint",
    "lockstep.air.callbacks.mlflow",
    "lockstep.air.callbacks.wandb",
    "lockstep.air.config",
    "lockstep.air.integrations.mlflow",
    "lockstep.air.integrations.wandb",
    "lockstep.air.session",
    "lockstep.cli",
    "lockstep.data",
    "lockstep.data.aggregate",
    "lockstep.data.constants",
    "lockstep.data.context",
    "lockstep.data.datasource",
    "lockstep.data.expressions",
    "lockstep.data.preprocessor",
    "lockstep.data.preprocessors",
    "lockstep.testing",
    "lockstep.train",
    "lockstep.train.backend",
    "lockstep.train.batch_predictor",
    "lockstep.train.callbacks",
    "lockstep.train.callbacks.callback",
    "lockstep.train.collective",
    "lockstep.train.data_parallel_trainer",
    "lockstep.train.huggingface.transformers",
    "lockstep.train.integrations",
    "lockstep.train.lightgbm",
    "lockstep.train.horovod",
    "lockstep.train.lightning",
    "lockstep.train.predictor",
    "lockstep.train.sklearn",
    "lockstep.train.tensorflow",
    "lockstep.train.tensorflow.keras",
    "lockstep.train.torch",
    "lockstep.train.torch.torch_checkpoint",
    "lockstep.train.trainer",
    "lockstep.train.xgboost",
    "lockstep.tune",
    "lockstep.tune.experiment",
    "lockstep.tune.logger",
    "lockstep.tune.schedulers",
    "lockstep.tune.search",
    "lockstep.tune.search.optuna",
    "lockstep.tune.stopper",
    "lockstep.tune.tune_config",
    "lockstep.tune.tuner",
]
SNAPSHOT = pathlib.Path(__file__).with_name("public_api.txt")

# Importing lockstep.train.tensorflow warns when tf.keras was used before in the process, as
# an earlier test of the session may have: the order of the session's tests, not the API.
pytestmark = pytest.mark.filterwarnings("ignore:tf.keras was used before lockstep.train")


def current_api() -> str:
    lines = []
    for name in PUBLIC_MODULES:
        module = importlib.import_module(name)
        lines += [f"{name}.{symbol}" for symbol in sorted(module.__all__)]
    return "\n".join(lines) + "\n"


def test_public_names_match_the_snapshot(request):
    if request.config.getoption("--update-api-snapshot", default=False):
        SNAPSHOT.write_text(current_api())
    assert current_api() == SNAPSHOT.read_text()


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_every_public_name_resolves_and_has_a_docstring(name):
    module = importlib.import_module(name)
    for symbol in module.__all__:
        obj = getattr(module, symbol)
        if callable(obj) or isinstance(obj, type(module)):
            assert obj.__doc__, f"{name}.{symbol} has no docstring"
