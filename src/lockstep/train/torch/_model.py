"""prepare_model, and the mixed-precision helpers of Ray Train V1 (accelerate & co)."""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any, Literal

import torch
from torch import nn

from lockstep.train.torch._devices import get_device
from lockstep.train.torch._world import world_size


class _Amp:
    """Mixed precision, switched on for the whole worker by ``accelerate(amp=True)``."""

    enabled: bool | None = None


def accelerate(amp: bool = False) -> None:
    """Switch mixed precision on for this worker; call before ``prepare_model``.

    With ``amp=True`` the prepared model runs under ``torch.autocast`` (float16 on GPU,
    bfloat16 on CPU), ``prepare_optimizer`` scales the loss on GPU, and ``backward``
    goes through the scaler.

    Example:
        >>> accelerate(amp=False)
    """
    if _Amp.enabled is not None and _Amp.enabled != amp:
        raise RuntimeError(
            "accelerate() was already called in this worker with another setting. "
            "HINT: call accelerate(amp=...) once, at the start of the training function"
        )
    _Amp.enabled = amp


def prepare_model(
    model: nn.Module,
    move_to_device: bool | torch.device = True,
    parallel_strategy: Literal["ddp", "fsdp"] | None = "ddp",
    parallel_strategy_kwargs: dict[str, Any] | None = None,
) -> nn.Module:
    """Move ``model`` to this worker's device and wrap it for data-parallel training.

    Args:
        model: The model.
        move_to_device: True for :func:`get_device`, a device, or False to leave it.
        parallel_strategy: ``"ddp"`` (DistributedDataParallel), ``"fsdp"`` (FSDP2's
            ``torch.distributed.fsdp.fully_shard``, on GPU and CPU alike) or None; only
            applied with more than one worker.
        parallel_strategy_kwargs: Passed to the wrapper, e.g.
            ``{"find_unused_parameters": True}`` for DDP, ``{"reshard_after_forward": False}``
            for ``fully_shard``.

    Example:
        >>> model = prepare_model(torch.nn.Linear(2, 1))  # one worker: not wrapped
        >>> type(model).__name__
        'Linear'
    """
    if parallel_strategy not in ("ddp", "fsdp", None):
        raise ValueError(
            f"unknown parallel_strategy {parallel_strategy!r}. HINT: use 'ddp', 'fsdp' or None"
        )
    device = move_to_device if isinstance(move_to_device, torch.device) else get_device()
    if move_to_device is not False:
        model = model.to(device)
    if _Amp.enabled:
        _forward_under_autocast(model, device.type)
    if world_size() == 1 or parallel_strategy is None:
        return model
    kwargs = dict(parallel_strategy_kwargs or {})
    if parallel_strategy == "fsdp":
        # FSDP2: unlike FullyShardedDataParallel it also runs on CPU (gloo).
        from torch.distributed.fsdp import fully_shard

        fully_shard(model, **kwargs)  # shards in place; the module stays the same object
        return model
    from torch.nn.parallel import DistributedDataParallel

    if device.type == "cuda":
        kwargs.setdefault("device_ids", [device])
    return DistributedDataParallel(model, **kwargs)


# What _forward_under_autocast keeps on the model: its forward before (None: its class's),
# and its class's __getstate__, which the model's own one calls.
_UNWRAPPED_FORWARD = "_lockstep_unwrapped_forward"
_CLASS_GETSTATE = "_lockstep_class_getstate"


def _forward_under_autocast(model: nn.Module, device_type: str) -> None:
    """Run ``model.forward`` under autocast. A pickled model (``torch.save``, a
    ``TorchCheckpoint``) leaves the wrapper out, as Ray's does: a wrapper function cannot
    be pickled, and a model loaded elsewhere runs in full precision unless prepared again."""
    if _UNWRAPPED_FORWARD in model.__dict__:
        return  # prepared before: one autocast is enough
    model.__dict__[_UNWRAPPED_FORWARD] = model.__dict__.get("forward")
    model.__dict__[_CLASS_GETSTATE] = model.__getstate__
    model.forward = _autocast(model.forward, device_type)
    model.__getstate__ = types.MethodType(_state_without_autocast, model)  # type: ignore[method-assign]


def _state_without_autocast(model: nn.Module) -> Any:
    state = model.__dict__[_CLASS_GETSTATE]()
    if not isinstance(state, dict):
        return state
    state = dict(state)  # object.__getstate__ returns __dict__ itself
    for key in ("__getstate__", "forward", _CLASS_GETSTATE, _UNWRAPPED_FORWARD):
        state.pop(key, None)
    if model.__dict__[_UNWRAPPED_FORWARD] is not None:
        state["forward"] = model.__dict__[_UNWRAPPED_FORWARD]
    return state


def _autocast(forward: Callable[..., Any], device_type: str) -> Callable[..., Any]:
    dtype = torch.float16 if device_type == "cuda" else torch.bfloat16

    @functools.wraps(forward)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device_type=device_type, dtype=dtype):
            out = forward(*args, **kwargs)
        # Callers compute losses in full precision, as without autocast.
        return out.float() if isinstance(out, torch.Tensor) and out.is_floating_point() else out

    return wrapped


class _Optimizer(torch.optim.Optimizer):
    """An optimizer whose ``step`` goes through the gradient scaler."""

    def __init__(self, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler) -> None:
        self.__dict__["_optimizer"] = optimizer
        self.__dict__["scaler"] = scaler

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_optimizer"], name)

    def step(self, closure: Callable[[], float] | None = None) -> None:  # type: ignore[override]
        self.scaler.step(self._optimizer, closure)
        self.scaler.update()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._optimizer.zero_grad(set_to_none=set_to_none)


_scaler: torch.amp.GradScaler | None = None


def prepare_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """Wrap ``optimizer`` for mixed precision: its ``step`` unscales gradients first.

    Example:
        >>> model = torch.nn.Linear(2, 1)
        >>> opt = prepare_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
        >>> backward(model(torch.ones(1, 2)).sum()); opt.step()
    """
    global _scaler
    device_type = get_device().type
    # Loss scaling guards float16 gradients; bfloat16 on CPU does not need it.
    _scaler = torch.amp.GradScaler(
        device_type, enabled=bool(_Amp.enabled) and device_type == "cuda"
    )
    return _Optimizer(optimizer, _scaler)


def backward(tensor: torch.Tensor) -> None:
    """``tensor.backward()``, through the gradient scaler when mixed precision is on."""
    scaled = _scaler.scale(tensor) if _scaler is not None else tensor
    scaled.backward()  # type: ignore[no-untyped-call]
