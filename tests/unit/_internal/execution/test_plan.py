"""The execution plan, resolved step by step with no process started."""

from __future__ import annotations

import warnings

import pytest

from lockstep._core import accelerators
from lockstep._internal.backends.base import BackendConfig
from lockstep._internal.backends.torch import TorchConfig
from lockstep._internal.execution import resolve
from lockstep._internal.execution.plan import (
    ExecutionPlan,
    Launcher,
    Topology,
    Transport,
    gpu_share,
    gpus_needed,
    order_by_node,
)
from lockstep._internal.execution.worker_group.process.group import worker_env
from lockstep.train import ScalingConfig


@pytest.fixture(autouse=True)
def _no_gpus_unless_given(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("LOCKSTEP_WORKER_START", raising=False)


def ranks(topology: Topology) -> list[tuple[int, int, int, int]]:
    """(world, node, local rank, local world size) of every rank."""
    return [
        (p.world_rank, p.node_rank, p.local_rank, p.local_world_size) for p in topology.placements
    ]


# 1. the executor


@pytest.mark.parametrize(
    ("scaling", "executor"),
    [
        (ScalingConfig(num_workers=0), "inline"),
        (ScalingConfig(num_workers=2), "process"),
        (ScalingConfig(num_workers=2, executor="process"), "process"),
        (ScalingConfig(num_workers=2, executor="ray"), "ray"),
        (ScalingConfig(num_workers=0, executor="ray"), "inline"),  # nothing to place
    ],
)
def test_the_executor_follows_the_three_rules(scaling, executor):
    assert resolve.choose_executor(scaling) == executor


def test_ray_address_sends_the_workers_to_ray_unless_told_otherwise(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    assert resolve.choose_executor(ScalingConfig(num_workers=2)) == "ray"
    assert resolve.choose_executor(ScalingConfig(num_workers=2, executor="process")) == "process"


# 2. the options that only matter on Ray


def test_rays_placement_options_are_warned_about_once_on_this_machine():
    scaling = ScalingConfig(num_workers=1, placement_strategy="STRICT_SPREAD")
    resolve._warned.clear()
    with pytest.warns(UserWarning, match="placement_strategy='STRICT_SPREAD' only matters"):
        resolve.resolve_plan(scaling)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        resolve.resolve_plan(scaling)


# 3. the accelerators


def test_cpu_workers_get_no_gpus_and_see_none():
    plan = resolve.resolve_plan(ScalingConfig(num_workers=2))
    assert plan.accelerator == "cpu" and plan.devices == ((),)
    assert [p.gpus for p in plan.topology(2).placements] == [(), ()]
    env = worker_env(plan.topology(2).placements[1], num_threads=1)
    assert env["CUDA_VISIBLE_DEVICES"] == ""


def test_gpu_workers_each_get_their_own_of_the_visible_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    plan = resolve.resolve_plan(ScalingConfig(num_workers=2, use_gpu=True))
    assert plan.accelerator == "cuda" and plan.devices == (("2", "3"),)
    placements = plan.topology(2).placements
    assert [p.gpus for p in placements] == [("2",), ("3",)]
    assert worker_env(placements[1], num_threads=1)["CUDA_VISIBLE_DEVICES"] == "3"


def test_gpu_shares_put_two_workers_on_one_gpu(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    scaling = ScalingConfig(
        num_workers=4, use_gpu=True, resources_per_worker={"CPU": 0.25, "GPU": 0.5}
    )
    plan = resolve.resolve_plan(scaling)
    assert [p.gpus for p in plan.topology(4).placements] == [("0",), ("0",), ("1",), ("1",)]


@pytest.mark.parametrize(
    ("visible", "scaling", "message"),
    [
        ("-1", ScalingConfig(use_gpu=True), r"use_gpu=True but this machine has no GPU.*HINT"),
        (
            "0",
            ScalingConfig(num_workers=2, use_gpu=True),
            r"2 worker\(s\) need 2 GPU\(s\) but 1 is visible here. HINT",
        ),
        (
            "0,1",
            ScalingConfig(num_workers=2, use_gpu=True, resources_per_worker={"GPU": 0.3}),
            "cannot split this machine's GPUs evenly. HINT",
        ),
        (
            "-1",
            ScalingConfig(num_workers=0, use_gpu=True),
            r"use_gpu=True but this machine has no GPU.*HINT",
        ),
    ],
)
def test_gpus_the_machine_has_not_are_an_error_with_the_fix(monkeypatch, visible, scaling, message):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    with pytest.raises(ValueError, match=message):
        resolve.resolve_plan(scaling)


@pytest.mark.parametrize(
    ("per_worker", "expected"),
    [
        (1, [("a",), ("b",), ("c",), ("d",)]),
        (2, [("a", "b"), ("c", "d"), (), ()]),
        (0.5, [("a",), ("a",), ("b",), ("b",)]),
        (0.25, [("a",), ("a",), ("a",), ("a",)]),
        (0, [(), (), (), ()]),
    ],
)
def test_gpu_share_of_each_local_rank(per_worker, expected):
    assert [gpu_share(["a", "b", "c", "d"], r, per_worker) for r in range(4)] == expected


def test_gpus_needed():
    assert gpus_needed(4, 1) == 4
    assert gpus_needed(3, 0.5) == 2
    assert gpus_needed(2, 2) == 4
    assert gpus_needed(5, 0) == 0


def test_the_inventory_reads_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert accelerators.visible_gpus() == ["2", "3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert accelerators.visible_gpus() == []


# 4. the capacity


def test_an_elastic_run_whose_minimum_does_not_fit_is_an_error():
    have = resolve.usable_cpus()
    scaling = ScalingConfig(num_workers=(have + 1, have + 2))
    with pytest.raises(ValueError, match=rf"needs at least {have + 1} workers.*HINT"):
        resolve.resolve_plan(scaling)


def test_more_cpus_than_there_are_is_a_warning_for_inline_and_processes_alike():
    have = resolve.usable_cpus()
    for workers in (0, 1):
        scaling = ScalingConfig(num_workers=workers, resources_per_worker={"CPU": have + 1})
        with pytest.warns(UserWarning, match=rf"asks for {have + 1} CPUs"):
            resolve.resolve_plan(scaling)


def test_workers_with_more_threads_than_cpus_let_openmp_sleep_unless_the_user_chose(
    monkeypatch,
):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    have = resolve.usable_cpus()
    placement = resolve.resolve_plan(ScalingConfig(num_workers=1)).topology(1).placements[0]
    fits = worker_env(placement, num_threads=have, num_workers=1)
    assert fits["OMP_NUM_THREADS"] == str(have) and "OMP_WAIT_POLICY" not in fits
    shared = worker_env(placement, num_threads=have, num_workers=2)
    assert shared["OMP_NUM_THREADS"] == str(have) and shared["OMP_WAIT_POLICY"] == "PASSIVE"
    # the user's thread count is what the workers run, so it decides
    monkeypatch.setenv("OMP_NUM_THREADS", str(have + 1))
    assert worker_env(placement, num_threads=1)["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert worker_env(placement, num_threads=1)["OMP_WAIT_POLICY"] == "ACTIVE"


# 5. the topology


def test_one_machine_is_one_loopback_node_holding_every_rank():
    plan = resolve.resolve_plan(ScalingConfig(num_workers=3, resources_per_worker={"CPU": 0.5}))
    topology = plan.topology(3)
    assert ranks(topology) == [(0, 0, 0, 3), (1, 0, 1, 3), (2, 0, 2, 3)]
    assert [(n.node_rank, n.address, n.ranks) for n in topology.nodes] == [
        (0, "127.0.0.1", (0, 1, 2))
    ]
    # an elastic run's later size has the same shape
    assert ranks(plan.topology(2)) == [(0, 0, 0, 2), (1, 0, 1, 2)]


def test_nodes_known_before_the_start_share_the_ranks_evenly():
    plan = ExecutionPlan(
        executor="process",
        scaling=ScalingConfig(num_workers=5),
        launcher=Launcher.SPAWN,
        transport=Transport.TCP,
        node_addresses=("10.0.0.1", "10.0.0.2"),
        devices=((), ()),
    )
    topology = plan.topology(5)
    assert ranks(topology) == [(0, 0, 0, 3), (1, 0, 1, 3), (2, 0, 2, 3), (3, 1, 0, 2), (4, 1, 1, 2)]
    assert [topology.address_of(r) for r in (2, 3)] == ["10.0.0.1", "10.0.0.2"]


def test_workers_a_launcher_placed_are_ranked_by_node_the_drivers_first():
    plan = ExecutionPlan(
        executor="ray",
        scaling=ScalingConfig(num_workers=4, executor="ray"),
        launcher=Launcher.RAY_ACTORS,
        transport=Transport.TCP,
        node_addresses=None,
    )
    order, topology = plan.placed(
        ["n2", "n1", "n2", "n1"], {"n1": "10.0.0.1", "n2": "10.0.0.2"}, first="n1"
    )
    assert order == [1, 3, 0, 2]  # worker index of ranks 0..3
    assert ranks(topology) == [(0, 0, 0, 2), (1, 0, 1, 2), (2, 1, 0, 2), (3, 1, 1, 2)]
    assert topology.address_of(0) == "10.0.0.1"
    assert [p.gpus for p in topology.placements] == [None] * 4  # Ray's to give


def test_a_driver_node_without_workers_ranks_the_others_in_order_of_appearance():
    assert order_by_node(["c", "b", "c"], first_node="a") == ([0, 2, 1], ["c", "b"])


# 6. the launcher


def test_local_workers_fork_from_the_fork_server_unless_told_or_on_gpus(monkeypatch):
    assert resolve.resolve_plan(ScalingConfig(num_workers=2)).launcher is Launcher.FORK_SERVER
    assert resolve.resolve_plan(ScalingConfig(num_workers=0)).launcher is Launcher.THREAD
    monkeypatch.setenv("LOCKSTEP_WORKER_START", "spawn")
    assert resolve.resolve_plan(ScalingConfig(num_workers=2)).launcher is Launcher.SPAWN
    monkeypatch.setenv("LOCKSTEP_WORKER_START", "fork")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    gpus = ScalingConfig(num_workers=2, use_gpu=True)
    assert resolve.resolve_plan(gpus).launcher is Launcher.SPAWN  # CUDA does not survive fork


# 7. the transport


def test_workers_on_this_machine_talk_over_what_no_other_process_reaches():
    assert resolve.resolve_plan(ScalingConfig(num_workers=0)).transport is Transport.PIPE
    plan = resolve.resolve_plan(ScalingConfig(num_workers=2))
    assert plan.transport is Transport.SOCKET_PAIR and plan.listen_host == ""
    assert resolve._transport("ray") is Transport.TCP


# the backend, completed for the plan's devices


def test_the_torch_process_group_follows_the_devices(monkeypatch):
    cpu = resolve.resolve_plan(ScalingConfig(num_workers=2))
    assert cpu.backend_for(TorchConfig()).backend == "gloo"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    gpu = resolve.resolve_plan(ScalingConfig(num_workers=2, use_gpu=True))
    assert gpu.backend_for(TorchConfig()).backend == "nccl"
    assert gpu.backend_for(TorchConfig(backend="gloo")).backend == "gloo"  # the user's choice
    assert type(gpu.backend_for(None)) is BackendConfig


def test_nccl_on_a_plan_without_gpus_is_an_error_with_the_fix():
    plan = resolve.resolve_plan(ScalingConfig(num_workers=2))
    with pytest.raises(ValueError, match=r"needs GPUs but use_gpu=False. HINT"):
        plan.backend_for(TorchConfig(backend="nccl"))


def test_the_worker_groups_are_the_plans_launchers():
    from lockstep._internal.execution.worker_group.inline import InlineWorkerGroup
    from lockstep._internal.execution.worker_group.process.group import ProcessWorkerGroup

    inline = resolve.make_worker_group(resolve.resolve_plan(ScalingConfig(num_workers=0)))
    process = resolve.make_worker_group(resolve.resolve_plan(ScalingConfig(num_workers=2)))
    assert isinstance(inline, InlineWorkerGroup) and isinstance(process, ProcessWorkerGroup)
    # the optional calls of the interface are there, with their defaults
    assert process.preemption_notice() is None and process.collect_stacks() == {}
