"""``ray.train.torch.torch_checkpoint``: TorchCheckpoint, as ``lockstep.train.torch`` has it.

Example:
    >>> from lockstep.train.torch.torch_checkpoint import TorchCheckpoint
    >>> from lockstep.train import torch
    >>> TorchCheckpoint is torch.TorchCheckpoint
    True
"""

from lockstep.train.torch._checkpoint import TorchCheckpoint

__all__ = ["TorchCheckpoint"]
