"""What a worker knows about its place in the run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar


class Collective(Protocol):
    """Collective operations across the workers of one run, relayed through the driver.

    Meant for small control data (addresses, ports, flags), not tensors.
    """

    def barrier(self) -> None: ...

    def broadcast_from_rank_zero(self, data: Any) -> Any: ...

    def all_gather(self, data: Any) -> list[Any]: ...


_C = TypeVar("_C", bound="TrainContext")


@dataclass(frozen=True, kw_only=True)
class TrainContext:
    """Ranks and run information, returned by ``lockstep.train.get_context()``.

    Example:
        >>> ctx = TrainContext(world_rank=1, world_size=2, local_rank=1, local_world_size=2,
        ...                    node_rank=0, experiment_name="exp")
        >>> ctx.get_world_rank(), ctx.get_world_size()
        (1, 2)
    """

    world_rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    experiment_name: str
    run_path: str = ""
    node_ip: str = "127.0.0.1"
    metadata: dict[str, Any] = field(default_factory=dict)
    # A Tune trial's identity; empty in a run that is no trial.
    trial_id: str = ""
    trial_name: str = ""
    trial_resources: dict[str, float] | None = None
    # Set by the worker's session; a context outside a worker has no datasets.
    dataset_shards: Callable[[str | None], Any] | None = field(
        default=None, repr=False, compare=False
    )

    @classmethod
    def single_worker(cls: type[_C], **fields: Any) -> _C:
        """The context of a run's only worker (rank 0 of 1, on node 0), with ``fields``.

        Example:
            >>> ctx = TrainContext.single_worker(experiment_name="exp")
            >>> ctx.get_world_rank(), ctx.get_world_size(), ctx.get_local_world_size()
            (0, 1, 1)
        """
        return cls(
            world_rank=0, world_size=1, local_rank=0, local_world_size=1, node_rank=0, **fields
        )

    def get_world_rank(self) -> int:
        """This worker's rank among all workers, 0 to world size - 1."""
        return self.world_rank

    def get_world_size(self) -> int:
        """The number of workers."""
        return self.world_size

    def get_local_rank(self) -> int:
        """This worker's rank among the workers on its node."""
        return self.local_rank

    def get_local_world_size(self) -> int:
        """The number of workers on this worker's node."""
        return self.local_world_size

    def get_node_rank(self) -> int:
        """The rank of this worker's node among the nodes of the run."""
        return self.node_rank

    def get_experiment_name(self) -> str:
        """``RunConfig.name`` of the run."""
        return self.experiment_name

    def get_trial_name(self) -> str:
        """The Tune trial's name; in a run that is no trial, the run's name (Ray Train's
        older name for it)."""
        return self.trial_name or self.experiment_name

    def get_trial_id(self) -> str:
        """The Tune trial's id, unique in the experiment; empty in a run that is no trial.

        Example:
            >>> TrainContext.single_worker(experiment_name="exp", trial_id="a_00001",
            ...                            trial_name="objective_a_00001").get_trial_id()
            'a_00001'
        """
        return self.trial_id

    def get_trial_resources(self) -> dict[str, float]:
        """The CPUs and GPUs the Tune trial was given; empty in a run that is no trial."""
        return dict(self.trial_resources or {})

    def get_trial_dir(self) -> str:
        """The run directory, as a path or URL."""
        return self.run_path

    def get_metadata(self) -> dict[str, Any]:
        """The ``metadata`` given to the trainer."""
        return dict(self.metadata)

    def get_dataset_shard(self, dataset_name: str | None = None) -> Any:
        """This worker's part of a dataset, as ``lockstep.train.get_dataset_shard``."""
        if self.dataset_shards is None:
            raise RuntimeError(
                "get_dataset_shard() needs a training function's context. HINT: call "
                "train.get_context().get_dataset_shard(name) inside the training function"
            )
        return self.dataset_shards(dataset_name)
