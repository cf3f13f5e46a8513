"""Which launcher started this process: each environment tried in order, overridable.

The order: torchrun (it also runs inside SLURM jobs and Kubeflow pods), MPI (under
``mpirun`` inside an ``sbatch`` allocation every rank sees ``SLURM_PROCID=0``), SLURM,
Kubeflow, SageMaker. ``LOCKSTEP_CLUSTER`` picks one (``off``: none, a run on this machine)
and ``LOCKSTEP_CLUSTER_IGNORE`` leaves some out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from lockstep._internal.execution.environments import (
    kubeflow,
    mpi,
    sagemaker,
    slurm,
    torchelastic,
)
from lockstep._internal.execution.environments.base import Launch, LaunchError

ENVIRONMENTS: dict[str, Callable[[Mapping[str, str]], Launch | None]] = {
    "torchrun": torchelastic.detect,
    "mpi": mpi.detect,
    "slurm": slurm.detect,
    "kubeflow": kubeflow.detect,
    "sagemaker": sagemaker.detect,
}


def detect(env: Mapping[str, str], choice: str = "auto", ignore: str = "") -> Launch | None:
    """The launcher that started this process, or None (a process started by hand).

    ``choice`` is ``LOCKSTEP_CLUSTER``'s value: ``"auto"``, ``"off"`` or an environment's
    name (that one must match); ``ignore`` names environments to leave out.

    Example:
        >>> env = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_PROCID": "0",
        ...        "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
        ...        "SLURM_NNODES": "1", "PMI_RANK": "1", "PMI_SIZE": "2",
        ...        "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}
        >>> detect(env).launcher, detect(env, ignore="mpi").launcher
        ('MPICH mpirun', 'SLURM srun')
        >>> detect(env, choice="off") is None
        True
    """
    choice = choice.strip().lower() or "auto"
    if choice == "off":
        return None
    skipped = {name.strip().lower() for name in ignore.split(",") if name.strip()}
    unknown = sorted((skipped | ({choice} - {"auto"})) - set(ENVIRONMENTS))
    if unknown:
        raise LaunchError(
            f"unknown launcher(s) {unknown} in LOCKSTEP_CLUSTER / LOCKSTEP_CLUSTER_IGNORE. "
            f"HINT: use auto, off, or one of {', '.join(ENVIRONMENTS)}"
        )
    if choice != "auto":
        found = ENVIRONMENTS[choice](env)
        if found is None:
            raise LaunchError(
                f"LOCKSTEP_CLUSTER={choice} but this process was not started by it (its "
                "variables are not set). HINT: launch with it, or set LOCKSTEP_CLUSTER=auto"
            )
        return _in_slurm_job(found, env)
    for name, environment in ENVIRONMENTS.items():
        if name not in skipped and (found := environment(env)) is not None:
            return _in_slurm_job(found, env)
    return None


def _in_slurm_job(launch: Launch, env: Mapping[str, str]) -> Launch:
    """``launch``, with the SLURM job it runs in (whatever launched it)."""
    if "SLURM_JOB_ID" not in env:
        return launch
    return replace(launch, slurm_job=slurm.job_id(env))
