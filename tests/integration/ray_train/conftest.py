"""The ported Ray tests make AIR dict checkpoints (``Checkpoint.from_dict``) as Ray's tests
wrote them; their directories are the caller's (here the test's) to remove."""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def remove_dict_checkpoints() -> Iterator[None]:
    pattern = os.path.join(tempfile.gettempdir(), "lockstep-ckpt-*")
    before = set(glob.glob(pattern))
    yield
    for path in set(glob.glob(pattern)) - before:
        shutil.rmtree(path, ignore_errors=True)
