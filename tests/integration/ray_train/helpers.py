"""What the ported Ray tests share: Ray's own test helpers (``ray.train.tests.util``,
``dummy_preprocessor``), on lockstep, and the rules of the port."""

from __future__ import annotations

import contextlib
import os
import pickle
import tempfile
import uuid
from collections.abc import Iterator
from typing import Any

from lockstep.data.preprocessor import Preprocessor
from lockstep.train import Checkpoint


@contextlib.contextmanager
def dict_checkpoint(data: dict[str, Any]) -> Iterator[Checkpoint]:
    """Ray's ``create_dict_checkpoint``: ``data`` pickled as ``data.pkl`` in a checkpoint."""
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "data.pkl"), "wb") as f:
            pickle.dump(data, f)
        yield Checkpoint.from_directory(d)


def load_dict(checkpoint: Checkpoint) -> Any:
    """Ray's ``load_dict_checkpoint``."""
    with checkpoint.as_directory() as d, open(os.path.join(d, "data.pkl"), "rb") as f:
        return pickle.load(f)


class FlagPreprocessor(Preprocessor):
    """Ray's ``DummyPreprocessor``: passes batches through, remembers that it ran, and
    compares equal to its copies (by a uuid)."""

    _is_fittable = False

    def __init__(self) -> None:
        self.id = uuid.uuid4()

    def transform_batch(self, batch: Any) -> Any:
        self._batch_transformed = True
        return batch

    def _transform_pandas(self, df: Any) -> Any:
        return df

    @property
    def has_preprocessed(self) -> bool:
        return hasattr(self, "_batch_transformed")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FlagPreprocessor) and self.id == other.id
