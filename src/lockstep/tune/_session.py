"""What a trainable calls: ``tune.report``, ``tune.get_checkpoint``, ``tune.get_context``.

These are ``lockstep.train``'s session functions under Tune's names: whether the function
is a function trial (run in the trial's thread with a session of its own), a trainer's
worker or an inline run, the same calls reach the session of the place it runs in.
"""

from __future__ import annotations

from typing import Any

from lockstep import train
from lockstep._core.checkpoint import Checkpoint
from lockstep._core.context import TrainContext

TuneContext = TrainContext
"""A trial's context: ``get_trial_id()``, ``get_trial_name()``, ``get_trial_dir()``,
``get_trial_resources()``, besides the ranks (Ray's ``TuneContext``)."""


def report(
    metrics: dict[str, Any] | None = None,
    *,
    checkpoint: Checkpoint | None = None,
    **kwargs: Any,
) -> None:
    """Report a trial's metrics (and optionally a checkpoint) to the Tuner.

    It is ``lockstep.train.report``; the older form ``tune.report(loss=0.1)`` is accepted
    too.

    Example:
        >>> import tempfile
        >>> from lockstep import tune
        >>> def objective(config):
        ...     tune.report({"score": config["x"] ** 2})
        >>> with tempfile.TemporaryDirectory() as d:
        ...     results = tune.Tuner(objective, param_space={"x": tune.grid_search([1, 2])},
        ...         run_config=tune.RunConfig(storage_path=d, verbose=0)).fit()
        >>> sorted(r.metrics["score"] for r in results)
        [1, 4]
    """
    train.report({**(metrics or {}), **kwargs}, checkpoint=checkpoint)


def get_checkpoint() -> Checkpoint | None:
    """The checkpoint the trial resumes from (its own latest, or a PBT donor's), or None.

    Example:
        >>> from lockstep import tune
        >>> def objective(config):
        ...     start = 0 if tune.get_checkpoint() is None else 1
        ...     tune.report({"start": start})
    """
    return train.get_checkpoint()


def get_context() -> TrainContext:
    """The trial's context: ``get_trial_id()``, ``get_trial_name()``, ``get_trial_dir()``.

    Example:
        >>> from lockstep import tune
        >>> def objective(config):
        ...     tune.report({"id": tune.get_context().get_trial_id()})
    """
    return train.get_context()
