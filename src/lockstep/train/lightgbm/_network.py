"""get_network_params: the parameters LightGBM's distributed mode needs in this worker."""

from __future__ import annotations

import warnings
from typing import Any

from lockstep._internal.backends.lightgbm import network_params


def get_network_params() -> dict[str, Any]:
    """This worker's ``machines``, ``local_listen_port`` and ``num_machines``.

    Pass them to ``lightgbm.train`` in a :class:`LightGBMTrainer`'s training function,
    with a distributed ``tree_learner`` (``"data"``) and ``pre_partition=True`` (each
    worker holds its own shard). Empty with a single worker (nothing to connect), and
    outside a LightGBMTrainer's worker (with a warning), as in Ray.

    Example:
        >>> import tempfile
        >>> from lockstep.train import RunConfig, ScalingConfig
        >>> from lockstep.train.lightgbm import LightGBMTrainer
        >>> with tempfile.TemporaryDirectory() as storage:
        ...     params = LightGBMTrainer(lambda: get_network_params(),
        ...         scaling_config=ScalingConfig(num_workers=2),
        ...         run_config=RunConfig(storage_path=storage, verbose=0)).fit().return_value
        >>> sorted(params), params["num_machines"], len(params["machines"].split(","))
        (['local_listen_port', 'machines', 'num_machines'], 2, 2)
    """
    params = network_params()
    if params is None:
        warnings.warn(
            "get_network_params() is meant for a LightGBMTrainer's training function; "
            "outside one there is no network to join, so it returns {}",
            stacklevel=2,
        )
        return {}
    return params
