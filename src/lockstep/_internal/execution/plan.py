"""The execution plan: where each worker runs and with what, decided before any starts.

``resolve.py`` turns the scaling config and the machine (or cluster) into one frozen
:class:`ExecutionPlan`; the worker groups read it and decide nothing again. The plan says:

- the **topology**: the nodes, and on each its ranks (world, local and node rank, local
  world size), contiguous per node;
- the **launcher**: how workers are started (a thread of the driver, forked from the fork
  server, spawned fresh, as Ray actors, or by the processes a cluster's launcher started,
  each starting its share of its node's workers);
- the **transport**: how each worker talks to the driver (a pipe, a socket pair, or TCP to
  the driver's node address with a key of the run's own);
- the **accelerators**: which GPUs each rank gets.

Ray places its actors itself, and a scheduler's processes say where they run when they
join: such a plan's topology is known only then, and :func:`order_by_node` and
:meth:`ExecutionPlan.joined` are the rules that turn their nodes into ranks.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from lockstep._core.config import ScalingConfig
from lockstep._internal.backends.base import BackendConfig
from lockstep._internal.execution.environments.base import Launch

LOOPBACK = "127.0.0.1"


class Launcher(enum.Enum):
    """How the workers of an attempt are started."""

    THREAD = "thread"  # one worker, a thread of the driver (num_workers=0)
    FORK_SERVER = "fork"  # local processes forked from the warm fork server
    SPAWN = "spawn"  # local processes started fresh: ``python -m ...worker.main``
    RAY_ACTORS = "ray"  # one Ray actor per rank, in a placement group
    SCHEDULER = "scheduler"  # each process a scheduler started starts its share of workers


class Transport(enum.Enum):
    """How a worker talks to the driver."""

    PIPE = "pipe"  # a pipe within the driver process
    SOCKET_PAIR = "socketpair"  # a socket pair, its worker's end inherited by the child
    TCP = "tcp"  # a TCP connection to the driver's node address, checked with the run's key


@dataclass(frozen=True, kw_only=True)
class RankPlacement:
    """Where one rank runs, and the GPUs it gets (None: its launcher gives them, as Ray)."""

    world_rank: int
    local_rank: int
    node_rank: int
    local_world_size: int
    gpus: tuple[str, ...] | None = ()
    process_rank: int = 0  # the launched process that starts it (a scheduler's launch)


@dataclass(frozen=True)
class Node:
    """One node of the run: the address its workers use, and its ranks."""

    node_rank: int
    address: str
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class Topology:
    """The nodes of one attempt and every rank's place on them (by world rank).

    Example:
        >>> topology = Topology.of([2, 1], ["10.0.0.1", "10.0.0.2"])
        >>> [(p.world_rank, p.node_rank, p.local_rank, p.local_world_size)
        ...  for p in topology.placements]
        [(0, 0, 0, 2), (1, 0, 1, 2), (2, 1, 0, 1)]
        >>> topology.address_of(2)
        '10.0.0.2'
    """

    nodes: tuple[Node, ...]
    placements: tuple[RankPlacement, ...]

    @classmethod
    def of(
        cls,
        workers_per_node: Sequence[int],
        addresses: Sequence[str],
        gpus: Sequence[Sequence[tuple[str, ...] | None]] | None = None,
        processes: Sequence[Sequence[int]] | None = None,
    ) -> Topology:
        """Ranks contiguous per node, in node order; ``gpus[node][local_rank]`` each
        rank's GPUs (none when not given), ``processes[node][local_rank]`` the launched
        process that starts it."""
        nodes, placements, rank = [], [], 0
        for node_rank, (count, address) in enumerate(zip(workers_per_node, addresses, strict=True)):
            nodes.append(Node(node_rank, address, tuple(range(rank, rank + count))))
            for local in range(count):
                placements.append(
                    RankPlacement(
                        world_rank=rank + local,
                        local_rank=local,
                        node_rank=node_rank,
                        local_world_size=count,
                        gpus=gpus[node_rank][local] if gpus is not None else (),
                        process_rank=processes[node_rank][local] if processes else 0,
                    )
                )
            rank += count
        return cls(tuple(nodes), tuple(placements))

    @property
    def world_size(self) -> int:
        return len(self.placements)

    def address_of(self, rank: int) -> str:
        """The address of the node that runs ``rank``."""
        return self.nodes[self.placements[rank].node_rank].address


@dataclass(frozen=True)
class Member:
    """A launched process that joined the run: its host (processes on one host are one
    node), its node's address as the driver reaches it, and the GPUs it sees."""

    process_rank: int
    host: str
    address: str
    gpus: tuple[str, ...] = ()


def order_by_node(node_of_worker: Sequence[str], first_node: str) -> tuple[list[int], list[str]]:
    """Ranks for workers placed on ``node_of_worker`` (as Ray placed them): contiguous per
    node, nodes in the order their first worker appears but ``first_node`` (the driver's)
    first, so that rank 0 sits with the driver when it can. Returns the worker index of
    each rank, and the nodes in node-rank order.

    Example:
        >>> order_by_node(["b", "a", "b", "c"], first_node="a")
        ([1, 0, 2, 3], ['a', 'b', 'c'])
    """
    nodes = sorted(dict.fromkeys(node_of_worker), key=lambda node: node != first_node)
    order = sorted(range(len(node_of_worker)), key=lambda i: nodes.index(node_of_worker[i]))
    return order, nodes


def gpu_share(devices: Sequence[str], local_rank: int, gpus_per_worker: float) -> tuple[str, ...]:
    """The GPU ids of local worker ``local_rank``: whole GPUs each, or a share of one
    when < 1 (two workers of 0.5 share the first GPU).

    Example:
        >>> [gpu_share(["a", "b"], r, 0.5) for r in range(4)]
        [('a',), ('a',), ('b',), ('b',)]
    """
    if gpus_per_worker <= 0:
        return ()
    if gpus_per_worker < 1:
        per_gpu = int(1 / gpus_per_worker)
        return (devices[local_rank // per_gpu],)
    count = int(gpus_per_worker)
    return tuple(devices[local_rank * count : (local_rank + 1) * count])


def gpus_needed(num_workers: int, gpus_per_worker: float) -> int:
    """How many GPUs ``num_workers`` workers on one node need between them.

    Example:
        >>> gpus_needed(3, 0.5), gpus_needed(2, 2)
        (2, 4)
    """
    if gpus_per_worker <= 0:
        return 0
    if gpus_per_worker < 1:
        per_gpu = int(1 / gpus_per_worker)
        return -(-num_workers // per_gpu)
    return num_workers * int(gpus_per_worker)


@dataclass(frozen=True, kw_only=True)
class ExecutionPlan:
    """Where and how the workers of a run run; see the module's docstring.

    Attributes:
        executor: ``"inline"``, ``"process"``, ``"ray"`` or ``"cluster"`` (processes a
            scheduler or launcher started, on one node or several): the name users see.
        scaling: The scaling config the plan was resolved from.
        launcher: How workers are started.
        transport: How each worker talks to the driver.
        listen_host: The address the driver listens on for TCP workers ("" otherwise).
        accelerator: ``"cuda"`` when workers get GPUs, else ``"cpu"``.
        node_addresses: The nodes' addresses when known before the workers start (one
            machine: loopback); None where the launcher places workers (Ray).
        devices: The GPU ids each node gives its workers (``devices[node]``).
        launch: What launched this process, when a launcher or scheduler did (its job's
            signals, directories and exit statuses apply even to a run of one process).
        workers_per_process: In a cluster run, the workers each launched process starts.
        node_workers: In a cluster run, how each launched process starts its workers:
            forked from its fork server, or fresh.
    """

    executor: Literal["inline", "process", "ray", "cluster"]
    scaling: ScalingConfig
    launcher: Launcher
    transport: Transport
    listen_host: str = ""
    accelerator: Literal["cpu", "cuda"] = "cpu"
    node_addresses: tuple[str, ...] | None = (LOOPBACK,)
    devices: tuple[tuple[str, ...], ...] = ((),)
    launch: Launch | None = None
    workers_per_process: int = 0
    node_workers: Launcher = Launcher.SPAWN

    @property
    def forks_workers(self) -> bool:
        """Whether this process forks its workers from the fork server."""
        return Launcher.FORK_SERVER in (self.launcher, self.node_workers)

    @property
    def uses_gpus(self) -> bool:
        return self.accelerator == "cuda"

    @property
    def num_cpus_per_worker(self) -> float:
        return self.scaling.num_cpus_per_worker

    @property
    def num_gpus_per_worker(self) -> float:
        return self.scaling.num_gpus_per_worker

    def topology(self, num_workers: int) -> Topology:
        """The ranks of an attempt of ``num_workers`` workers on the plan's nodes, each
        with its share of its node's GPUs."""
        assert self.node_addresses is not None, "the launcher places these workers"
        per_node = _spread(num_workers, len(self.node_addresses))
        gpus = [
            [gpu_share(self.devices[node], local, self.num_gpus_per_worker) for local in range(n)]
            for node, n in enumerate(per_node)
        ]
        return Topology.of(per_node, self.node_addresses, gpus)

    def placed(
        self, node_of_worker: Sequence[str], addresses: dict[str, str], first: str
    ) -> tuple[list[int], Topology]:
        """The topology of workers the launcher placed (Ray): the worker index of each
        rank, and the ranks (see :func:`order_by_node`); their GPUs are the launcher's."""
        order, nodes = order_by_node(node_of_worker, first)
        per_node = [sum(1 for n in node_of_worker if n == node) for node in nodes]
        gpus = [[None] * n for n in per_node]
        return order, Topology.of(per_node, [addresses[n] for n in nodes], gpus)

    def joined(self, members: Sequence[Member]) -> Topology:
        """The topology of a cluster run, once its launched processes have joined: nodes
        in the order of their first process (the driver's node first), each process's
        workers contiguous after those of the processes before it on its node.

        A process that sees at least its node's share of GPUs (all of them) gives a
        worker the share of its local rank; one that sees only its own (a scheduler's
        per-task binding) the share of its place among its own workers.
        """
        per_process = self.workers_per_process
        hosts = sorted({m.host for m in members}, key=lambda h: _first_rank(members, h))
        counts, addresses, gpus, processes = [], [], [], []
        for host in hosts:
            here = sorted((m for m in members if m.host == host), key=lambda m: m.process_rank)
            node_need = gpus_needed(per_process * len(here), self.num_gpus_per_worker)
            node_gpus, node_processes = [], []
            for index, member in enumerate(here):
                for i in range(per_process):
                    share = index * per_process + i if len(member.gpus) >= node_need else i
                    node_gpus.append(gpu_share(member.gpus, share, self.num_gpus_per_worker))
                    node_processes.append(member.process_rank)
            counts.append(per_process * len(here))
            addresses.append(here[0].address)
            gpus.append(node_gpus)
            processes.append(node_processes)
        return Topology.of(counts, addresses, gpus, processes)

    def backend_for(self, config: BackendConfig | None) -> BackendConfig:
        """The framework's config completed for the plan's devices (torch: gloo on CPUs,
        NCCL on GPUs); raises when the config needs devices the plan has not."""
        return (config or BackendConfig()).for_devices(self.uses_gpus)


def torchrun_env(placement: RankPlacement, topology: Topology) -> dict[str, str]:
    """The variables torchrun gives a worker of this place, and its GPUs.

    Example:
        >>> topology = Topology.of([2, 2], ["a", "b"])
        >>> env = torchrun_env(topology.placements[3], topology)
        >>> env["RANK"], env["LOCAL_RANK"], env["GROUP_RANK"], env["LOCAL_WORLD_SIZE"]
        ('3', '1', '1', '2')
    """
    world, nodes = str(topology.world_size), str(len(topology.nodes))
    return {
        "RANK": str(placement.world_rank),
        "WORLD_SIZE": world,
        "LOCAL_RANK": str(placement.local_rank),
        "LOCAL_WORLD_SIZE": str(placement.local_world_size),
        "GROUP_RANK": str(placement.node_rank),
        "GROUP_WORLD_SIZE": nodes,
        "ROLE_RANK": str(placement.world_rank),
        "ROLE_WORLD_SIZE": world,
        "ROLE_NAME": "default",
        "NODE_RANK": str(placement.node_rank),
        "CUDA_VISIBLE_DEVICES": ",".join(placement.gpus or ()),
    }


def _first_rank(members: Sequence[Member], host: str) -> int:
    return min(m.process_rank for m in members if m.host == host)


def _spread(num_workers: int, num_nodes: int) -> list[int]:
    """Workers per node: as even as they go, the first nodes taking one more."""
    base, extra = divmod(num_workers, num_nodes)
    return [base + (1 if node < extra else 0) for node in range(num_nodes)]
