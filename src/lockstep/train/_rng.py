"""save_rng_state and load_rng_state: the random generators' state, kept with a checkpoint.

A run resumed from a checkpoint is the same run only if what it draws after the resume
(dropout masks, augmentations, noise) is what it would have drawn: the global generators
of Python's ``random``, NumPy's ``np.random`` and torch (CPU and every CUDA device) must
continue from where they were when the checkpoint was saved, on every rank. Seeding again
at each start does not do that: it replays the draws of the first epoch.

The state is JSON (no pickle: loading it runs no code), one file per rank, so that a
checkpoint directory merged from every rank holds them all, and two runs that drew the
same numbers save the same bytes.
"""

from __future__ import annotations

import base64
import json
import os
import random
import sys
from typing import Any

from lockstep._internal.execution.worker import session

RNG_STATE_DIR = "rng_state"


def save_rng_state(directory: str | os.PathLike[str], rank: int | None = None) -> str:
    """Save this worker's random generators' state into a checkpoint directory.

    Writes ``<directory>/rng_state/rank_<rank>.json`` with the state of Python's
    ``random``, NumPy's global ``np.random`` and, when torch is imported, torch's CPU
    generator and every initialised CUDA device's. Call it on every rank, in the
    directory you pass to ``train.report(checkpoint=...)``, and :func:`load_rng_state`
    after resuming: the run then draws the same numbers as a run never interrupted.
    Generators you create yourself (``np.random.default_rng()``, ``torch.Generator()``)
    are yours to save.

    Args:
        directory: The checkpoint directory being written.
        rank: Whose state this is; by default this worker's world rank (0 outside a
            training function).

    Returns:
        The path of the file written.

    Example:
        >>> import random, tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     path = save_rng_state(d)
        ...     first = random.random()
        ...     restored = load_rng_state(d)
        ...     (os.path.relpath(path, d), restored, random.random() == first)
        ('rng_state/rank_0.json', True, True)
    """
    path = _path(directory, rank)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(capture(), f, sort_keys=True)
    return path


def load_rng_state(directory: str | os.PathLike[str], rank: int | None = None) -> bool:
    """Restore this worker's random generators from a checkpoint :func:`save_rng_state`
    wrote into; call it after everything that draws at start-up (building the model, the
    optimizer, the data loaders), just before training continues.

    Args:
        directory: The checkpoint's directory, e.g. from ``checkpoint.as_directory()``.
        rank: Whose state to restore; by default this worker's world rank.

    Returns:
        Whether a state was restored: False when the checkpoint holds none for this rank
        (it was saved without one, or by fewer workers), leaving the generators as they are.

    Example:
        >>> import tempfile
        >>> import numpy as np
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = save_rng_state(d, rank=3)
        ...     expected = np.random.rand(2)
        ...     restored = load_rng_state(d, rank=3)
        ...     missing = load_rng_state(d, rank=4)
        ...     (restored, missing, bool((np.random.rand(2) == expected).all()))
        (True, False, True)
    """
    path = _path(directory, rank)
    if not os.path.exists(path):
        return False
    with open(path, encoding="utf-8") as f:
        restore(json.load(f))
    return True


def capture() -> dict[str, Any]:
    """The state of the global generators, as JSON-ready values."""
    import numpy as np

    version, words, gauss = random.getstate()
    numpy_state = np.random.get_state(legacy=False)
    state: dict[str, Any] = {
        "python": {"version": version, "state": list(words), "gauss_next": gauss},
        "numpy": {
            "bit_generator": numpy_state["bit_generator"],
            "key": numpy_state["state"]["key"].tolist(),
            "pos": int(numpy_state["state"]["pos"]),
            "has_gauss": int(numpy_state["has_gauss"]),
            "gauss": float(numpy_state["gauss"]),
        },
    }
    torch = sys.modules.get("torch")  # a run that never imported torch draws nothing from it
    if torch is not None:
        state["torch"] = {
            "cpu": _encode(torch.get_rng_state()),
            "cuda": [_encode(s) for s in torch.cuda.get_rng_state_all()]
            if torch.cuda.is_initialized()
            else [],
        }
    return state


def restore(state: dict[str, Any]) -> None:
    """Set the global generators to ``state`` (from :func:`capture`)."""
    import numpy as np

    python = state["python"]
    random.setstate((python["version"], tuple(python["state"]), python["gauss_next"]))
    saved = state["numpy"]
    np.random.set_state(
        {
            "bit_generator": saved["bit_generator"],
            "state": {"key": np.array(saved["key"], dtype=np.uint32), "pos": saved["pos"]},
            "has_gauss": saved["has_gauss"],
            "gauss": saved["gauss"],
        }
    )
    if "torch" in state:
        import torch

        torch.set_rng_state(_decode(torch, state["torch"]["cpu"]))
        devices = state["torch"]["cuda"]
        if devices and torch.cuda.is_available():
            # as many as this machine has: a restart on fewer GPUs restores the first ones
            count = min(len(devices), torch.cuda.device_count())
            for index in range(count):
                torch.cuda.set_rng_state(_decode(torch, devices[index]), index)


def _path(directory: str | os.PathLike[str], rank: int | None) -> str:
    if rank is None:
        current = session.current()
        rank = current.context.get_world_rank() if current is not None else 0
    return os.path.join(os.fspath(directory), RNG_STATE_DIR, f"rank_{rank}.json")


def _encode(tensor: Any) -> str:
    return base64.b64encode(tensor.numpy().tobytes()).decode("ascii")


def _decode(torch: Any, text: str) -> Any:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8)
