"""Every rank's return value, for tests that check what each worker saw."""

from __future__ import annotations

from typing import Any

from lockstep.train import DataParallelTrainer


def fit_all_ranks(trainer: DataParallelTrainer) -> list[Any]:
    """Fit ``trainer`` and return what the training function returned on every rank, in
    rank order (``Result.return_value`` is rank 0's alone).

    Raises what ``trainer.fit()`` raises.

    Example:
        >>> import tempfile
        >>> from lockstep import train
        >>> from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig
        >>> with tempfile.TemporaryDirectory() as storage:
        ...     fit_all_ranks(DataParallelTrainer(
        ...         lambda: train.get_context().get_world_rank() * 10,
        ...         scaling_config=ScalingConfig(num_workers=2),
        ...         run_config=RunConfig(storage_path=storage, verbose=0)))
        [0, 10]
    """
    controller = trainer._controller()
    controller.run()
    return controller.return_values()
