"""RayWorkerGroup: one Ray actor per rank, in a placement group, on a Ray cluster.

Each actor runs the same worker code as a local process and talks to the driver the same
way, over a TCP connection it opens to the driver (authenticated with a key only this run
knows). Only the WorkerStart travels through Ray, as the actor call's argument, so that Ray
objects in it (``ray.data`` iterators) are passed the way Ray passes them.

The driver listens on its node's address (the one Ray reports), not on every interface,
and only until every worker has connected. A connection that fails the key check is
dropped and logged; the run goes on.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import time
import warnings
from dataclasses import dataclass, replace
from multiprocessing.connection import (
    Client,
    Connection,
)
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from lockstep._core import flags
from lockstep._core.config import ScalingConfig
from lockstep._core.errors import WorkerFailure
from lockstep._core.preemption import PreemptionInfo
from lockstep._internal.execution.capacity import (
    CapacityChanged,
    NodeResources,
    count_workers,
    worker_resources,
)
from lockstep._internal.execution.messages import Stop, WorkerStart
from lockstep._internal.execution.plan import ExecutionPlan, Topology
from lockstep._internal.execution.stack import users_frame
from lockstep._internal.execution.worker_group.base import (
    ConnectedWorkerGroup,
    WorkerGroupSpec,
    lost_connection,
)
from lockstep._internal.execution.worker_group.listener import Listener

# How long to wait for the cluster to fit the workers, and for them to connect back.
_PLACEMENT_TIMEOUT_S = 120.0
_CONNECT_TIMEOUT_S = 120.0
# How often an elastic run, while its workers are placed, checks that they still fit.
_ELASTIC_CHECK_S = 2.0
# How often the group asks Ray's GCS which nodes are draining (as Ray Train's own
# preemption watcher does): one small RPC, off the report path.
_DRAIN_POLL_S = 1.0

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeInfo:
    node_id: str
    ip: str
    pid: int


class _RayWorker:
    """The actor: reports where it runs, then runs one worker over a connection."""

    def node_info(self) -> NodeInfo:
        return NodeInfo(
            ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address(), os.getpid()
        )

    def run(
        self, address: tuple[str, int], authkey: bytes, start: WorkerStart, env: dict[str, str]
    ) -> int:
        from lockstep._internal.execution.worker import main as worker_main
        from lockstep._internal.execution.worker import stopping

        os.environ.update(env)
        conn = Client(address, authkey=authkey)
        conn.send(start.context.world_rank)
        # Stopping a worker (a Stop over the connection, then SIGTERM) unwinds its code.
        previous = stopping.install()
        try:
            return worker_main.run_worker(conn, in_process=False, start=start, read_inline=False)
        except worker_main.WorkerStopped:
            return 128 + signal.SIGTERM
        finally:
            signal.signal(signal.SIGTERM, previous)
            conn.close()


def connect() -> None:
    """Join the Ray cluster (``RAY_ADDRESS``) or start a local one, unless connected."""
    if not ray.is_initialized():
        ray.init(log_to_driver=True)


def driver_address() -> str:
    """The address of the driver's Ray node: where its workers reach it."""
    connect()
    return str(ray.util.get_node_ip_address())


def bundle(scaling: ScalingConfig) -> dict[str, float]:
    """One worker's resources, as a placement-group bundle."""
    return worker_resources(scaling)


def ray_capacity(group: object = None) -> list[NodeResources]:
    """Each live Ray node's available resources, plus what ``group`` (a running
    RayWorkerGroup) holds on it: the room the run would have if it started again."""
    connect()
    alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
    held = group.held_resources() if isinstance(group, RayWorkerGroup) else {}
    nodes = []
    for node_id, available in _available_per_node().items():
        if node_id not in alive:
            continue
        node = {k: float(v) for k, v in available.items()}
        for key, amount in held.get(node_id, {}).items():
            node[key] = node.get(key, 0.0) + amount
        nodes.append(node)
    return nodes


def _available_per_node() -> dict[str, dict[str, float]]:
    """What each node has free now, by node id (Ray's own per-node view of the GCS)."""
    from ray._private import state

    return dict(state.available_resources_per_node())


def check_cluster(scaling: ScalingConfig) -> None:
    """Before any worker starts: fail when the workers need GPUs and the cluster has none
    (Ray would wait forever); warn when they ask for more than the cluster has now (an
    autoscaler may add nodes; otherwise placing them times out)."""
    connect()
    total = ray.cluster_resources()
    need = bundle(scaling)
    workers = max(1, scaling.min_workers)
    if need.get("GPU", 0) > 0 and total.get("GPU", 0) == 0:
        raise ValueError(
            f"use_gpu=True but the Ray cluster has no GPU ({workers} workers of {need} "
            "asked); Ray would wait for one forever. HINT: set ScalingConfig(use_gpu=False), "
            "or add GPU nodes to the cluster"
        )
    short = {
        k: (v * workers, total.get(k, 0.0))
        for k, v in need.items()
        if v * workers > total.get(k, 0.0)
    }
    if short:
        detail = ", ".join(
            f"{k}: {want:g} asked, {have:g} in the cluster"
            for k, (want, have) in sorted(short.items())
        )
        # an elastic run waits for its min_workers as long as it takes, as Ray's does
        wait = (
            "the run waits until they fit"
            if scaling.elasticity_enabled
            else f"they wait up to {_PLACEMENT_TIMEOUT_S:.0f} s for it to grow"
        )
        warnings.warn(
            f"the Ray cluster cannot hold {workers} workers of {need} now ({detail}); "
            f"{wait}. HINT: ask for fewer workers or resources, or add nodes to the cluster",
            stacklevel=users_frame(),
        )


class RayWorkerGroup(ConnectedWorkerGroup):
    """Runs each rank in a Ray actor, placed by ``ScalingConfig``."""

    def __init__(self, plan: ExecutionPlan) -> None:
        super().__init__(plan)
        self._scaling = plan.scaling
        self._pg: PlacementGroup | None = None
        self._actors: dict[int, Any] = {}
        self._refs: dict[int, Any] = {}
        self._info: dict[int, NodeInfo] = {}
        self._listener: Listener | None = None
        self._drain_checked = 0.0
        self._drain_seen = False

    def preemption_notice(self) -> PreemptionInfo | None:
        """A node hosting workers is draining (a spot reclaim, a scale-down, ``ray
        drain-node``): which ranks it holds, and its deadline. Returned once per group."""
        now = time.monotonic()
        if self._drain_seen or not self._info or now - self._drain_checked < _DRAIN_POLL_S:
            return None
        self._drain_checked = now
        try:
            draining: dict[str, int] = ray._private.state.state.get_draining_nodes()
        except Exception as exc:  # a GCS hiccup: ask again at the next poll
            logger.debug("could not ask Ray which nodes drain: %s", exc)
            return None
        ranks: dict[str, list[int]] = {}
        for rank, info in sorted(self._info.items()):
            if info.node_id in draining:
                ranks.setdefault(info.node_id, []).append(rank)
        if not ranks:
            return None
        self._drain_seen = True
        deadlines = [draining[node] for node in ranks if draining[node] > 0]  # 0: none given
        return PreemptionInfo(
            deadline_ms=min(deadlines) if deadlines else None,
            preempted_node_to_ranks=ranks,
            reason="node drained",
        )

    def _place(self, spec: WorkerGroupSpec) -> Topology:
        """Place one actor per worker; their ranks follow where Ray put them."""
        connect()
        n = spec.num_workers
        self._pg = placement_group(
            [bundle(self._scaling)] * n, strategy=self._scaling.placement_strategy
        )
        self._wait_for_placement(n)
        actor_class = ray.remote(_RayWorker)
        actors: list[Any] = [
            actor_class.options(
                num_cpus=self._scaling.num_cpus_per_worker,
                num_gpus=self._scaling.num_gpus_per_worker,
                resources={
                    k: v for k, v in bundle(self._scaling).items() if k not in ("CPU", "GPU")
                },
                scheduling_strategy=PlacementGroupSchedulingStrategy(self._pg, i),
            ).remote()
            for i in range(n)
        ]
        infos = ray.get([a.node_info.remote() for a in actors])
        order, topology = self._plan.placed(
            [i.node_id for i in infos],
            {i.node_id: i.ip for i in infos},
            first=ray.get_runtime_context().get_node_id(),
        )
        self._actors = {rank: actors[i] for rank, i in enumerate(order)}
        self._info = {rank: infos[i] for rank, i in enumerate(order)}
        return topology

    def _wait_for_placement(self, n: int) -> None:
        """Wait until the cluster holds the placement group. An elastic run waits in
        short slices and gives up as soon as fewer than ``n`` workers fit (a node left
        after the size was decided): it then decides the size again."""
        assert self._pg is not None
        elastic = self._scaling.elasticity_enabled
        deadline = time.monotonic() + _PLACEMENT_TIMEOUT_S
        while (left := deadline - time.monotonic()) > 0:
            try:
                ray.get(self._pg.ready(), timeout=min(left, _ELASTIC_CHECK_S) if elastic else left)
                return
            except ray.exceptions.GetTimeoutError:
                pass
            if elastic:
                self._check_still_fits(n)
        raise RuntimeError(
            f"the Ray cluster did not fit {n} workers of {bundle(self._scaling)} "
            f"({self._scaling.placement_strategy}) within {_PLACEMENT_TIMEOUT_S:.0f} s"
        )

    def _check_still_fits(self, n: int) -> None:
        assert self._pg is not None
        fits = count_workers(ray_capacity(), bundle(self._scaling), at_most=n)
        if fits < n:
            remove_placement_group(self._pg)
            self._pg = None
            raise CapacityChanged(f"the Ray cluster now holds {fits} of the {n} workers")

    def held_resources(self) -> dict[str, dict[str, float]]:
        """The resources this group's workers hold, by node id (none once stopped)."""
        held: dict[str, dict[str, float]] = {}
        for info in self._info.values():
            node = held.setdefault(info.node_id, {})
            for key, amount in bundle(self._scaling).items():
                node[key] = node.get(key, 0.0) + amount
        return held

    def _launch(
        self, spec: WorkerGroupSpec, starts: dict[int, WorkerStart]
    ) -> dict[int, Connection]:
        # Where the workers reach the driver; every other interface stays closed.
        self._listener = Listener(self._plan.listen_host, secrets.token_bytes(32))
        address = self._listener.address
        logger.debug("waiting for %d workers to connect to %s:%d", len(starts), *address)
        for rank, actor in self._actors.items():
            start = starts[rank]
            env = {"OMP_NUM_THREADS": str(max(1, int(self._plan.num_cpus_per_worker)))}
            env.update(spec.backend.worker_env(start.context))
            self._refs[rank] = actor.run.remote(address, self._listener.key, start, env)
        try:
            return self._listener.accept(
                len(starts), timeout=_CONNECT_TIMEOUT_S, check=self._raise_if_dead
            )
        except TimeoutError:
            raise RuntimeError("Ray workers did not connect to the driver") from None
        finally:
            self._close_server()  # nothing listens once every worker is in

    def _close_server(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def _raise_if_dead(self, connected: dict[int, Connection]) -> None:
        waiting = [ref for rank, ref in self._refs.items() if rank not in connected]
        finished, _ = ray.wait(waiting, timeout=0, num_returns=len(waiting))
        for ref in finished:
            ray.get(ref)  # raises the actor's error

    def _lost(self, rank: int) -> WorkerFailure:
        info = self._info[rank]
        who = f"rank {rank} (pid {info.pid}) on node {info.ip}"
        ready, _ = ray.wait([self._refs[rank]], timeout=10.0)
        if not ready:
            return replace(lost_connection(rank, info.pid), summary=f"{who} lost its connection")
        try:
            code = ray.get(ready[0])
        except ray.exceptions.RayError as exc:
            reason = str(exc).strip().splitlines()[0]
            return WorkerFailure(
                rank=rank,
                pid=info.pid,
                kind="lost",
                summary=f"{who} died: {reason}",
            )
        kind, summary = WorkerFailure.describe_exit(rank, info.pid, code)
        return WorkerFailure(
            rank=rank,
            pid=info.pid,
            kind=kind,
            summary=f"{summary} on node {info.ip}",
            exit_code=code,
        )

    def _worker_pids(self) -> dict[int, int]:
        # the actors on this machine: a signal reaches them, and their stack files are here
        here = self._plan.listen_host
        return {rank: info.pid for rank, info in self._info.items() if info.ip == here}

    def _stop_workers(self, finished: frozenset[int]) -> None:
        grace = flags.WORKER_SHUTDOWN_GRACE_S.get()
        running = [ref for rank, ref in self._refs.items() if rank not in finished]
        self._send_running(Stop())
        if running:
            ray.wait(running, timeout=grace, num_returns=len(running))
        for actor in self._actors.values():
            ray.kill(actor)
        if self._pg is not None:
            remove_placement_group(self._pg)
            self._pg = None
        self._close_server()
        self._actors, self._refs, self._info = {}, {}, {}
