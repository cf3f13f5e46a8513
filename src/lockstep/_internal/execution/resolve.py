"""Resolving a run's execution plan, once, in numbered steps, before any worker starts.

Every question about where and how the workers run is answered here (Lightning Fabric's
connector is the model): the worker groups take the :class:`ExecutionPlan` and never decide
again. Each step reads the scaling config, the flags and what the machine (or the Ray
cluster) has, and a mistake fails here, at the trainer's construction, with its fix.

0. What launched this process: torchrun, MPI, SLURM, Kubeflow, SageMaker, or nothing
   (``environments/detect.py``; ``LOCKSTEP_CLUSTER`` overrides it or turns it off).
1. The executor: a launch of several processes is one cluster run; otherwise inline,
   local processes or Ray (DESIGN.md's three rules).
2. The options that only matter elsewhere are warned about (Ray's placement, locally).
3. The accelerators: the GPUs the workers need, checked against those there are.
4. The capacity: CPUs for the workers (a warning), for an elastic run its minimum, and for
   a cluster run whether the workers fit the allocation (each process starting as many).
5. The topology: the nodes and their addresses (one machine: loopback; Ray: its placement;
   a cluster: the launched processes, once they join).
6. The launcher: a thread, the fork server, a fresh process (GPU workers), Ray actors, or
   the processes the scheduler started.
7. The transport: a pipe, a socket pair, or TCP on the driver's node address with a key.

The framework's backend config is completed for the plan's devices (gloo or NCCL) by
:meth:`ExecutionPlan.backend_for`, when the trainer knows it.
"""

from __future__ import annotations

import dataclasses
import math
import socket
import sys
import warnings
from collections.abc import Callable, Mapping

from lockstep._core import accelerators, flags
from lockstep._core.config import ScalingConfig
from lockstep._internal.execution.capacity import usable_cpus
from lockstep._internal.execution.environments import sagemaker
from lockstep._internal.execution.environments.base import Launch
from lockstep._internal.execution.environments.detect import detect
from lockstep._internal.execution.plan import (
    LOOPBACK,
    ExecutionPlan,
    Launcher,
    Transport,
    gpus_needed,
)
from lockstep._internal.execution.stack import users_frame
from lockstep._internal.execution.worker_group.base import WorkerGroup
from lockstep._internal.execution.worker_group.cluster.driver import DriverSession

_warned: set[str] = set()


def resolve_plan(scaling: ScalingConfig, env: Mapping[str, str] | None = None) -> ExecutionPlan:
    """The execution plan of workers of ``scaling``, checked against what there is here;
    ``env``: the launcher's variables (this process's environment by default).

    Example:
        >>> plan = resolve_plan(ScalingConfig(num_workers=2), env={})
        >>> plan.executor, plan.transport.value, plan.topology(2).address_of(1)
        ('process', 'socketpair', '127.0.0.1')
    """
    launch = detect_launch(flags.launch_environment() if env is None else env)  # 0
    executor = choose_executor(scaling, launch)  # 1
    warn_ray_only_options(scaling, executor)  # 2
    if executor == "cluster":
        assert launch is not None
        return _cluster_plan(scaling, launch)
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
        launch=launch,
    )


def is_cluster_member() -> bool:
    """Whether this process is one a launcher started beside the driver's (it only joins)."""
    launch = detect_launch(flags.launch_environment())
    return launch is not None and launch.num_processes > 1 and not launch.is_driver


def default_storage_path(launch: Launch | None) -> str:
    """Where runs go without ``RunConfig(storage_path=...)``: SageMaker's checkpoint
    directory in a SageMaker job (kept in S3 across jobs), else the flag's default."""
    if launch is not None and launch.name == "sagemaker":
        return sagemaker.checkpoint_dir(flags.launch_environment())
    return flags.DEFAULT_STORAGE_PATH.get()


def detect_launch(env: Mapping[str, str]) -> Launch | None:
    """Step 0: what launched this process, as ``LOCKSTEP_CLUSTER`` allows."""
    return detect(env, choice=flags.CLUSTER.get(), ignore=flags.CLUSTER_IGNORE.get())


def choose_executor(scaling: ScalingConfig, launch: Launch | None = None) -> str:
    """``"inline"``, ``"process"``, ``"ray"`` or ``"cluster"`` for this scaling config.

    0. A launcher that started several processes makes them one cluster run; 1.
    ``num_workers=0`` runs inline; 2. an explicit ``executor`` wins; 3. Ray when it is
    initialised in this process or ``RAY_ADDRESS`` is set; otherwise local processes.
    """
    if launch is not None and launch.num_processes > 1:
        _check_cluster_executor(scaling, launch)
        return "cluster"
    if scaling.num_workers == 0:
        return "inline"
    if scaling.executor is not None:
        return scaling.executor
    if _ray_initialized() or flags.RAY_ADDRESS.get():
        return "ray"
    return "process"


def _check_cluster_executor(scaling: ScalingConfig, launch: Launch) -> None:
    """Every launched process runs this script: each running a run of its own would
    write the same run directory."""
    asked = (
        f"executor={scaling.executor!r}"
        if scaling.executor is not None
        else "num_workers=0"
        if scaling.num_workers == 0
        else None
    )
    if asked is not None:
        raise ValueError(
            f"ScalingConfig({asked}) runs on one machine, but this process is one of the "
            f"{launch.num_processes} that {launch.launcher} started, which are one run "
            "across them. HINT: leave executor unset and give num_workers, or set "
            "LOCKSTEP_CLUSTER=off and start one process"
        )


def _cluster_plan(scaling: ScalingConfig, launch: Launch) -> ExecutionPlan:
    """Steps 3 to 7 for the processes a launcher started: each starts as many workers.
    An elastic run's size is the one this launch gives (torchrun's rendezvous)."""
    per_process = workers_per_process(scaling, launch)  # 4
    if scaling.elasticity_enabled:
        scaling = dataclasses.replace(scaling, num_workers=per_process * launch.num_processes)
    devices = _cluster_gpus(scaling, launch, per_process)  # 3
    _warn_node_cpus(scaling, launch, per_process)  # 4
    return ExecutionPlan(
        executor="cluster",
        scaling=scaling,
        accelerator="cuda" if scaling.num_gpus_per_worker > 0 else "cpu",
        devices=(devices,),
        node_addresses=None,  # 5: known when the processes join
        launcher=Launcher.SCHEDULER,  # 6
        transport=Transport.TCP,  # 7
        # the driver's: a member's address is the one its connection to the driver has
        listen_host=node_address(launch) if launch.is_driver else "",
        launch=launch,
        workers_per_process=per_process,
        # 6 on each node: forked, as a local run's, unless GPUs or the flag say otherwise
        node_workers=_launcher(scaling, "process"),
    )


def workers_per_process(scaling: ScalingConfig, launch: Launch) -> int:
    """How many workers each launched process starts: ``num_workers`` is the world size,
    and every process starts as many (one per process, or one per node's process each
    starting its node's). Raises, naming the allocation, when they do not divide."""
    if scaling.elasticity_enabled:
        return elastic_workers_per_process(scaling, launch)
    n, processes = scaling.min_workers, launch.num_processes  # (not elastic: num_workers)
    if n < processes or n % processes:
        fits = ", ".join(str(processes * k) for k in (1, 2, 4))
        raise ValueError(
            f"ScalingConfig(num_workers={n}) does not fit the allocation: {launch.launcher} "
            f"started {processes} processes ({launch.allocation()}), and each starts the same "
            f"number of workers (each process one, or each node's process that node's). "
            f"HINT: set num_workers to {fits}, ..., or launch {n} processes (one per "
            "worker: srun --ntasks-per-node, torchrun --nproc-per-node, mpirun -np)"
        )
    return n // processes


def elastic_workers_per_process(scaling: ScalingConfig, launch: Launch) -> int:
    """``num_workers=(min, max)`` where the launcher may change the allocation (torchrun's
    elastic rendezvous): this launch's processes decide the size. Several processes per
    node start one worker each (the world is ``WORLD_SIZE``); one process per node starts
    as many as keep the world within ``max`` (the same number on every node). Raises,
    naming the allocation, when the size is outside ``[min, max]`` or the launcher's
    allocation is fixed.

    Example:
        >>> from lockstep._internal.execution.environments import torchelastic
        >>> launch = torchelastic.detect({"TORCHELASTIC_RUN_ID": "job", "RANK": "0",
        ...     "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
        ...     "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "2"})
        >>> elastic_workers_per_process(ScalingConfig(num_workers=(2, 4)), launch)
        1
    """
    low, high, processes = scaling.min_workers, scaling.max_workers, launch.num_processes
    if not launch.resizable:
        raise ValueError(
            f"ScalingConfig(num_workers={scaling.num_workers!r}) is elastic, but "
            f"{launch.launcher}'s allocation ({launch.allocation()}) is fixed. HINT: give "
            f"num_workers={processes} (or a multiple) as one number, or launch with torchrun "
            "--nnodes=MIN:MAX --rdzv-backend=c10d, whose rendezvous may change the allocation"
        )
    per_process = 1 if launch.processes_per_node > 1 else high // processes
    size = per_process * processes
    if not low <= size <= high:
        rule = (
            "one worker per launched process"
            if launch.processes_per_node > 1
            else f"as many on each node as keep the world within {high}"
        )
        raise ValueError(
            f"ScalingConfig(num_workers={scaling.num_workers!r}) does not fit this "
            f"rendezvous: {launch.launcher} started {processes} processes "
            f"({launch.allocation()}), which with {rule} is {size} workers, outside "
            f"[{low}, {high}]. HINT: give torchrun --nnodes=MIN:MAX and --nproc-per-node "
            f"whose worlds stay within [{low}, {high}], or widen num_workers to "
            f"({min(low, max(1, size))}, {max(high, size)})"
        )
    return per_process


def _cluster_gpus(scaling: ScalingConfig, launch: Launch, per_process: int) -> tuple[str, ...]:
    """Step 3 for this launched process: the GPUs it sees must hold its own workers'."""
    if scaling.num_gpus_per_worker == 0:
        return ()
    have = accelerators.visible_gpus()
    need = gpus_needed(per_process, scaling.num_gpus_per_worker)
    if len(have) < need:
        raise ValueError(
            f"use_gpu=True: launched process {launch.process_rank} ({launch.launcher}, "
            f"{launch.allocation()}) starts {per_process} worker(s), which need {need} "
            f"GPU(s), but it sees {len(have)}. HINT: ask the scheduler for the GPUs "
            "(srun --gpus-per-node, a GPU instance), use fewer workers, or share GPUs with "
            'resources_per_worker={"GPU": 0.5}'
        )
    return tuple(have)


def _warn_node_cpus(scaling: ScalingConfig, launch: Launch, per_process: int) -> None:
    if not launch.is_driver:
        return  # said once, by the driver
    per_node = per_process * launch.processes_per_node
    asked = per_node * scaling.num_cpus_per_worker
    have = launch.cpus_per_node or usable_cpus() * launch.processes_per_node
    if asked > have:
        warnings.warn(
            f"ScalingConfig asks for {asked:g} CPUs on each node ({per_node} workers x "
            f"{scaling.num_cpus_per_worker:g}) but {launch.launcher} gave {have}: the workers "
            "will share CPUs. HINT: ask for more CPUs per node (srun --cpus-per-task), or "
            "fewer workers",
            stacklevel=users_frame(),
        )


def node_address(launch: Launch) -> str:
    """Where this node's workers, and on the driver's node the driver, listen: loopback
    when every process runs on this machine; else ``LOCKSTEP_NODE_ADDRESS``, the
    address of the interface that reaches another node of the launch, or the address
    this host's name resolves to."""
    given = flags.NODE_ADDRESS.get()
    if given:
        return given
    if launch.num_nodes <= 1:
        return LOOPBACK
    here = socket.gethostname()
    for peer in [h for h in launch.hosts if h.split(".")[0] != here.split(".")[0]]:
        if (address := _address_towards(peer)) is not None:
            return address
    try:
        address = socket.gethostbyname(here)
    except OSError:
        address = LOOPBACK
    if address.startswith("127."):
        others = f" ({', '.join(launch.hosts)}, not reachable by name)" if launch.hosts else ""
        raise ValueError(
            f"this node's name {here!r} resolves to {address}, which other nodes cannot "
            f"reach, and there is no other node of the launch to find the way to{others}. "
            "HINT: set LOCKSTEP_NODE_ADDRESS to this node's address on the network the "
            "nodes share"
        )
    return address


def _address_towards(host: str) -> str | None:
    """The address of the interface that reaches ``host`` (a UDP socket's connect only
    asks the routing table: nothing is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((socket.gethostbyname(host), 9))
            return str(probe.getsockname()[0])
    except OSError:
        return None


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


def make_worker_group(plan: ExecutionPlan, session: DriverSession | None = None) -> WorkerGroup:
    """The worker group that carries out ``plan`` (a cluster's: with its driver's
    ``session`` of the processes that joined)."""
    if plan.launcher is Launcher.SCHEDULER:
        from lockstep._internal.execution.worker_group.cluster.group import ClusterWorkerGroup

        assert session is not None
        return ClusterWorkerGroup(plan, session)
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


def start_early(plan: ExecutionPlan, imports: tuple[str, ...] = ()) -> None:
    """Before the run opens its storage: fork the fork server, when the plan forks workers
    from it, and have it import its workers' ``imports`` meanwhile. Opening the storage may
    start a library that a fork cannot copy (pyarrow's S3 filesystem starts the AWS CRT); a
    server forked first never holds it."""
    if plan.forks_workers:
        from lockstep._internal.execution.worker_group import forkserver

        server = forkserver.get(max(1, int(plan.num_cpus_per_worker)))
        if server is not None:
            server.preload(imports)
