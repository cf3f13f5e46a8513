"""Checks on what a worker reports, made in the worker so that errors point at the caller."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from lockstep._core.errors import UsageError
from lockstep._core.storage import RESULT_AUTO_KEYS


def clean_metrics(metrics: object) -> dict[str, Any]:
    """Return ``metrics`` as plain JSON data, or raise UsageError naming the bad entry.

    Single numbers held by an array library (numpy scalars, 0-d or one-element arrays, 0-d
    tensors such as a loss) become Python numbers; anything else that JSON cannot hold is
    an error. A torch tensor with dimensions is an error even with one element (a weight,
    a state dict's entry), as Ray refuses tensors in metrics.
    """
    if type(metrics) is dict and all(
        type(k) is str and type(v) in _PLAIN for k, v in metrics.items()
    ):
        return dict(metrics)  # what the JSON round trip below would give, sooner
    if not isinstance(metrics, Mapping):
        raise UsageError(
            f"report() takes a dict of metrics, got {type(metrics).__name__}. "
            'HINT: train.report({"loss": loss})'
        )
    try:
        return dict(json.loads(json.dumps(metrics, default=_numpy_scalar)))
    except (TypeError, ValueError):
        pass
    for key, value in metrics.items():
        _check_entry(key, value)
    raise AssertionError("unreachable: json.dumps failed but every entry passed")


_PLAIN = frozenset({float, int, str, bool, type(None)})  # JSON keeps these as they are


def check_reserved(metrics: Mapping[str, Any]) -> None:
    for key in RESULT_AUTO_KEYS:
        if key in metrics:
            raise UsageError(
                f"metric name {key!r} is reserved: lockstep adds it to every line of "
                "result.json. HINT: report it under another name"
            )


def check_score(metrics: Mapping[str, Any], attribute: str | None) -> None:
    """A reported checkpoint must carry the score attribute it will be ranked by."""
    if attribute is None:
        return
    if attribute not in metrics:
        raise UsageError(
            f"checkpoint_score_attribute {attribute!r} is missing from the metrics reported "
            f"with this checkpoint (got {sorted(metrics)}). HINT: report {attribute!r} with "
            "every checkpoint, or change CheckpointConfig(checkpoint_score_attribute=...)"
        )
    score = metrics[attribute]
    # NaN is a number here: a diverging loss ranks its checkpoint last, as in Ray.
    if isinstance(score, bool) or not isinstance(score, int | float):
        raise UsageError(
            f"checkpoint_score_attribute {attribute!r} must be a number, got {score!r}"
        )


_ARRAY_LIBRARIES = ("numpy", "torch", "jax", "jaxlib", "tensorflow")


def _numpy_scalar(value: Any) -> Any:
    # np.float32(1.0), torch.tensor(0.5), np.array([3]): one unambiguous number each, so
    # accept them as Python numbers (.item()); bigger arrays still fail with a hint.
    if _is_torch_tensor_with_dimensions(value):
        raise TypeError(type(value).__name__)
    if type(value).__module__.split(".")[0] in _ARRAY_LIBRARIES:
        size = value.numel() if hasattr(value, "numel") else getattr(value, "size", None)
        if size == 1:
            number = value.numpy() if not hasattr(value, "item") else value
            return number.item()
    raise TypeError(type(value).__name__)


def _check_entry(key: object, value: Any) -> None:
    if not isinstance(key, str):
        raise UsageError(f"metric names must be strings, got {key!r}")
    try:
        json.dumps(value, default=_numpy_scalar)
    except (TypeError, ValueError) as exc:
        hint = (
            "report a Python number, e.g. loss.item()"
            if hasattr(value, "item")
            else "report numbers, strings, lists or dicts"
        )
        if _holds_tensor_with_dimensions(value):
            hint = (
                "a tensor with dimensions is data, not a metric, whatever its size (Ray "
                "refuses tensors in metrics too): report loss.item(), and save weights in "
                "the checkpoint"
            )
        raise UsageError(
            f"metric {key!r} is a {type(value).__name__}, which is not JSON-serialisable. "
            f"HINT: {hint}"
        ) from exc


def _is_torch_tensor_with_dimensions(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and getattr(value, "ndim", 0) > 0


def _holds_tensor_with_dimensions(value: Any) -> bool:
    if isinstance(value, Mapping):
        return any(_holds_tensor_with_dimensions(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_holds_tensor_with_dimensions(v) for v in value)
    return _is_torch_tensor_with_dimensions(value)
