"""PyTorch on lockstep: TorchTrainer and the helpers a training function calls.

The same names as ``ray.train.torch``.
"""

from lockstep._internal.backends.torch import TorchConfig
from lockstep.train.torch._checkpoint import TorchCheckpoint, TorchPredictor
from lockstep.train.torch._data import enable_reproducibility, prepare_data_loader
from lockstep.train.torch._devices import get_device, get_devices
from lockstep.train.torch._model import accelerate, backward, prepare_model, prepare_optimizer
from lockstep.train.torch._profiler import TorchWorkerProfiler
from lockstep.train.torch._trainer import TorchTrainer

__all__ = [
    "TorchCheckpoint",
    "TorchConfig",
    "TorchPredictor",
    "TorchTrainer",
    "TorchWorkerProfiler",
    "accelerate",
    "backward",
    "enable_reproducibility",
    "get_device",
    "get_devices",
    "prepare_data_loader",
    "prepare_model",
    "prepare_optimizer",
]
