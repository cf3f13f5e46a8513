"""What the framework checkpoints of Ray AIR share: a model file in a new directory."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from lockstep._core.checkpoint import Checkpoint

C = TypeVar("C", bound=Checkpoint)
B = TypeVar("B", bound="BoosterCheckpoint")
F = TypeVar("F", bound="FrameworkCheckpoint")


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


class FrameworkCheckpoint(Checkpoint):
    """What every framework's checkpoint class shares: reading any checkpoint as one."""

    @classmethod
    def from_checkpoint(cls: type[F], other: Checkpoint) -> F:
        """``other`` (``result.checkpoint``, say) as this class, to call its ``get_model``.

        Example:
            >>> from lockstep.train.lightgbm import LightGBMCheckpoint
            >>> type(LightGBMCheckpoint.from_checkpoint(Checkpoint("/tmp/c"))).__name__
            'LightGBMCheckpoint'
        """
        checkpoint = cls(other.path, other.filesystem if not other.is_local else None)
        checkpoint._data = other._data
        return checkpoint


class BoosterCheckpoint(FrameworkCheckpoint):
    """What the XGBoost and LightGBM checkpoints share: a booster saved as the report
    callback saves it, so either reads the other's checkpoints.

    A subclass names its report callback class (``_report_callback``) and the booster's file
    name (``MODEL_FILENAME``, the callback's ``CHECKPOINT_NAME``).
    """

    MODEL_FILENAME: ClassVar[str]
    _report_callback: ClassVar[Any]

    @classmethod
    def from_model(
        cls: type[B], booster: Any, *, preprocessor: Any = None, path: str | None = None
    ) -> B:
        """A checkpoint of ``booster`` in ``path`` (by default a new temporary directory,
        which the caller owns)."""
        return save_model(cls, booster.save_model, cls.MODEL_FILENAME, preprocessor, path)

    def get_model(self) -> Any:
        """The booster saved in this checkpoint."""
        return self._report_callback.get_model(self, self.MODEL_FILENAME)
