"""SLURM: ``srun`` starts the tasks of a job step, on the nodes of the job's allocation.

Every task has ``SLURM_JOB_ID``, ``SLURM_STEP_ID``, ``SLURM_PROCID`` (its rank),
``SLURM_NTASKS``, ``SLURM_LOCALID``, ``SLURM_NODEID``, ``SLURM_NNODES`` and the step's
nodes in ``SLURM_STEP_NODELIST`` (compressed: ``node[042-043,045]``). A bare allocation's
shell (``salloc``, or an ``sbatch`` script before its ``srun``) has the job's variables
but no step of its own: the script then runs as one process, on this node.

A requeued job keeps its id; ``SLURM_RESTART_COUNT`` counts its runs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from lockstep._internal.execution.environments.base import (
    Launch,
    integer,
    optional_integer,
    read,
)

LAUNCHER = "SLURM srun"
VARIABLES = (
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_NNODES",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_STEP_NUM_NODES",
    "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_CPUS_ON_NODE",
    "SLURM_GPUS_ON_NODE",
    "SLURM_RESTART_COUNT",
)
# Step ids above this are SLURM's own steps (the batch script's, the extern one), not srun's.
_LAST_USER_STEP = 0xFFFFFFF0


def detect(env: Mapping[str, str]) -> Launch | None:
    """This process in a SLURM job, or None outside one.

    Example:
        >>> launch = detect({"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0",
        ...     "SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1",
        ...     "SLURM_NODEID": "1", "SLURM_NNODES": "2",
        ...     "SLURM_STEP_NODELIST": "node[042-043]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)"})
        >>> launch.process_rank, launch.node_rank, launch.hosts, launch.job_id
        (3, 1, ('node042', 'node043'), 'slurm-42')
        >>> detect({"SLURM_JOB_ID": "42", "SLURM_NNODES": "2"}).num_processes  # salloc
        1
    """
    if "SLURM_JOB_ID" not in env:
        return None
    job = job_id(env)
    step = optional_integer(env, "SLURM_STEP_ID")
    if step is None or step >= _LAST_USER_STEP or "SLURM_PROCID" not in env:
        return _allocation_shell(env, job)
    nodes = expand_nodelist(env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST", ""))
    restarts = env.get("SLURM_RESTART_COUNT", "0")
    return Launch(
        name="slurm",
        launcher=LAUNCHER,
        process_rank=integer(env, "SLURM_PROCID", LAUNCHER),
        num_processes=integer(env, _step(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"), LAUNCHER),
        local_process_rank=integer(env, "SLURM_LOCALID", LAUNCHER),
        processes_per_node=_tasks_here(env),
        num_nodes=integer(env, _step(env, "SLURM_STEP_NUM_NODES", "SLURM_NNODES"), LAUNCHER),
        node_rank=integer(env, "SLURM_NODEID", LAUNCHER),
        hosts=tuple(nodes),
        job_id=f"slurm-{job}",
        launch_id=f"slurm-{job}-{step}-{restarts}",
        cpus_per_node=optional_integer(env, "SLURM_CPUS_ON_NODE"),
        gpus_per_node=optional_integer(env, "SLURM_GPUS_ON_NODE"),
        variables=read(env, *VARIABLES),
    )


def _allocation_shell(env: Mapping[str, str], job: str) -> Launch:
    """A process of the job that ``srun`` did not start: the only one of its run."""
    return Launch(
        name="slurm",
        launcher="SLURM allocation (no srun)",
        process_rank=0,
        num_processes=1,
        local_process_rank=0,
        processes_per_node=1,
        num_nodes=1,
        node_rank=0,
        job_id=f"slurm-{job}",
        launch_id=f"slurm-{job}-shell-{env.get('SLURM_RESTART_COUNT', '0')}",
        cpus_per_node=optional_integer(env, "SLURM_CPUS_ON_NODE"),
        gpus_per_node=optional_integer(env, "SLURM_GPUS_ON_NODE"),
        variables=read(env, *VARIABLES),
    )


def _step(env: Mapping[str, str], step_variable: str, job_variable: str) -> str:
    """The step's own count where srun sets it (a step may use part of the job)."""
    return step_variable if step_variable in env else job_variable


def job_id(env: Mapping[str, str]) -> str:
    """The id ``scontrol requeue`` takes: an array task's ``ARRAYJOB_TASK``, else the job's."""
    array, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"{array}_{task}"
    return env["SLURM_JOB_ID"]


def _tasks_here(env: Mapping[str, str]) -> int:
    """The tasks of the step on this node, from ``SLURM_STEP_TASKS_PER_NODE`` (``2(x3),1``)
    and this node's number; the tasks split evenly when it is not set."""
    node = integer(env, "SLURM_NODEID", LAUNCHER)
    counts = tasks_per_node(env.get("SLURM_STEP_TASKS_PER_NODE", ""))
    if node < len(counts):
        return counts[node]
    return max(1, integer(env, "SLURM_NTASKS", LAUNCHER) // integer(env, "SLURM_NNODES", LAUNCHER))


def tasks_per_node(spec: str) -> list[int]:
    """SLURM's tasks-per-node list, expanded.

    Example:
        >>> tasks_per_node("2(x3),1")
        [2, 2, 2, 1]
    """
    counts: list[int] = []
    for part in filter(None, spec.split(",")):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if match is None:
            return []
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def expand_nodelist(nodelist: str) -> list[str]:
    """SLURM's compressed host list, expanded in its order, zero padding kept.

    Example:
        >>> expand_nodelist("node[042-043,045],gpu7")
        ['node042', 'node043', 'node045', 'gpu7']
        >>> expand_nodelist("rack[1-2]-n[01-02]")
        ['rack1-n01', 'rack1-n02', 'rack2-n01', 'rack2-n02']
    """
    return [host for item in _top_level_items(nodelist) for host in _expand_item(item)]


def _top_level_items(nodelist: str) -> list[str]:
    """``a[1,2],b`` -> ``["a[1,2]", "b"]``: commas inside brackets belong to a range."""
    items, depth, current = [], 0, ""
    for char in nodelist.strip():
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    return [item for item in [*items, current] if item]


def _expand_item(item: str) -> list[str]:
    match = re.search(r"\[([^\]]*)\]", item)
    if match is None:
        return [item]
    head, tail = item[: match.start()], item[match.end() :]
    return [f"{head}{value}{rest}" for value in _range_values(match.group(1)) for rest in
            _expand_item(tail)]  # fmt: skip


def _range_values(ranges: str) -> list[str]:
    """``042-043,045`` -> ``["042", "043", "045"]``: each number as wide as its bound."""
    values = []
    for part in ranges.split(","):
        low, _, high = part.partition("-")
        width = len(low)
        values += [str(n).zfill(width) for n in range(int(low), int(high or low) + 1)]
    return values


def requeue(job: str) -> str:
    """Requeue SLURM job ``job`` as Lightning does for ``sbatch --requeue``: when the job
    may be requeued (``Requeue=1``) and is a batch job; say what was done. The requeued
    job runs the script again, which continues the run from its directory."""
    import shutil
    import subprocess

    if shutil.which("scontrol") is None:
        return f"SLURM job {job} is not requeued: scontrol is not on PATH"
    shown = subprocess.run(
        ["scontrol", "show", "job", job], capture_output=True, text=True, timeout=30, check=False
    ).stdout
    fields = dict(re.findall(r"(\w+)=(\S*)", shown))
    if fields.get("Requeue") != "1" or fields.get("BatchFlag") != "1":
        return (
            f"SLURM job {job} is not requeued (Requeue={fields.get('Requeue', '?')}, "
            f"BatchFlag={fields.get('BatchFlag', '?')}): submit it with sbatch --requeue "
            "to have it continue by itself"
        )
    done = subprocess.run(
        ["scontrol", "requeue", job], capture_output=True, text=True, timeout=30, check=False
    )
    if done.returncode != 0:
        return f"scontrol requeue {job} failed: {done.stderr.strip()}"
    return f"SLURM job {job} requeued: it continues from the latest checkpoint"
