"""``ray.air.session``: the session functions of Ray AIR, on lockstep's session."""

from lockstep.air._session import (
    get_checkpoint,
    get_dataset_shard,
    get_experiment_name,
    get_local_rank,
    get_local_world_size,
    get_node_rank,
    get_trial_dir,
    get_world_rank,
    get_world_size,
    report,
)
from lockstep.train._session import heartbeat

__all__ = [
    "get_checkpoint",
    "get_dataset_shard",
    "get_experiment_name",
    "get_local_rank",
    "get_local_world_size",
    "get_node_rank",
    "get_trial_dir",
    "get_world_rank",
    "get_world_size",
    "heartbeat",
    "report",
]
