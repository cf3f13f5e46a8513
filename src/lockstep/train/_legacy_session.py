"""The session functions of Ray Train 1.x (``train.world_rank()``, ``train.save_checkpoint``),
which older material calls in functions run by ``Trainer(backend=...)``."""

from __future__ import annotations

import posixpath
import re
import shutil
from typing import Any

from lockstep._core.checkpoint import Checkpoint
from lockstep.train._session import _require, get_checkpoint, get_context, report

_NUMBERED = re.compile(r"checkpoint_(\d{6})")


def world_rank() -> int:
    """This worker's rank among all workers (Ray 1.x; now ``get_context().get_world_rank()``).

    Example:
        >>> import tempfile
        >>> from lockstep.train import Trainer
        >>> with tempfile.TemporaryDirectory() as logdir:
        ...     trainer = Trainer(backend="torch", num_workers=2, logdir=logdir)
        ...     trainer.start()
        ...     ranks = trainer.run(lambda: (world_rank(), local_rank(), world_size()))
        ...     trainer.shutdown()
        >>> ranks
        [(0, 0, 2), (1, 1, 2)]
    """
    return get_context().get_world_rank()


def local_rank() -> int:
    """This worker's rank on its node (Ray 1.x; now ``get_context().get_local_rank()``)."""
    return get_context().get_local_rank()


def world_size() -> int:
    """The number of workers (Ray 1.x; now ``get_context().get_world_size()``)."""
    return get_context().get_world_size()


def save_checkpoint(**state: Any) -> None:
    """Save ``state`` (any picklable values) as a checkpoint, as Ray 1.x did.

    Every worker calls it at the same points (it is a report without metrics); rank 0's
    state is kept. ``load_checkpoint()`` returns it, in this run or one resumed from it.

    Example:
        >>> import tempfile
        >>> from lockstep.train import Trainer
        >>> def train_func():
        ...     start = (load_checkpoint() or {"epoch": -1})["epoch"] + 1
        ...     for epoch in range(start, 2):
        ...         save_checkpoint(epoch=epoch)
        ...     return load_checkpoint()
        >>> with tempfile.TemporaryDirectory() as logdir:
        ...     trainer = Trainer(backend="torch", num_workers=2, logdir=logdir)
        ...     trainer.start()
        ...     states = trainer.run(train_func)
        ...     trainer.shutdown()
        >>> states
        [{'epoch': 1}, {'epoch': 1}]
    """
    # Ray 1.x ranked checkpoints by a value of the saved state (CheckpointStrategy's
    # checkpoint_score_attribute): the report carries it as the metric it is ranked by.
    attribute = getattr(_require("save_checkpoint()"), "score_attribute", None)
    metrics = {attribute: state[attribute]} if attribute in state else {}
    checkpoint = Checkpoint.from_dict(state)
    try:
        report(metrics, checkpoint=checkpoint, checkpoint_dir_name=_next_dir_name())
    finally:
        shutil.rmtree(checkpoint.path, ignore_errors=True)


def _next_dir_name() -> str:
    """``checkpoint_000001``, ``checkpoint_000002``, ...: Ray 1.x numbered a run's saved
    checkpoints from 1, continuing after the one the run resumed from."""
    latest = get_checkpoint()
    match = _NUMBERED.fullmatch(posixpath.basename(latest.path)) if latest is not None else None
    return f"checkpoint_{int(match.group(1)) + 1 if match else 1:06d}"


def load_checkpoint() -> dict[str, Any] | None:
    """The state of the latest ``save_checkpoint()``, or None (Ray 1.x)."""
    checkpoint = get_checkpoint()
    return None if checkpoint is None else checkpoint.to_dict()
