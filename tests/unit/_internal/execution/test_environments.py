"""Where a launched process finds itself, from the variables real launchers set (recorded
from torchrun 2.13, Open MPI 4.1, MPICH 4.0, SLURM 22.05, Kubeflow's controllers as they
document them, and SageMaker's training toolkit)."""

from __future__ import annotations

import json
import os
import socket

import pytest

from lockstep._internal.execution.environments import kubeflow, sagemaker, slurm
from lockstep._internal.execution.environments.base import LaunchError, without_launch_variables
from lockstep._internal.execution.environments.detect import detect

TORCHRUN = {  # torchrun --nnodes 2 --nproc-per-node 2, the second node's second process
    "GROUP_RANK": "1",
    "GROUP_WORLD_SIZE": "2",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "MASTER_ADDR": "10.231.0.1",
    "MASTER_PORT": "29471",
    "RANK": "3",
    "ROLE_NAME": "default",
    "ROLE_RANK": "3",
    "ROLE_WORLD_SIZE": "4",
    "TORCHELASTIC_MAX_RESTARTS": "0",
    "TORCHELASTIC_RESTART_COUNT": "0",
    "TORCHELASTIC_RUN_ID": "none",
    "TORCHELASTIC_USE_AGENT_STORE": "True",
    "WORLD_SIZE": "4",
}
OPEN_MPI = {  # mpirun -H node1:2,node2:2 -np 4, rank 2
    "OMPI_COMM_WORLD_LOCAL_RANK": "0",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    "OMPI_COMM_WORLD_NODE_RANK": "0",  # a rank among the node's processes, not a node
    "OMPI_COMM_WORLD_RANK": "2",
    "OMPI_COMM_WORLD_SIZE": "4",
    "OMPI_MCA_ess_base_jobid": "997326849",
    "PMIX_NAMESPACE": "997326849",
    "PMIX_RANK": "2",
}
MPICH = {"MPI_LOCALNRANKS": "2", "MPI_LOCALRANKID": "1", "PMI_FD": "8", "PMI_RANK": "1",
         "PMI_SIZE": "4"}  # fmt: skip
SLURM_STEP = {  # srun in sbatch -N2 --ntasks-per-node=2, the task of rank 3
    "SLURMD_NODENAME": "node2",
    "SLURM_CPUS_ON_NODE": "2",
    "SLURM_JOB_ID": "1",
    "SLURM_JOB_NODELIST": "node[1-2]",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_LOCALID": "1",
    "SLURM_NNODES": "2",
    "SLURM_NODEID": "1",
    "SLURM_NTASKS": "4",
    "SLURM_NTASKS_PER_NODE": "2",
    "SLURM_PROCID": "3",
    "SLURM_STEP_ID": "0",
    "SLURM_STEP_NODELIST": "node[1-2]",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_NUM_TASKS": "4",
    "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
    "SLURM_TASKS_PER_NODE": "2(x2)",
}
# The batch script itself, before its srun: SLURM_PROCID and SLURM_NTASKS are there, no step.
SLURM_BATCH = {k: v for k, v in SLURM_STEP.items() if "STEP" not in k} | {
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
}


@pytest.fixture(autouse=True)
def _auto(monkeypatch):
    monkeypatch.delenv("LOCKSTEP_CLUSTER", raising=False)
    monkeypatch.delenv("LOCKSTEP_CLUSTER_IGNORE", raising=False)


def places(launch):
    return (
        launch.process_rank,
        launch.num_processes,
        launch.local_process_rank,
        launch.processes_per_node,
        launch.num_nodes,
        launch.node_rank,
    )


def test_torchrun():
    launch = detect(TORCHRUN)
    assert (launch.name, launch.launcher) == ("torchrun", "torchrun")
    assert places(launch) == (3, 4, 1, 2, 2, 1)
    # a static rendezvous's run id is "none": its job is named after the agent that
    # started the process (this test's parent here), the same across the agent's restarts
    assert launch.job_id.startswith(f"torchrun-{socket.gethostname()}-{os.getppid()}-")
    assert detect(TORCHRUN).job_id == launch.job_id
    assert launch.launch_id == "torchrun-none-10.231.0.1:29471-0"
    assert detect(TORCHRUN | {"TORCHELASTIC_RUN_ID": "exp7"}).job_id == "torchrun-exp7"


def test_open_mpi_ranks_and_nodes():
    launch = detect(OPEN_MPI)
    assert (launch.name, launch.launcher) == ("mpi", "Open MPI mpirun")
    assert places(launch) == (2, 4, 0, 2, 2, None)  # MPI does not number nodes
    assert launch.launch_id == "openmpi-997326849"


def test_mpich_and_intel_mpi_through_pmi():
    launch = detect(MPICH)
    assert (launch.launcher, *places(launch)) == ("MPICH mpirun", 1, 4, 1, 2, 2, None)


def test_mpi_wins_over_slurm_under_mpirun_in_an_allocation():
    # under mpirun inside sbatch, every rank has the batch step's SLURM_PROCID=0
    env = SLURM_BATCH | OPEN_MPI
    launch = detect(env)
    assert (launch.launcher, launch.process_rank) == ("Open MPI mpirun", 2)
    assert launch.slurm_job == "1"  # still the SLURM job's: its signals and requeue apply


def test_srun_tasks():
    launch = detect(SLURM_STEP)
    assert (launch.name, launch.launcher) == ("slurm", "SLURM srun")
    assert places(launch) == (3, 4, 1, 2, 2, 1)
    assert launch.hosts == ("node1", "node2")
    assert (launch.job_id, launch.launch_id, launch.slurm_job) == ("slurm-1", "slurm-1-0-0", "1")
    assert launch.cpus_per_node == 2


def test_a_requeued_job_keeps_its_job_id_and_is_a_new_launch():
    again = detect(SLURM_STEP | {"SLURM_RESTART_COUNT": "1"})
    assert (again.job_id, again.launch_id) == ("slurm-1", "slurm-1-0-1")


def test_an_array_task_is_requeued_by_its_own_id():
    launch = detect(SLURM_STEP | {"SLURM_ARRAY_JOB_ID": "40", "SLURM_ARRAY_TASK_ID": "3"})
    assert launch.slurm_job == "40_3" and launch.job_id == "slurm-40_3"


def test_a_batch_script_or_salloc_shell_without_srun_is_one_process():
    launch = detect(SLURM_BATCH)
    assert (launch.launcher, launch.num_processes, launch.num_nodes) == (
        "SLURM allocation (no srun)",
        1,
        1,
    )
    assert launch.job_id == "slurm-1"  # a requeue of the job continues its run


@pytest.mark.parametrize(
    ("nodelist", "hosts"),
    [
        ("node[042-043,045]", ["node042", "node043", "node045"]),
        ("node[1-2]", ["node1", "node2"]),
        ("gpu7", ["gpu7"]),
        ("a[1,3],b[09-10]", ["a1", "a3", "b09", "b10"]),
        ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
        ("", []),
    ],
)
def test_nodelists_expand_with_their_zero_padding(nodelist, hosts):
    assert slurm.expand_nodelist(nodelist) == hosts


def test_tasks_per_node():
    assert slurm.tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert slurm.tasks_per_node("") == []
    uneven = detect(SLURM_STEP | {"SLURM_STEP_TASKS_PER_NODE": "3,1", "SLURM_NODEID": "0"})
    assert uneven.processes_per_node == 3


PYTORCHJOB_WORKER = {  # the first worker pod of PyTorchJob mnist, nprocPerNode 2
    "MASTER_ADDR": "mnist-master-0",
    "MASTER_PORT": "23456",
    "PET_MASTER_ADDR": "mnist-master-0",
    "PET_MASTER_PORT": "23456",
    "WORLD_SIZE": "4",  # processes, while RANK is the pod's
    "RANK": "1",
    "PET_NPROC_PER_NODE": "2",
    "PET_NODE_RANK": "1",
    "PET_NNODES": "2",
}
TRAINJOB_POD = {
    "PET_NNODES": "2",
    "PET_NPROC_PER_NODE": "2",
    "PET_NODE_RANK": "1",
    "PET_MASTER_ADDR": "tj-node-0-0.tj",
    "PET_MASTER_PORT": "29500",
}


def test_pytorchjob_rank_is_the_pods_with_several_processes_per_node():
    launch = detect(PYTORCHJOB_WORKER)
    assert (launch.launcher, *places(launch)) == ("Kubeflow PyTorchJob", 1, 2, 0, 1, 2, 1)
    assert launch.job_id == "kubeflow-mnist"


def test_an_older_pytorchjob_without_pet_variables():
    env = {k: PYTORCHJOB_WORKER[k] for k in ("MASTER_ADDR", "MASTER_PORT")}
    env |= {"WORLD_SIZE": "3", "RANK": "2", "KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    assert places(detect(env)) == (2, 3, 0, 1, 3, 2)
    # the same variables outside Kubernetes are nobody's launch
    assert detect({k: v for k, v in env.items() if k != "KUBERNETES_SERVICE_HOST"}) is None


def test_trainjob_has_only_pet_variables():
    launch = detect(TRAINJOB_POD)
    assert (launch.launcher, *places(launch)) == ("Kubeflow TrainJob", 1, 2, 0, 1, 2, 1)
    assert kubeflow.job_name(TRAINJOB_POD) == "tj" and launch.job_id == "kubeflow-tj"


def test_a_pod_running_torchrun_is_torchruns():
    assert detect(TRAINJOB_POD | TORCHRUN).name == "torchrun"


def sagemaker_tree(tmp_path, hosts, current):
    config = tmp_path / "input" / "config"
    config.mkdir(parents=True)
    resource = {"current_host": current, "hosts": hosts, "network_interface_name": "eth0"}
    (config / "resourceconfig.json").write_text(json.dumps(resource))
    return {"SAGEMAKER_BASE_DIR": str(tmp_path)}


def test_sagemaker_orders_hosts_by_the_list_not_as_text(tmp_path):
    hosts = [f"algo-{i}" for i in range(1, 12)]  # algo-10 sorts before algo-2 as text
    env = sagemaker_tree(tmp_path, hosts, "algo-10")
    launch = detect(env)
    assert (launch.name, launch.process_rank, launch.num_nodes) == ("sagemaker", 9, 11)
    assert launch.hosts == tuple(hosts)
    assert launch.job_id == "sagemaker"  # a later job with the same checkpoints continues
    assert sagemaker.model_dir(env) == str(tmp_path / "model")
    assert sagemaker.checkpoint_dir(env) == str(tmp_path / "checkpoints")


def test_sagemaker_toolkits_variables_without_the_file(tmp_path):
    env = {"SAGEMAKER_BASE_DIR": str(tmp_path), "SM_HOSTS": '["algo-1","algo-2"]'}
    env["SM_CURRENT_HOST"] = "algo-2"
    assert detect(env).process_rank == 1


def test_a_sagemaker_host_not_in_its_list_is_an_error(tmp_path):
    env = sagemaker_tree(tmp_path, ["algo-1"], "algo-9")
    with pytest.raises(LaunchError, match=r"'algo-9' is not among its hosts.*HINT"):
        detect(env)


def test_a_sagemaker_failure_reason_is_its_first_1024_characters(tmp_path):
    sagemaker.write_failure("x" * 5000, {"SAGEMAKER_BASE_DIR": str(tmp_path)})
    assert (tmp_path / "output" / "failure").read_text() == "x" * 1024


def test_nothing_launched_a_process_started_by_hand():
    assert detect({"HOME": "/root", "PATH": "/bin"}) is None


def test_detection_is_switched_off_or_limited():
    assert detect(SLURM_STEP, choice="off") is None
    assert detect(SLURM_BATCH | OPEN_MPI, ignore="mpi").launcher == "SLURM allocation (no srun)"
    assert detect(SLURM_BATCH | OPEN_MPI, choice="slurm").name == "slurm"
    assert detect(TORCHRUN, ignore="torchrun, slurm") is None


def test_a_chosen_launcher_must_have_started_the_process():
    with pytest.raises(LaunchError, match="LOCKSTEP_CLUSTER=slurm but this process was not"):
        detect(TORCHRUN, choice="slurm")


def test_an_unknown_launcher_name_is_an_error_naming_the_known_ones():
    with pytest.raises(LaunchError, match=r"unknown launcher\(s\) \['pbs'\].*torchrun, mpi"):
        detect({}, choice="pbs")


def test_a_missing_variable_is_named_with_the_fix():
    broken = {k: v for k, v in TORCHRUN.items() if k != "LOCAL_WORLD_SIZE"}
    with pytest.raises(LaunchError, match=r"torchrun did not set LOCAL_WORLD_SIZE.*HINT"):
        detect(broken)
    with pytest.raises(LaunchError, match=r"SLURM_PROCID='x' \(set by SLURM srun\)"):
        detect(SLURM_STEP | {"SLURM_PROCID": "x"})


def test_workers_do_not_take_the_launchers_word_about_their_process():
    env = SLURM_STEP | OPEN_MPI | MPICH | TORCHRUN | TRAINJOB_POD | {"HOME": "/root"}
    kept = without_launch_variables(env)
    assert not any(k.startswith(("OMPI_COMM_WORLD", "PMI", "TORCHELASTIC", "PET_")) for k in kept)
    assert "SLURM_PROCID" not in kept and "SLURM_LOCALID" not in kept
    assert kept["SLURM_JOB_ID"] == "1" and kept["HOME"] == "/root"
