"""What the framework checkpoints of Ray AIR share: a model file in a new directory."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any, TypeVar

from lockstep._core.checkpoint import Checkpoint

C = TypeVar("C", bound=Checkpoint)


def save_model(
    cls: type[C],
    write: Callable[[str], Any],
    filename: str,
    preprocessor: Any = None,
    path: str | None = None,
) -> C:
    """A checkpoint of class ``cls`` in ``path`` (a new temporary directory by default,
    which the caller owns) holding the model, written by ``write(file_path)``, and the
    preprocessor."""
    target = path if path is not None else tempfile.mkdtemp(prefix="lockstep-ckpt-")
    os.makedirs(target, exist_ok=True)
    write(os.path.join(target, filename))
    checkpoint = cls(target)
    if preprocessor is not None:
        checkpoint.set_preprocessor(preprocessor)
    return checkpoint
