"""Resolving a run's execution plan, once, in numbered steps, before any worker starts.

Every question about where and how the workers run is answered here (Lightning Fabric's
connector is the model): the worker groups take the :class:`ExecutionPlan` and never decide
again. Each step reads the scaling config, the flags and what the machine (or the Ray
cluster) has, and a mistake fails here, at the trainer's construction, with its fix.

1. The executor: inline, local processes or Ray (DESIGN.md's three rules).
2. The options that only matter elsewhere are warned about (Ray's placement, locally).
3. The accelerators: the GPUs the workers need, checked against those there are.
4. The capacity: CPUs for the workers (a warning), and for an elastic run its minimum.
5. The topology: the nodes and their addresses (one machine: loopback; Ray: its placement).
6. The launcher: a thread, the fork server, a fresh process (GPU workers), Ray actors.
7. The transport: a pipe, a socket pair, or TCP on the driver's node address with a key.

The framework's backend config is completed for the plan's devices (gloo or NCCL) by
:meth:`ExecutionPlan.backend_for`, when the trainer knows it.
"""

from __future__ import annotations

import math
import os
import sys
import warnings
from collections.abc import Callable

from lockstep._core import accelerators, flags
from lockstep._core.config import ScalingConfig
from lockstep._internal.execution.plan import (
    LOOPBACK,
    ExecutionPlan,
    Launcher,
    Transport,
    gpus_needed,
)
from lockstep._internal.execution.stack import users_frame
from lockstep._internal.execution.worker_group.base import WorkerGroup

_warned: set[str] = set()


def resolve_plan(scaling: ScalingConfig) -> ExecutionPlan:
    """The execution plan of workers of ``scaling``, checked against what there is here.

    Example:
        >>> plan = resolve_plan(ScalingConfig(num_workers=2))
        >>> plan.executor, plan.transport.value, plan.topology(2).address_of(1)
        ('process', 'socketpair', '127.0.0.1')
    """
    executor = choose_executor(scaling)  # 1
    warn_ray_only_options(scaling, executor)  # 2
    devices = _gpus(scaling, executor)  # 3
    listen_host = _check_capacity(scaling, executor)  # 4
    return ExecutionPlan(
        executor=executor,  # type: ignore[arg-type]
        scaling=scaling,
        accelerator="cuda" if scaling.num_gpus_per_worker > 0 else "cpu",
        devices=(devices,),
        node_addresses=None if executor == "ray" else (LOOPBACK,),  # 5
        launcher=_launcher(scaling, executor),  # 6
        transport=_transport(executor),  # 7
        listen_host=listen_host,
    )


def choose_executor(scaling: ScalingConfig) -> str:
    """``"inline"``, ``"process"`` or ``"ray"`` for this scaling config.

    1. ``num_workers=0`` runs inline; 2. an explicit ``executor`` wins; 3. Ray when it is
    initialised in this process or ``RAY_ADDRESS`` is set; otherwise local processes.
    """
    if scaling.num_workers == 0:
        return "inline"
    if scaling.executor is not None:
        return scaling.executor
    if _ray_initialized() or flags.RAY_ADDRESS.get():
        return "ray"
    return "process"


def warn_ray_only_options(scaling: ScalingConfig, executor: str) -> None:
    """Local processes ignore Ray's placement options; say so once per process."""
    if executor == "ray":
        return
    ignored = []
    if scaling.placement_strategy != "PACK":
        ignored.append(f"placement_strategy={scaling.placement_strategy!r}")
    if scaling.accelerator_type is not None:
        ignored.append(f"accelerator_type={scaling.accelerator_type!r}")
    key = ",".join(ignored)
    if ignored and key not in _warned:
        _warned.add(key)
        warnings.warn(
            f"{', '.join(ignored)} only matters on a Ray cluster; workers run as local "
            "processes here. HINT: set ScalingConfig(executor='ray') to run on Ray",
            stacklevel=users_frame(),
        )


def _gpus(scaling: ScalingConfig, executor: str) -> tuple[str, ...]:
    """Step 3: the GPUs this machine gives its workers (Ray gives its actors their own,
    and checks its cluster in step 4)."""
    if executor == "ray" or scaling.num_gpus_per_worker == 0:
        return ()
    check_gpus(scaling)
    return tuple(accelerators.visible_gpus())


def check_gpus(scaling: ScalingConfig) -> None:
    """Fail when workers need GPUs this machine does not have, or a share that does not
    divide them."""
    per_worker = scaling.num_gpus_per_worker
    if per_worker == 0:
        return
    shares = 1 / per_worker if per_worker < 1 else per_worker
    if not float(shares).is_integer():
        raise ValueError(
            f'resources_per_worker "GPU": {per_worker} cannot split this machine\'s GPUs '
            "evenly. HINT: give each worker 1, 2, ... GPUs, or a share of one: 0.5, 0.25, ..."
        )
    workers = max(1, scaling.min_workers)
    need, have = gpus_needed(workers, per_worker), len(accelerators.visible_gpus())
    if have == 0:
        raise ValueError(
            "use_gpu=True but this machine has no GPU (none is visible: no NVIDIA driver, or "
            "CUDA_VISIBLE_DEVICES is empty); on Ray the workers would wait for one forever. "
            "HINT: set ScalingConfig(use_gpu=False) to train on CPUs"
        )
    if have < need:
        raise ValueError(
            f"use_gpu=True: {workers} worker(s) need {need} GPU(s) but {have} "
            f"{'is' if have == 1 else 'are'} visible here. HINT: set use_gpu=False, use "
            'fewer workers, or share GPUs with resources_per_worker={"GPU": 0.5}'
        )


def _check_capacity(scaling: ScalingConfig, executor: str) -> str:
    """Step 4: whether the workers fit; returns the address the driver listens on for
    workers that connect over TCP (Ray's: its node's address), "" where none do."""
    if executor == "ray":
        from lockstep._internal.execution.worker_group.ray import check_cluster, driver_address

        check_cluster(scaling)
        return driver_address()
    if scaling.elasticity_enabled:
        check_elastic_fits(scaling)
    else:
        _warn_cpu_oversubscription(scaling)
    return ""


def _launcher(scaling: ScalingConfig, executor: str) -> Launcher:
    """Step 6. CUDA cannot be used in a fork of a process that initialised it, and the
    driver may have (``torch.cuda.is_available()`` does): GPU workers start fresh."""
    if executor == "inline":
        return Launcher.THREAD
    if executor == "ray":
        return Launcher.RAY_ACTORS
    if flags.WORKER_START.get() == "fork" and scaling.num_gpus_per_worker == 0:
        return Launcher.FORK_SERVER
    return Launcher.SPAWN


def _transport(executor: str) -> Transport:
    """Step 7: workers on this machine use a pipe or a socket pair, which no other
    process can reach; workers elsewhere (Ray's) connect over TCP, with the run's key."""
    return {"inline": Transport.PIPE, "process": Transport.SOCKET_PAIR}.get(executor, Transport.TCP)


def check_elastic_fits(scaling: ScalingConfig) -> int:
    """How many workers of an elastic run this machine holds (at most ``max_workers``);
    raises when fewer than ``min_workers`` fit: a machine's CPUs do not grow, so waiting
    for them (as on a Ray cluster) would be forever."""
    from lockstep._internal.execution.capacity import count_workers, worker_resources

    nodes = local_capacity(scaling)
    per_worker = worker_resources(scaling)
    fits = count_workers(nodes, per_worker, at_most=scaling.max_workers)
    if fits < scaling.min_workers:
        have = ", ".join(f"{k}: {v:g}" for k, v in nodes[0].items() if k in per_worker)
        raise ValueError(
            f"ScalingConfig(num_workers={scaling.num_workers!r}) needs at least "
            f"{scaling.min_workers} workers of {per_worker}, but this machine holds {fits} "
            f"({have}). HINT: lower min_workers to {max(1, fits)}, ask for fewer resources "
            "per worker, or run on a Ray cluster (executor='ray'), where the run waits "
            "for nodes to join"
        )
    return fits


def _warn_cpu_oversubscription(scaling: ScalingConfig) -> None:
    workers = max(1, scaling.min_workers)
    asked, have = workers * scaling.num_cpus_per_worker, usable_cpus()
    if asked > have:
        warnings.warn(
            f"ScalingConfig asks for {asked:g} CPUs ({workers} workers x "
            f"{scaling.num_cpus_per_worker:g}) but this machine has {have}: the workers will "
            "share CPUs, and every step waits for the slowest. HINT: use fewer workers, or "
            'fewer CPUs each with resources_per_worker={"CPU": ...}',
            stacklevel=users_frame(),
        )


def usable_cpus() -> int:
    """The CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def local_capacity(scaling: ScalingConfig) -> list[dict[str, float]]:
    """This machine, as one node: the CPUs this process may run on and the GPUs it sees.
    Resources other than CPU and GPU are Ray's alone, and do not limit local workers."""
    from lockstep._internal.execution.capacity import worker_resources

    node = {"CPU": float(usable_cpus())}
    if scaling.num_gpus_per_worker > 0:
        node["GPU"] = float(len(accelerators.visible_gpus()))
    for key in worker_resources(scaling):
        node.setdefault(key, math.inf)
    return [node]


def make_worker_group(plan: ExecutionPlan) -> WorkerGroup:
    """The worker group that carries out ``plan``."""
    if plan.launcher is Launcher.THREAD:
        from lockstep._internal.execution.worker_group.inline import InlineWorkerGroup

        return InlineWorkerGroup(plan)
    if plan.launcher in (Launcher.FORK_SERVER, Launcher.SPAWN):
        from lockstep._internal.execution.worker_group.process.group import ProcessWorkerGroup

        return ProcessWorkerGroup(plan)
    assert plan.launcher is Launcher.RAY_ACTORS, plan.launcher
    from lockstep._internal.execution.worker_group.ray import RayWorkerGroup

    return RayWorkerGroup(plan)


def capacity_probe(plan: ExecutionPlan) -> Callable[[WorkerGroup | None], list[dict[str, float]]]:
    """What an elastic run reads its capacity from: this machine, or the Ray cluster
    (where the running group's own resources count as room too)."""
    if plan.executor == "ray":
        from lockstep._internal.execution.worker_group.ray import ray_capacity

        return ray_capacity
    return lambda group: local_capacity(plan.scaling)


def _ray_initialized() -> bool:
    ray = sys.modules.get("ray")
    return bool(ray is not None and getattr(ray, "is_initialized", lambda: False)())


def start_early(plan: ExecutionPlan) -> None:
    """Before the run opens its storage: fork the fork server, when the plan forks workers
    from it. Opening the storage may start a library that a fork cannot copy (pyarrow's S3
    filesystem starts the AWS CRT); a server forked first never holds it."""
    if plan.launcher is Launcher.FORK_SERVER:
        from lockstep._internal.execution.worker_group.process import forkserver

        forkserver.get(max(1, int(plan.num_cpus_per_worker)))
