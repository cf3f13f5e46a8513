import math

import numpy as np
import pytest

from lockstep._core.errors import UsageError
from lockstep._internal.execution.worker.report_checks import (
    check_reserved,
    check_score,
    clean_metrics,
)


def test_plain_and_numpy_values():
    cleaned = clean_metrics({"loss": np.float32(0.5), "n": np.int64(3), "nested": {"a": [1, 2]}})
    assert cleaned == {"loss": 0.5, "n": 3, "nested": {"a": [1, 2]}}
    assert type(cleaned["n"]) is int


def test_single_numbers_of_array_libraries_become_python_numbers():
    import torch

    cleaned = clean_metrics(
        {
            "t": torch.tensor(0.25),
            "ti": torch.tensor(3),
            "a1": np.array([1.5]),
            "a0": np.array(2.0),
        }
    )
    assert cleaned == {"t": 0.25, "ti": 3, "a1": 1.5, "a0": 2.0}
    assert type(cleaned["ti"]) is int
    with pytest.raises(UsageError, match=r"metric 'w' is a Tensor.*HINT"):
        clean_metrics({"w": torch.zeros(2)})


def test_a_tensor_with_dimensions_is_refused_whatever_its_size():
    """As Ray refuses tensors in metrics (a state dict reported by mistake): a 0-d tensor,
    a loss, is a number; a one-element weight is data."""
    import torch

    state = torch.nn.Linear(1, 1).state_dict()  # weight (1, 1), bias (1,)
    with pytest.raises(UsageError, match=r"metric 'weight' is a Tensor.*tensor with dimensions"):
        clean_metrics(state)
    with pytest.raises(UsageError, match="tensor with dimensions"):
        clean_metrics({"nested": {"t": torch.tensor([3])}})


def test_nan_is_a_number():
    assert math.isnan(clean_metrics({"loss": float("nan")})["loss"])


def test_not_serialisable_names_the_key():
    with pytest.raises(UsageError, match=r"metric 'weights' is a ndarray.*HINT"):
        clean_metrics({"loss": 1.0, "weights": np.zeros(3)})
    with pytest.raises(UsageError, match="metric 'obj' is a object"):
        clean_metrics({"obj": object()})


def test_not_a_dict():
    with pytest.raises(UsageError, match="takes a dict of metrics, got list"):
        clean_metrics([1, 2])


def test_reserved_names():
    with pytest.raises(UsageError, match="'training_iteration' is reserved"):
        check_reserved({"training_iteration": 3})


def test_score_attribute():
    check_score({"loss": 1.0}, "loss")
    check_score({}, None)
    with pytest.raises(UsageError, match=r"'acc' is missing .*\['loss'\]"):
        check_score({"loss": 1.0}, "acc")
    with pytest.raises(UsageError, match="must be a number"):
        check_score({"acc": "high"}, "acc")
