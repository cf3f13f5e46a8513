"""Choosing where workers run: DESIGN.md's three rules, in order."""

from __future__ import annotations

import math
import os
import sys
import warnings
from collections.abc import Callable

from lockstep._core import flags
from lockstep._core.config import ScalingConfig
from lockstep._internal.execution.stack import users_frame
from lockstep._internal.execution.worker_group.base import WorkerGroup
from lockstep._internal.execution.worker_group.process import gpus

_warned: set[str] = set()


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
            stacklevel=3,
        )


def check_local_resources(scaling: ScalingConfig, executor: str) -> None:
    """Before any worker starts: warn when the workers ask for more CPUs than this machine
    has, and fail when they need GPUs it does not have."""
    if executor == "ray":
        return
    _check_gpus(scaling)
    if scaling.elasticity_enabled:
        check_elastic_fits(scaling)
    else:
        _warn_cpu_oversubscription(scaling)


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


def _check_gpus(scaling: ScalingConfig) -> None:
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
    need, have = gpus.needed(workers, per_worker), len(gpus.visible_gpus())
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


def make_worker_group(executor: str, scaling: ScalingConfig) -> WorkerGroup:
    if executor == "inline":
        from lockstep._internal.execution.worker_group.inline import InlineWorkerGroup

        return InlineWorkerGroup()
    if executor == "process":
        from lockstep._internal.execution.worker_group.process.group import ProcessWorkerGroup

        return ProcessWorkerGroup()
    assert executor == "ray", executor
    from lockstep._internal.execution.worker_group.ray import RayWorkerGroup

    return RayWorkerGroup(scaling)


def capacity_probe(
    executor: str, scaling: ScalingConfig
) -> Callable[[WorkerGroup | None], list[dict[str, float]]]:
    """What an elastic run reads its capacity from: this machine, or the Ray cluster
    (where the running group's own resources count as room too)."""
    if executor == "ray":
        from lockstep._internal.execution.worker_group.ray import ray_capacity

        return ray_capacity
    return lambda group: local_capacity(scaling)


def local_capacity(scaling: ScalingConfig) -> list[dict[str, float]]:
    """This machine, as one node: the CPUs this process may run on and the GPUs it sees.
    Resources other than CPU and GPU are Ray's alone, and do not limit local workers."""
    from lockstep._internal.execution.capacity import worker_resources

    node = {"CPU": float(usable_cpus())}
    if scaling.num_gpus_per_worker > 0:
        node["GPU"] = float(len(gpus.visible_gpus()))
    for key in worker_resources(scaling):
        node.setdefault(key, math.inf)
    return [node]


def prepare_executor(scaling: ScalingConfig, executor: str) -> None:
    """Check, at construction, that the chosen executor can run these workers."""
    if executor == "ray":
        from lockstep._internal.execution.worker_group.ray import check_cluster

        check_cluster(scaling)
    else:
        check_local_resources(scaling, executor)


def _ray_initialized() -> bool:
    ray = sys.modules.get("ray")
    return bool(ray is not None and getattr(ray, "is_initialized", lambda: False)())


def start_early(executor: str, scaling: ScalingConfig) -> None:
    """Before the run opens its storage: start what local workers are forked from."""
    if executor == "process":
        from lockstep._internal.execution.worker_group.process.group import start_fork_server

        start_fork_server(scaling.num_gpus_per_worker, scaling.num_cpus_per_worker)
