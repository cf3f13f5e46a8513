"""The torch helpers in a plain, single-process script (one worker, nothing to wrap)."""

import torch
from torch.utils.data import DataLoader, TensorDataset

from lockstep.train.torch import get_device, get_devices, prepare_data_loader, prepare_model


def test_one_worker_leaves_model_and_loader_unsplit():
    model = torch.nn.Linear(3, 1)
    assert prepare_model(model) is model
    loader = prepare_data_loader(DataLoader(TensorDataset(torch.arange(5.0)), batch_size=2))
    assert [b[0].tolist() for b in loader] == [[0.0, 1.0], [2.0, 3.0], [4.0]]
    assert len(loader) == 3 and loader.batch_size == 2


def test_devices_without_gpus():
    assert get_devices() == [torch.device("cpu")] and get_device() == torch.device("cpu")


def test_nested_batches_are_moved():
    data = [{"x": torch.ones(2), "pair": (torch.zeros(1), "label")}]
    loader = prepare_data_loader(DataLoader(data, batch_size=None))
    (batch,) = list(loader)
    assert batch["pair"][1] == "label" and batch["x"].device == get_device()


def test_unknown_strategy():
    import pytest

    with pytest.raises(ValueError, match="unknown parallel_strategy 'zero'"):
        prepare_model(torch.nn.Linear(1, 1), parallel_strategy="zero")
