"""The plan of a run across the processes a launcher started, resolved with no process
started: how many workers each starts, where they fit, the ranks once they join."""

from __future__ import annotations

import pytest

from lockstep._internal.execution import resolve
from lockstep._internal.execution.plan import Launcher, Member, Transport, torchrun_env
from lockstep._internal.execution.worker_group.cluster.driver import join_file
from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig
from tests.unit._internal.execution.test_environments import (
    SLURM_BATCH,
    SLURM_STEP,
    TORCHRUN,
    sagemaker_tree,
)

DRIVER = SLURM_STEP | {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}


@pytest.fixture(autouse=True)
def _machine(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    for name in ("LOCKSTEP_CLUSTER", "LOCKSTEP_CLUSTER_IGNORE", "LOCKSTEP_NODE_ADDRESS"):
        monkeypatch.delenv(name, raising=False)


def plan_of(env, **scaling):
    return resolve.resolve_plan(ScalingConfig(**scaling), env=env)


def test_a_launch_of_several_processes_is_one_cluster_run(monkeypatch):
    monkeypatch.setenv("LOCKSTEP_NODE_ADDRESS", "10.231.0.1")
    plan = plan_of(DRIVER, num_workers=8, resources_per_worker={"CPU": 0.5})
    assert (plan.executor, plan.launcher, plan.transport) == (
        "cluster",
        Launcher.SCHEDULER,
        Transport.TCP,
    )
    assert plan.workers_per_process == 2 and plan.listen_host == "10.231.0.1"
    assert plan.node_addresses is None  # known once the processes join
    assert plan.launch.is_driver and not plan_of(SLURM_STEP, num_workers=4).launch.is_driver


def test_one_process_is_a_run_on_this_machine_that_keeps_its_job():
    plan = plan_of(SLURM_BATCH, num_workers=2)
    assert plan.executor == "process" and plan.launch.slurm_job == "1"


@pytest.mark.parametrize("workers", [3, 2, 6])
def test_workers_that_do_not_divide_among_the_processes_fail_naming_the_allocation(workers):
    with pytest.raises(ValueError) as raised:
        plan_of(DRIVER, num_workers=workers)
    assert str(raised.value) == (
        f"ScalingConfig(num_workers={workers}) does not fit the allocation: SLURM srun started "
        "4 processes (2 nodes x 2 process(es) (2 CPUs per node)), and each starts the same "
        "number of workers (each process one, or each node's process that node's). HINT: "
        f"set num_workers to 4, 8, 16, ..., or launch {workers} processes (one per worker: "
        "srun --ntasks-per-node, torchrun --nproc-per-node, mpirun -np)"
    )


def test_an_elastic_size_cannot_follow_a_fixed_allocation():
    with pytest.raises(ValueError) as raised:
        plan_of(DRIVER, num_workers=(2, 4))
    assert str(raised.value) == (
        "ScalingConfig(num_workers=(2, 4)) is elastic, but SLURM srun's allocation (2 nodes x "
        "2 process(es) (2 CPUs per node)) is fixed. HINT: give num_workers=4 (or a multiple) "
        "as one number, or launch with torchrun --nnodes=MIN:MAX --rdzv-backend=c10d, whose "
        "rendezvous may change the allocation"
    )
    static = TORCHRUN | {"RANK": "1"}  # --node-rank: torchrun's static rendezvous is fixed too
    with pytest.raises(ValueError, match=r"is elastic, but torchrun's allocation .* is fixed"):
        plan_of(static, num_workers=(2, 4))


ELASTIC = TORCHRUN | {"TORCHELASTIC_RUN_ID": "job7", "RANK": "1", "LOCAL_RANK": "1",
                      "GROUP_RANK": "0"}  # fmt: skip


def rendezvous(nodes, per_node):
    """A process of torchrun --nnodes=MIN:MAX after a rendezvous of ``nodes`` nodes."""
    world = {"GROUP_WORLD_SIZE": str(nodes), "LOCAL_WORLD_SIZE": str(per_node)}
    return ELASTIC | world | {"WORLD_SIZE": str(nodes * per_node)}


@pytest.mark.parametrize(
    ("nodes", "per_node", "size"), [(1, 2, 2), (2, 2, 4), (2, 1, 4), (3, 1, 3)]
)
def test_an_elastic_size_under_torchrun_is_the_rendezvouss_world(nodes, per_node, size):
    """A process per worker: the world; a process per node: as many on each as fit."""
    plan = plan_of(rendezvous(nodes, per_node), num_workers=(2, 4))
    assert plan.scaling.num_workers == size and not plan.scaling.elasticity_enabled
    assert plan.workers_per_process * nodes * per_node == size


@pytest.mark.parametrize(("nodes", "per_node", "size"), [(3, 2, 6), (1, 3, 3)])
def test_a_rendezvous_outside_min_max_is_refused_naming_it(nodes, per_node, size):
    with pytest.raises(ValueError) as raised:
        plan_of(rendezvous(nodes, per_node), num_workers=(4, 5))
    procs = nodes * per_node
    s = "s" if nodes > 1 else ""
    assert str(raised.value) == (
        f"ScalingConfig(num_workers=(4, 5)) does not fit this rendezvous: torchrun started "
        f"{procs} processes ({nodes} node{s} x {per_node} process(es)), which with one worker "
        f"per launched process is {size} workers, outside [4, 5]. HINT: give torchrun "
        "--nnodes=MIN:MAX and --nproc-per-node whose worlds stay within [4, 5], or widen "
        f"num_workers to ({min(4, size)}, {max(5, size)})"
    )


def test_too_many_nodes_for_max_workers_is_refused():
    with pytest.raises(ValueError, match=r"with as many on each node as keep the world within 4 "
                                         r"is 0 workers, outside \[2, 4\]"):  # fmt: skip
        plan_of(rendezvous(5, 1), num_workers=(2, 4))


@pytest.mark.parametrize(
    ("scaling", "asked"),
    [({"num_workers": 4, "executor": "process"}, "executor='process'"), ({}, "num_workers=0")],
)
def test_one_machines_executors_under_a_launch_of_several_are_an_error(scaling, asked):
    scaling = {"num_workers": 0} | scaling
    with pytest.raises(ValueError, match=rf"ScalingConfig\({asked}\) runs on one machine.*HINT"):
        plan_of(DRIVER, **scaling)


def test_gpus_a_process_does_not_see_are_an_error_naming_it(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("LOCKSTEP_NODE_ADDRESS", "10.0.0.1")
    with pytest.raises(ValueError, match=r"launched process 0 \(SLURM srun, .*\) starts 2 "):
        plan_of(DRIVER, num_workers=8, use_gpu=True)
    assert plan_of(DRIVER, num_workers=4, use_gpu=True).devices == (("0",),)


def test_the_driver_listens_on_loopback_when_every_process_is_on_this_machine():
    one_node = TORCHRUN | {"GROUP_WORLD_SIZE": "1", "GROUP_RANK": "0", "RANK": "0"}
    assert plan_of(one_node, num_workers=4).listen_host == "127.0.0.1"


def test_a_node_whose_name_resolves_to_loopback_is_told_to_set_its_address(monkeypatch):
    monkeypatch.setattr(resolve.socket, "gethostbyname", lambda name: "127.0.1.1")
    driver = TORCHRUN | {"RANK": "0", "LOCAL_RANK": "0", "GROUP_RANK": "0"}
    with pytest.raises(ValueError, match=r"resolves to 127\.0\.1\.1.*LOCKSTEP_NODE_ADDRESS"):
        plan_of(driver, num_workers=4)
    assert plan_of(TORCHRUN, num_workers=4).listen_host == ""  # a member's is its connection's


def member(rank, host, gpus=()):
    return Member(rank, host, f"10.0.0.{host[-1]}", gpus)


def test_joined_processes_are_ranked_by_node_the_drivers_first(monkeypatch):
    monkeypatch.setenv("LOCKSTEP_NODE_ADDRESS", "10.0.0.9")
    plan = plan_of(DRIVER, num_workers=4)  # one worker per process
    # the driver's host sorts last as text: it comes first all the same
    joined = [member(0, "n9"), member(2, "n1"), member(1, "n9"), member(3, "n1")]
    topology = plan.joined(joined)
    assert [(n.address, n.ranks) for n in topology.nodes] == [
        ("10.0.0.9", (0, 1)),
        ("10.0.0.1", (2, 3)),
    ]
    assert [(p.process_rank, p.node_rank, p.local_rank) for p in topology.placements] == [
        (0, 0, 0),
        (1, 0, 1),
        (2, 1, 0),
        (3, 1, 1),
    ]
    env = torchrun_env(topology.placements[2], topology)
    assert (env["RANK"], env["LOCAL_RANK"], env["GROUP_RANK"], env["WORLD_SIZE"]) == (
        "2",
        "0",
        "1",
        "4",
    )


def test_a_process_per_node_starts_that_nodes_workers(monkeypatch):
    monkeypatch.setenv("LOCKSTEP_NODE_ADDRESS", "10.0.0.1")
    per_node = DRIVER | {"SLURM_NTASKS": "2", "SLURM_STEP_NUM_TASKS": "2"}
    plan = plan_of(per_node | {"SLURM_STEP_TASKS_PER_NODE": "1(x2)"}, num_workers=4)
    assert plan.workers_per_process == 2
    topology = plan.joined([member(0, "n1"), member(1, "n2")])
    assert [p.process_rank for p in topology.placements] == [0, 0, 1, 1]
    assert [p.local_rank for p in topology.placements] == [0, 1, 0, 1]


@pytest.mark.parametrize(
    ("seen", "gpus"),
    [
        # each process sees its node's GPUs: a worker gets its local rank's
        ([("0", "1"), ("0", "1")], [("0",), ("1",)]),
        # a scheduler bound one GPU to each task: a worker gets its own process's
        ([("0",), ("1",)], [("0",), ("1",)]),
        ([("3",), ("3",)], [("3",), ("3",)]),
    ],
)
def test_gpus_follow_what_each_process_sees(monkeypatch, seen, gpus):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("LOCKSTEP_NODE_ADDRESS", "10.0.0.1")
    plan = plan_of(DRIVER, num_workers=4, use_gpu=True)
    joined = [member(0, "n1", seen[0]), member(1, "n1", seen[1])]
    joined += [member(2, "n2", seen[0]), member(3, "n2", seen[1])]
    topology = plan.joined(joined)
    assert [p.gpus for p in topology.placements[:2]] == gpus
    assert torchrun_env(topology.placements[1], topology)["CUDA_VISIBLE_DEVICES"] == gpus[1][0]


def test_each_launch_has_its_own_join_file():
    assert join_file("slurm-7-0-1") == ".lockstep/join-slurm-7-0-1.json"
    assert join_file("torchrun-none-10.0.0.1:29500-0") == (
        ".lockstep/join-torchrun-none-10.0.0.1_29500-0.json"
    )


def test_a_jobs_run_is_named_after_the_job_so_that_a_requeue_continues_it(monkeypatch, tmp_path):
    for name, value in SLURM_BATCH.items():
        monkeypatch.setenv(name, value)
    run = RunConfig(storage_path=str(tmp_path))
    trainer = DataParallelTrainer(lambda: None, run_config=run)
    assert trainer.run_config.name == "lockstep_run-slurm-1"
    named = DataParallelTrainer(lambda: None, run_config=RunConfig(name="mine"))
    assert named.run_config.name == "mine"


def test_a_sagemaker_run_goes_to_the_jobs_checkpoint_directory(monkeypatch, tmp_path):
    for name, value in sagemaker_tree(tmp_path, ["algo-1"], "algo-1").items():
        monkeypatch.setenv(name, value)
    trainer = DataParallelTrainer(lambda: None)
    assert trainer.run_config.storage_path == str(tmp_path / "checkpoints")
    assert trainer.run_config.name == "lockstep_run-sagemaker"
