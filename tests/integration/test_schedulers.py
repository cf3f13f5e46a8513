"""One lockstep run across two hosts under each real launcher and scheduler: the script a
user runs on a laptop, unchanged, with every launched process running it.

Each run: 2 hosts, 2 workers on each, checkpoints from every rank; the ranks each worker
saw; the code after ``fit()`` running once (in the driver, on the first host); a worker
killed on the second host, restarted in place from the latest checkpoint, and the run
finishing. Each framework backend (TensorFlow, XGBoost, LightGBM, Horovod) runs once with
a worker on each host, under the cheapest launcher: a torchrun agent per host.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.cluster import kubeflow, launchers, sagemaker
from tests.cluster.fixtures import require

pytestmark = [pytest.mark.processes, pytest.mark.slow]

SCRIPT = str(Path(__file__).resolve().parents[1] / "cluster" / "lockstep_run.py")
EPOCHS = 3
KILLED = (3, 1)  # rank 3 (on the second host) is killed at epoch 1


def run_options(out: Path, storage: Path | str, name: str, workers: int = 4) -> dict[str, str]:
    """The script's options: 4 workers, a worker killed on the second host."""
    kill_rank, kill_epoch = KILLED
    options = {"out": out, "storage": storage, "name": name, "workers": workers}
    options |= {"epochs": EPOCHS, "kill-rank": kill_rank, "kill-epoch": kill_epoch}
    return {k: str(v) for k, v in options.items()}


def run_argv(out: Path, storage: Path | str, name: str, workers: int = 4) -> list[str]:
    options = run_options(out, storage, name, workers)
    return [sys.executable, SCRIPT, *(f"--{k}={v}" for k, v in options.items())]


def seen_by_rank(out: Path) -> dict[int, list[dict]]:
    seen: dict[int, list[dict]] = {}
    for path in sorted(out.glob("seen-rank*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            seen.setdefault(row["rank"], []).append(row)
    return seen


def files_in(directory: Path) -> list[str]:
    """The files a checkpoint's ranks wrote (lockstep's own metadata file left out)."""
    return sorted(p.name for p in directory.iterdir() if not p.name.startswith("."))


def check_one_run_across_two_hosts(out: Path, run_dir: Path, hosts: tuple[str, str]) -> None:
    """What every launcher's run must show (see the module's docstring)."""
    after = list(out.glob("after-fit-*.json"))
    assert [json.loads(p.read_text())["host"] for p in after] == [hosts[0]]
    assert json.loads(after[0].read_text())["metrics"] == {"epoch": EPOCHS - 1}
    seen = seen_by_rank(out)
    assert sorted(seen) == [0, 1, 2, 3]
    for rank, rows in seen.items():
        last = rows[-1]
        assert last["epoch"] == EPOCHS - 1
        assert (last["host"], last["node_rank"], last["local_rank"]) == (
            hosts[rank // 2],
            rank // 2,
            rank % 2,
        )
        assert (last["world_size"], last["local_world_size"]) == (4, 2)
        assert last["program"] == "lockstep_run.py"  # forked, not started afresh
        env = last["env"]
        # torchrun's variables, the worker's own; none of the launcher's about its process
        assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"]) == (
            str(rank),
            str(rank % 2),
            "4",
        )
        assert (env["LOCAL_WORLD_SIZE"], env["GROUP_RANK"]) == ("2", str(rank // 2))
        assert env["SLURM_PROCID"] is None and env["OMPI_COMM_WORLD_RANK"] is None
        assert env["PMI_RANK"] is None and env["TORCHELASTIC_RUN_ID"] is None
    # the killed rank died before its epoch 1, and a new process of it ran from there
    kill_rank, kill_epoch = KILLED
    assert [r["epoch"] for r in seen[kill_rank]] == list(range(EPOCHS))
    assert seen[kill_rank][kill_epoch - 1]["pid"] != seen[kill_rank][kill_epoch]["pid"]
    state = json.loads((run_dir / "run_state.json").read_text())
    assert state["num_failures"] == 1
    final = run_dir / f"checkpoint_{EPOCHS - 1:06d}"
    assert files_in(final) == [f"rank{r}.txt" for r in range(4)]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("tasks_per_node", [2, 1], ids=["task-per-worker", "task-per-node"])
def test_slurm_srun_runs_one_run_across_two_nodes(slurm, tmp_path, tasks_per_node):
    out, storage = tmp_path / "out", tmp_path / "runs"
    out.mkdir()
    argv = " ".join(run_argv(out, storage, "slurm"))
    job = slurm.sbatch(f"""#!/bin/bash
#SBATCH -N2 --ntasks-per-node={tasks_per_node} -o {out}/job.out
srun {argv}
""")
    state = slurm.wait(job, timeout=480)
    log = (out / "job.out").read_text()
    assert state == "COMPLETED", log
    check_one_run_across_two_hosts(out, storage / "slurm", ("node1", "node2"))


def run_on_hosts(hosts, commands: dict[str, list[str]], timeout: float = 480, **options):
    """Start each host's command at once; wait for all to end (each must succeed); their
    outputs."""
    started = start_on_hosts(hosts, commands, **options)
    outputs = finish(started, timeout)
    for host, proc in started.items():
        assert proc.returncode == 0, f"{host} exited {proc.returncode}:\n{outputs[host][-5000:]}"
    return outputs


def start_on_hosts(hosts, commands: dict[str, list[str]], **options):
    return {
        host: hosts.popen(
            host, argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **options.get(host, {})
        )
        for host, argv in commands.items()
    }


def finish(started, timeout: float = 480) -> dict[str, str]:
    """Each process's output once it ended (killed, if it outlives ``timeout``)."""
    outputs = {}
    try:
        for host, proc in started.items():
            outputs[host] = proc.communicate(timeout=timeout)[0]
    finally:
        for proc in started.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return outputs


@pytest.mark.timeout(600)
@pytest.mark.parametrize("nproc_per_node", [2, 1], ids=["process-per-worker", "agent-per-node"])
def test_torchrun_agents_on_two_hosts_run_one_run(hosts, tmp_path, nproc_per_node):
    out, storage = tmp_path / "out", tmp_path / "runs"
    out.mkdir()
    endpoint = f"{hosts.address('node1')}:29471"
    commands = {
        host: launchers.torchrun(
            run_argv(out, storage, "torchrun")[1:],
            nnodes=2,
            nproc_per_node=nproc_per_node,
            endpoint=endpoint,
            node_rank=node_rank,
        )
        for node_rank, host in enumerate(["node1", "node2"])
    }
    # torchrun as this interpreter's module: the workers import lockstep from this checkout
    commands = {h: [sys.executable, "-m", "torch.distributed.run", *argv[1:]]
                for h, argv in commands.items()}  # fmt: skip
    run_on_hosts(hosts, commands)
    check_one_run_across_two_hosts(out, storage / "torchrun", ("node1", "node2"))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("launcher", ["openmpi", "mpich"])
def test_mpirun_across_two_hosts_runs_one_run(hosts, tmp_path, launcher):
    command = {"openmpi": launchers.openmpi, "mpich": launchers.mpich}[launcher]
    require(launchers.OPEN_MPI if launcher == "openmpi" else launchers.MPICH)
    out, storage = tmp_path / "out", tmp_path / "runs"
    out.mkdir()
    argv = command(hosts, ["node1", "node2"], 2, run_argv(out, storage, launcher))
    run_on_hosts(hosts, {"node1": argv})
    check_one_run_across_two_hosts(out, storage / launcher, ("node1", "node2"))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("job", ["pytorchjob", "trainjob"])
def test_kubeflow_pods_run_one_run(hosts, tmp_path, job):
    out, storage = tmp_path / "out", tmp_path / "runs"
    out.mkdir()
    pods = (
        kubeflow.pytorchjob("mnist", num_workers=1, nproc_per_node=2)
        if job == "pytorchjob"
        else kubeflow.trainjob("tj", num_nodes=2, nproc_per_node=2)
    )
    nodes = ["node1", "node2"]
    for node, pod in zip(nodes, pods, strict=True):
        hosts.alias(node, *pod.dns_names)
    # the container's command is the script itself: one process per pod, 2 workers each
    commands = {node: run_argv(out, storage, job) for node in nodes}
    options = {
        node: {"as_name": pod.name, "env": pod.env} for node, pod in zip(nodes, pods, strict=True)
    }
    run_on_hosts(hosts, commands, **options)
    check_one_run_across_two_hosts(out, storage / job, (pods[0].name, pods[1].name))


def sagemaker_instances(hosts, tmp_path, names, nodes, hyperparameters, channels=None):
    """Each instance's tree and ``train`` command (SageMaker's training toolkit)."""
    source = tmp_path / "source"
    source.mkdir(exist_ok=True)
    shutil.copy(SCRIPT, source / "lockstep_run.py")
    commands, options = {}, {}
    for node, name in zip(nodes, names, strict=True):
        env = sagemaker.tree(
            tmp_path / name,
            current_host=name,
            hosts=names,
            entry_point="lockstep_run.py",
            source_dir=source,
            hyperparameters=hyperparameters,
            channels=channels or {},
        )
        commands[node] = [str(Path(sys.executable).parent / "train")]
        options[node] = {"as_name": name, "env": env}
    return commands, options


@pytest.mark.timeout(600)
def test_sagemaker_instances_run_one_run(hosts, tmp_path):
    require(str(Path(sys.executable).parent / "train"))
    out, storage, data = tmp_path / "out", tmp_path / "runs", tmp_path / "data"
    out.mkdir()
    data.mkdir()
    (data / "rows.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(40)))
    names = sagemaker.instances(hosts, ["node1", "node2"])
    options = run_options(out, storage, "sagemaker") | {"data-from": "SM_CHANNEL_TRAIN"}
    commands, run_options_ = sagemaker_instances(
        hosts, tmp_path, names, ["node1", "node2"], options, {"train": data}
    )
    run_on_hosts(hosts, commands, **run_options_)
    check_one_run_across_two_hosts(out, storage / "sagemaker", tuple(names))
    # every row of the channel, read with lockstep.data, once across the workers
    last = {rank: rows[-1] for rank, rows in seen_by_rank(out).items()}
    assert sum(row["rows"] for row in last.values()) == 40
    # the final checkpoint in the driver's model directory, which SageMaker uploads
    model = tmp_path / names[0] / "model"
    assert files_in(model) == [f"rank{r}.txt" for r in range(4)]
    assert all((tmp_path / name / "output" / "success").exists() for name in names)


@pytest.mark.timeout(600)
def test_sagemaker_keeps_checkpoints_across_jobs_and_says_why_one_failed(hosts, tmp_path):
    """One instance: the run goes to the job's checkpoint directory, where a later job
    with the same checkpoint location finds it and continues; a failure's first 1,024
    characters are the job's failure reason."""
    require(str(Path(sys.executable).parent / "train"))
    out = tmp_path / "out"
    out.mkdir()
    (name,) = sagemaker.instances(hosts, ["node1"])
    base = tmp_path / name
    job = {"out": str(out), "workers": 2, "epochs": 2}
    commands, options = sagemaker_instances(hosts, tmp_path, [name], ["node1"], job)
    run_on_hosts(hosts, commands, **options)
    run_dir = base / "checkpoints" / "lockstep_run-sagemaker"
    assert json.loads((run_dir / "run_state.json").read_text())["training_iteration"] == 2
    # the next job: the same checkpoints (SageMaker downloads them), a new tree otherwise
    kept = tmp_path / "kept"
    shutil.move(base / "checkpoints", kept)
    shutil.rmtree(base)
    commands, options = sagemaker_instances(hosts, tmp_path, [name], ["node1"], job | {"epochs": 4})
    shutil.rmtree(base / "checkpoints")
    shutil.move(kept, base / "checkpoints")
    run_on_hosts(hosts, commands, **options)
    epochs = [row["epoch"] for row in seen_by_rank(out)[0]]
    assert epochs == [0, 1, 2, 3]  # the second job ran epochs 2 and 3 only
    assert files_in(base / "model") == ["rank0.txt", "rank1.txt"]
    # a job whose run fails
    shutil.rmtree(base)
    failing = job | {"epochs": 4, "fail-at": 0}
    commands, options = sagemaker_instances(hosts, tmp_path, [name], ["node1"], failing)
    proc = hosts.popen("node1", commands["node1"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, **options["node1"])  # fmt: skip
    output = proc.communicate(timeout=300)[0]
    assert proc.returncode != 0, output
    reason = (base / "output" / "failure").read_text()
    assert reason.startswith("WorkerGroupError: Training failed: rank 0 (pid ")
    assert "raised InjectedFailure: injected failure on rank 0 at epoch 0" in reason
    assert len(reason) <= 1024


def wait_for(path: Path, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.2)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("signal_name", ["TERM", "USR1"])
def test_slurm_signal_preempts_and_the_requeued_job_finishes_the_run(slurm, tmp_path, signal_name):
    """SIGTERM (scancel, the time limit) or SLURM's warning before the time limit
    (``--signal=USR1@90``): the next report's checkpoint is committed, every process
    exits, the job is requeued, and the requeued job continues the run to its end; with
    no name given, the run is named after the job, and that is how it is found again."""
    out, storage = tmp_path / "out", tmp_path / "runs"
    out.mkdir()
    options = run_options(out, storage, "") | {"epochs": "8", "sleep-s": "0.5"}
    del options["kill-rank"], options["kill-epoch"]
    argv = " ".join([sys.executable, SCRIPT, *(f"--{k}={v}" for k, v in options.items())])
    job = slurm.sbatch(f"""#!/bin/bash
#SBATCH -N2 --ntasks-per-node=2 --requeue --open-mode=append -o {out}/job.out
srun {argv}
""")
    run_dir = storage / f"lockstep_run-slurm-{job}"
    wait_for(run_dir / "checkpoint_000001")
    slurm.command(["scancel", f"--signal={signal_name}", str(job)])  # to every task of the job
    state = slurm.wait(job, {"COMPLETED", "FAILED", "CANCELLED"}, timeout=600)
    log = (out / "job.out").read_text()
    assert state == "COMPLETED", log
    # requeued once, by lockstep: SLURM requeues no job on a signal by itself (the
    # message's line may be lost with the job's output when the requeue stops the job)
    assert slurm.job(job)["Restarts"] == "1", log
    # the code after fit() ran once: in the requeued job, at the end of the run
    after = [json.loads(p.read_text()) for p in out.glob("after-fit-*.json")]
    assert [(a["host"], a["metrics"]) for a in after] == [("node1", {"epoch": 7})]
    state_file = json.loads((run_dir / "run_state.json").read_text())
    assert state_file["training_iteration"] == 8
    for rank, rows in seen_by_rank(out).items():
        epochs = [row["epoch"] for row in rows]
        # the requeued job went on from the checkpoint committed on the signal: no epoch
        # was lost, at most the one in flight ran again
        assert sorted(set(epochs)) == list(range(8)), (rank, epochs)
        assert len(epochs) - len(set(epochs)) <= 1, (rank, epochs)


def torchrun_on_two_hosts(hosts, argv: list[str], nproc_per_node: int = 2) -> dict[str, list[str]]:
    """A torchrun agent's command on node1 and node2 (static rendezvous), with this
    interpreter: its workers import lockstep from this checkout."""
    endpoint = f"{hosts.address('node1')}:29471"
    return {
        host: [sys.executable, "-m", "torch.distributed.run", *launchers.torchrun(
            argv[1:], nnodes=2, nproc_per_node=nproc_per_node, endpoint=endpoint,
            node_rank=node_rank)[1:]]
        for node_rank, host in enumerate(["node1", "node2"])
    }  # fmt: skip


@pytest.mark.timeout(600)
def test_torch_process_group_spans_two_slurm_nodes(slurm, tmp_path):
    """TorchTrainer's gloo group across the hosts: every rank's all-reduce sums all four,
    before and after a worker on the second host is killed."""
    out, storage = tmp_path / "out", tmp_path / "runs"
    out.mkdir()
    argv = " ".join([*run_argv(out, storage, "torch"), "--torch"])
    job = slurm.sbatch(f"""#!/bin/bash
#SBATCH -N2 --ntasks-per-node=2 -o {out}/job.out
srun {argv}
""")
    assert slurm.wait(job, timeout=480) == "COMPLETED", (out / "job.out").read_text()
    check_one_run_across_two_hosts(out, storage / "torch", ("node1", "node2"))
    for rows in seen_by_rank(out).values():
        assert {row["sum"] for row in rows} == {10.0}


BACKEND_SCRIPT = str(Path(__file__).resolve().parents[1] / "cluster" / "backend_run.py")


def check_tensorflow(seen, addresses, metrics):
    """Each worker's TF_CONFIG lists both nodes by their own addresses (never loopback),
    with its own index; MultiWorkerMirroredStrategy's all-reduce sums both ranks."""
    for rank, row in seen.items():
        workers = row["tf_config"]["cluster"]["worker"]
        assert [w.rsplit(":", 1)[0] for w in workers] == addresses
        assert row["tf_config"]["task"] == {"type": "worker", "index": rank}
        assert row["sum"] == 3.0
    assert seen[0]["tf_config"]["cluster"] == seen[1]["tf_config"]["cluster"]
    assert metrics == {"sum": 3.0}


def check_gbdt(seen, metrics, metric, value):
    """One model from both shards (see backend_run.py): 5 below x = 0.5 and 9 above (a
    single shard's would say 0 and 4, or 10 and 14), the same on both ranks; the metric
    over both shards' rows."""
    for row in seen.values():
        assert row["predictions"] == pytest.approx([5.0, 9.0], abs=0.01)
    assert seen[0]["model"] == seen[1]["model"]
    assert metrics[metric] == pytest.approx(value, abs=0.5)


def check_xgboost(seen, addresses, metrics):
    assert [(row["world_size"], row["sum"]) for row in seen.values()] == [(2, 3.0)] * 2
    check_gbdt(seen, metrics, "train-rmse", 5.0)


def check_lightgbm(seen, addresses, metrics):
    """The machines list holds both hosts' addresses; each worker listens on its own."""
    machines = seen[0]["network"]["machines"].split(",")
    assert [m.rsplit(":", 1)[0] for m in machines] == addresses
    for rank, row in seen.items():
        assert row["network"]["machines"] == seen[0]["network"]["machines"]
        assert machines[rank].endswith(f":{row['network']['local_listen_port']}")
        assert row["network"]["num_machines"] == 2
    check_gbdt(seen, metrics, "train-l2", 25.0)


def check_horovod(seen, addresses, metrics):
    """hvd.allreduce across the hosts: one worker on each of two nodes, the rendezvous
    server on the driver's node address, gloo on each node's own interface."""
    for row in seen.values():
        assert row["sizes"] == [2, 1, 2]  # size, local size, cross size
        assert row["sum"] == 3.0
        assert row["env"] == {"HOROVOD_GLOO_RENDEZVOUS_ADDR": addresses[0],
                              "HOROVOD_GLOO_IFACE": "host0"}  # fmt: skip
    assert metrics == {"sum": 3.0}


BACKEND_CHECKS = {
    "tensorflow": check_tensorflow,
    "xgboost": check_xgboost,
    "lightgbm": check_lightgbm,
    "horovod": check_horovod,
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", list(BACKEND_CHECKS))
def test_every_backend_runs_across_two_hosts(hosts, tmp_path, backend):
    """A real 2-worker run of each framework backend, one worker on each host (a torchrun
    agent per host starting its node's worker)."""
    out = tmp_path / "out"
    out.mkdir()
    argv = [sys.executable, BACKEND_SCRIPT, backend, f"--out={out}", f"--storage={tmp_path}"]
    run_on_hosts(hosts, torchrun_on_two_hosts(hosts, argv, nproc_per_node=1), timeout=240)
    (after,) = [json.loads(p.read_text()) for p in out.glob("after-fit-*.json")]
    assert after["host"] == "node1"
    seen = {rank: json.loads((out / f"{backend}-rank{rank}.json").read_text()) for rank in (0, 1)}
    assert [seen[rank]["host"] for rank in (0, 1)] == ["node1", "node2"]
    addresses = [hosts.address("node1"), hosts.address("node2")]
    BACKEND_CHECKS[backend](seen, addresses, after["metrics"])


@pytest.mark.timeout(600)
def test_a_hang_on_the_second_host_names_the_rank_with_every_nodes_stacks(hosts, tmp_path):
    out, storage = tmp_path / "out", tmp_path / "runs"
    out.mkdir()
    options = run_options(out, storage, "hang") | {"hang-rank": "3", "epochs": "3"}
    del options["kill-rank"], options["kill-epoch"]
    argv = [sys.executable, SCRIPT, *(f"--{k}={v}" for k, v in options.items())]
    started = start_on_hosts(hosts, torchrun_on_two_hosts(hosts, argv))
    outputs = finish(started)
    assert started["node1"].returncode != 0 and started["node2"].returncode != 0
    assert "rank 3 (pid " in outputs["node1"] and "made no progress for" in outputs["node1"]
    stacks = (storage / "hang" / "errors" / "attempt_0.txt").read_text()
    for rank in range(4):  # every rank's stack, the second host's read there
        assert f"=== rank {rank} " in stacks
    assert "_hang" in stacks.split("=== rank 3 ")[1]


@pytest.mark.timeout(600)
def test_storage_that_a_node_does_not_see_fails_before_training_on_every_node(hosts, tmp_path):
    """Each host gets its own directory under the same name: the second cannot see the
    driver's, as a node without the shared mount."""
    out = tmp_path / "out"
    out.mkdir()
    commands = torchrun_on_two_hosts(hosts, run_argv(out, tmp_path / "runs", "unshared"))
    commands["node2"] = [a.replace(str(tmp_path / "runs"), str(tmp_path / "node2-only"))
                         for a in commands["node2"]]  # fmt: skip
    env = {"LOCKSTEP_JOIN_TIMEOUT_S": "8"}
    started = start_on_hosts(hosts, commands, node1={"env": env}, node2={"env": env})
    outputs = finish(started)
    assert started["node1"].returncode != 0 and started["node2"].returncode != 0
    assert "did not join the run within 8 s" in outputs["node1"]
    assert "storage_path must be a path every node sees" in outputs["node1"]
    assert "found no driver to join in 8 s" in outputs["node2"]
    assert "this node does not see its storage_path" in outputs["node2"]
    assert not list(out.glob("seen-*"))  # no training started


@pytest.mark.timeout(600)
def test_kubeflow_reads_a_failed_run_as_permanent_and_a_preempted_one_as_retryable(hosts, tmp_path):
    """PyTorchJob's restart policy reads the pods' exit statuses: 1-127 permanent,
    128-255 retryable."""
    pods = kubeflow.pytorchjob("exits", num_workers=1, nproc_per_node=2)
    nodes = ["node1", "node2"]
    for node, pod in zip(nodes, pods, strict=True):
        hosts.alias(node, *pod.dns_names)
    options = {
        node: {"as_name": pod.name, "env": pod.env} for node, pod in zip(nodes, pods, strict=True)
    }
    out, storage = tmp_path / "out", tmp_path / "runs"
    out.mkdir()
    failing = [*run_argv(out, storage, "failing"), "--fail-at=0"]
    started = start_on_hosts(hosts, dict.fromkeys(nodes, failing), **options)
    outputs = finish(started)
    assert {n: p.returncode for n, p in started.items()} == {"node1": 1, "node2": 1}, outputs
    # preempted: SIGTERM to every process of both pods, as Kubernetes stops them
    slow = run_options(out, storage, "preempted") | {"epochs": "30", "sleep-s": "0.3"}
    del slow["kill-rank"], slow["kill-epoch"]
    argv = [sys.executable, SCRIPT, *(f"--{k}={v}" for k, v in slow.items())]
    started = start_on_hosts(hosts, dict.fromkeys(nodes, argv), **options)
    wait_for(storage / "preempted" / "checkpoint_000001")
    for proc in started.values():  # every process of the pod: the script's (proc's own,
        pod = psutil.Process(proc.pid)  # hosts.sh execs it) and its workers
        for process in [pod, *pod.children(recursive=True)]:
            process.send_signal(signal.SIGTERM)
    outputs = finish(started)
    assert {n: p.returncode for n, p in started.items()} == {"node1": 130, "node2": 130}, outputs
    state = json.loads((storage / "preempted" / "run_state.json").read_text())
    assert state["latest"] is not None


ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
SCHEDULERS = README.split("## Schedulers: SLURM, torchrun, MPI, Kubeflow, SageMaker", 1)[1]
SCHEDULERS = SCHEDULERS.split("\n## ", 1)[0]


def readme_block(after: str) -> str:
    """The first ``sh`` block of the Schedulers section after the text ``after``."""
    return SCHEDULERS.split(after, 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]


def example_ran(storage: Path, text: str) -> Path:
    """The example's one run under ``storage``, checked: it printed its metrics once."""
    assert text.count("{'epoch': 5, 'loss': ") == 1, text
    (run_dir,) = [p for p in storage.iterdir() if p.name != ".lockstep"]
    state = json.loads((run_dir / "run_state.json").read_text())
    assert state["training_iteration"] == 6
    return run_dir


@pytest.mark.timeout(600)
def test_the_sbatch_example_runs_on_two_slurm_nodes(slurm, tmp_path):
    example = (ROOT / "examples" / "slurm_job.sbatch").read_text()
    for line in readme_block("**SLURM**").splitlines():  # the README shows the example
        assert line in example.splitlines(), line
    storage = tmp_path / "runs"
    job = slurm.sbatch(
        str(ROOT / "examples" / "slurm_job.sbatch"),
        f"--chdir={ROOT}",
        f"--output={tmp_path}/job.out",
        f"--export=ALL,LOCKSTEP_STORAGE_PATH={storage}",
    )
    state = slurm.wait(job, timeout=480)
    log = (tmp_path / "job.out").read_text()
    assert state == "COMPLETED", log
    assert example_ran(storage, log).name == f"lockstep_run-slurm-{job}"  # named after the job


@pytest.mark.timeout(600)
def test_the_readmes_torchrun_line_runs_on_two_hosts(hosts, tmp_path):
    (line,) = readme_block("**torchrun**").strip().splitlines()
    assert line.startswith("torchrun ")
    # torchrun as this interpreter's module: the script imports lockstep from this checkout
    argv = [sys.executable, "-m", "torch.distributed.run", *line.split()[1:]]
    storage = tmp_path / "runs"
    env = {"LOCKSTEP_STORAGE_PATH": str(storage)}
    where = {"env": env, "cwd": ROOT}
    started = start_on_hosts(
        hosts, dict.fromkeys(["node1", "node2"], argv), node1=where, node2=where
    )
    outputs = finish(started)
    assert {h: p.returncode for h, p in started.items()} == {"node1": 0, "node2": 0}, outputs
    example_ran(storage, outputs["node1"] + outputs["node2"])


@pytest.mark.timeout(600)
def test_the_readmes_mpirun_line_runs_on_two_hosts(hosts, tmp_path):
    require(launchers.OPEN_MPI)
    (line,) = readme_block("**MPI**").strip().splitlines()
    argv = line.split()
    assert argv[0] == "mpirun"
    # the hosts' remote-shell agent instead of ssh, and their network (launchers.openmpi)
    subnet = f"{hosts.subnet}.0/24"
    here = ["--allow-run-as-root", "--oversubscribe", "--mca", "plm_rsh_agent", hosts.rsh]
    here += ["--mca", "oob_tcp_if_include", subnet, "--mca", "btl_tcp_if_include", subnet]
    storage = tmp_path / "runs"
    env = {"LOCKSTEP_STORAGE_PATH": str(storage)}
    started = start_on_hosts(hosts, {"node1": [launchers.OPEN_MPI, *here, *argv[1:]]},
                             node1={"env": env, "cwd": ROOT})  # fmt: skip
    output = finish(started)["node1"]
    assert started["node1"].returncode == 0, output
    example_ran(storage, output)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("launcher", ["openmpi", "mpich"])
def test_mpirun_inside_an_sbatch_allocation_runs_one_run(slurm, tmp_path, launcher):
    """Every rank sees the batch step's ``SLURM_PROCID=0`` there: MPI's variables win."""
    require(launchers.OPEN_MPI if launcher == "openmpi" else launchers.MPICH)
    out, storage = tmp_path / "out", tmp_path / "runs"
    out.mkdir()
    argv = run_argv(out, storage, launcher)
    line = (
        launchers.openmpi_in_allocation(slurm.hosts, argv)
        if launcher == "openmpi"
        else launchers.mpich_in_allocation(argv)
    )
    job = slurm.sbatch(f"""#!/bin/bash
#SBATCH -N2 --ntasks-per-node=2 -o {out}/job.out
{" ".join(line)}
""")
    assert slurm.wait(job, timeout=480) == "COMPLETED", (out / "job.out").read_text()
    check_one_run_across_two_hosts(out, storage / launcher, ("node1", "node2"))
