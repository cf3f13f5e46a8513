"""`lockstep doctor`: versions, and which backends can be used here.

A backend that cannot be used comes with the one command that fixes it. Frameworks are
looked up without being imported where that is enough (TensorFlow takes seconds to import);
torch is imported, because whether gloo and NCCL work is only known to it.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

# (name shown, distribution name)
PACKAGES = (
    ("torch", "torch"),
    ("pyarrow", "pyarrow"),
    ("numpy", "numpy"),
    ("pandas", "pandas"),
    ("tensorflow", "tensorflow"),
    ("horovod", "horovod"),
    ("xgboost", "xgboost"),
    ("lightgbm", "lightgbm"),
    ("ray", "ray"),
    ("optuna", "optuna"),
    ("scikit-learn", "scikit-learn"),
    ("matplotlib", "matplotlib"),
)


@dataclass(frozen=True)
class BackendCheck:
    """Whether one backend can be used here; when not, why and the command that fixes it."""

    name: str
    usable: bool
    reason: str = ""
    fix: str = ""


def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution``, or None.

    Example:
        >>> installed_version("surely-not-installed-here") is None
        True
    """
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def _missing(name: str, module: str, fix: str) -> BackendCheck | None:
    if importlib.util.find_spec(module) is None:
        return BackendCheck(name, False, f"{module} is not installed", fix)
    return None


def check_gloo() -> BackendCheck:
    missing = _missing("gloo", "torch", "pip install 'lockstep[torch]'")
    if missing:
        return missing
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        return BackendCheck(
            "gloo",
            False,
            "this torch build has no gloo",
            "pip install --force-reinstall 'lockstep[torch]'",
        )
    return BackendCheck("gloo", True)


def check_nccl() -> BackendCheck:
    missing = _missing("NCCL", "torch", "pip install 'lockstep[torch]'")
    if missing:
        return missing
    import torch
    import torch.distributed as dist

    from lockstep._core import accelerators

    cuda_wheel = "pip install torch --index-url https://download.pytorch.org/whl/cu124"
    if not accelerators.visible_gpus():
        return BackendCheck(
            "NCCL",
            False,
            "no NVIDIA GPU is visible here (gloo trains on CPUs)",
            "nothing to fix for CPU training; NCCL needs a machine with an NVIDIA GPU and "
            "its driver",
        )
    if torch.version.cuda is None:
        return BackendCheck("NCCL", False, "this torch build has no CUDA", cuda_wheel)
    if not dist.is_available() or not dist.is_nccl_available():
        return BackendCheck("NCCL", False, "this torch build has no NCCL", cuda_wheel)
    if not torch.cuda.is_available():
        return BackendCheck(
            "NCCL",
            False,
            "torch cannot use the GPUs",
            f"install an NVIDIA driver that supports CUDA {torch.version.cuda} (the CUDA "
            "version nvidia-smi shows must be at least that)",
        )
    return BackendCheck("NCCL", True)


def check_tensorflow() -> BackendCheck:
    return _missing("TensorFlow", "tensorflow", "pip install 'lockstep[tensorflow]'") or (
        BackendCheck("TensorFlow", True)
    )


def check_horovod() -> BackendCheck:
    fix = "HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 pip install --no-cache-dir horovod"
    return _missing("Horovod", "horovod", fix) or BackendCheck("Horovod", True)


def check_xgboost() -> BackendCheck:
    missing = _missing("XGBoost", "xgboost", "pip install 'lockstep[xgboost]'")
    if missing:
        return missing
    found = installed_version("xgboost") or "0"
    if int(found.split(".")[0]) < 2:
        return BackendCheck(
            "XGBoost",
            False,
            f"xgboost {found} has no collective module (2.0 or newer needed)",
            "pip install 'lockstep[xgboost]'",
        )
    return BackendCheck("XGBoost", True)


def check_lightgbm() -> BackendCheck:
    return _missing("LightGBM", "lightgbm", "pip install 'lockstep[lightgbm]'") or (
        BackendCheck("LightGBM", True)
    )


def check_ray() -> BackendCheck:
    return _missing("Ray", "ray", "pip install 'lockstep[ray]'") or BackendCheck("Ray", True)


CHECKS: tuple[Callable[[], BackendCheck], ...] = (
    check_gloo,
    check_nccl,
    check_tensorflow,
    check_horovod,
    check_xgboost,
    check_lightgbm,
    check_ray,
)


def gpu_lines() -> list[str]:
    """This machine's GPUs as ``nvidia-smi`` lists them (name, memory, driver), and the
    CUDA and NCCL versions of the installed torch."""
    from lockstep._core import accelerators

    rows = accelerators.nvidia_smi("index", "name", "memory.total", "driver_version")
    if not rows:
        return ["GPUs: none (no NVIDIA driver: nvidia-smi is missing or lists no GPU)"]
    lines = ["GPUs:"]
    for index, name, memory, driver in rows:
        lines.append(f"  {index:<3}{name}, {memory} MiB, driver {driver}")
    lines.append(f"  torch's CUDA {_torch_cuda()}, NCCL {_nccl_version()}")
    return lines


def _torch_cuda() -> str:
    if importlib.util.find_spec("torch") is None:
        return "none (torch is not installed)"
    import torch

    return torch.version.cuda or "none (a CPU build of torch)"


def _nccl_version() -> str:
    """NCCL's version as torch's build has it; asking does not initialise CUDA."""
    if importlib.util.find_spec("torch") is None:
        return "none (torch is not installed)"
    import torch

    try:
        found = torch.cuda.nccl.version()  # type: ignore[no-untyped-call]
    except (AttributeError, RuntimeError):
        return "none (this torch build has no NCCL)"
    return ".".join(str(part) for part in found) if isinstance(found, tuple) else str(found)


def _safe(check: Callable[[], BackendCheck]) -> BackendCheck:
    """A check that fails is a finding, not a crash of the doctor."""
    name = check.__name__.removeprefix("check_")
    try:
        return check()
    except Exception as exc:
        return BackendCheck(name, False, f"checking it failed: {type(exc).__name__}: {exc}")


def launch_lines() -> list[str]:
    """What launched this process (a scheduler, a launcher, nothing) and the topology a
    run started here would have."""
    from lockstep._core import flags
    from lockstep._internal.execution.environments.base import LaunchError
    from lockstep._internal.execution.resolve import detect_launch

    setting = f"LOCKSTEP_CLUSTER={flags.CLUSTER.get()}"
    try:
        launch = detect_launch(flags.launch_environment())
    except LaunchError as exc:
        return [f"  {'error':<14}{exc}"]
    if launch is None:
        return [f"  {'nothing':<14}a run uses this machine's processes ({setting})"]
    n = launch.num_processes
    lines = [
        f"  {'launcher':<14}{launch.launcher} ({setting})",
        f"  {'this process':<14}{launch.process_rank} of {n}, {launch.local_process_rank} of "
        f"{launch.processes_per_node} on its node"
        + (
            f", node {launch.node_rank} of {launch.num_nodes}"
            if launch.node_rank is not None
            else ""
        ),
        f"  {'allocation':<14}{launch.allocation()}",
    ]
    if launch.hosts:
        lines.append(f"  {'nodes':<14}{', '.join(launch.hosts)}")
    if launch.slurm_job is not None:
        lines.append(
            f"  {'SLURM job':<14}{launch.slurm_job}: requeued when preempted, if it may be"
        )
    if launch.resizable:
        lines += _elastic_lines(launch.variables)
    lines.append(
        f"  {'run name':<14}lockstep_run-{launch.job_id or '<date>'} unless RunConfig(name=...)"
    )
    if n > 1:
        role = "drives the run" if launch.is_driver else "joins the driver's run (process 0)"
        lines.append(
            f"  {'topology':<14}this process {role}; num_workers={n} (or a multiple k*{n}) "
            f"gives each of the {n} processes 1 (or k) workers, ranks contiguous per node"
        )
    else:
        lines.append(f"  {'topology':<14}one process: every worker on this node")
    return lines


def _elastic_lines(variables: dict[str, str]) -> list[str]:
    """What torchrun's elastic rendezvous does to a run, with its restarts so far, and
    whether a node can join it."""
    restarts = variables.get("TORCHELASTIC_RESTART_COUNT", "?")
    allowed = variables.get("TORCHELASTIC_MAX_RESTARTS", "?")
    lines = [
        f"  {'elastic':<14}num_workers=(min, max) takes this rendezvous's world; a node "
        f"joining or lost starts the run again from its latest checkpoint (restart "
        f"{restarts}; --max-restarts={allowed} for failures and lost nodes)"
    ]
    from lockstep._core import flags

    if flags.launch_environment().get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE") != "1":
        lines.append(
            f"  {'warning':<14}a node joining this job later fails: torch shares its "
            "rendezvous store with the workers, and publishes its address once. HINT: start "
            "torchrun with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"
        )
    return lines


def report() -> list[str]:
    """The lines `lockstep doctor` prints."""
    lines = [
        f"lockstep {installed_version('lockstep') or 'unknown'}",
        f"Python {platform.python_version()} ({sys.executable})",
        f"{platform.platform()}, {os.cpu_count()} CPUs",
        "",
        "versions:",
    ]
    for shown, distribution in PACKAGES:
        lines.append(f"  {shown:<14}{installed_version(distribution) or 'not installed'}")
    lines += ["", "launched by:", *launch_lines()]
    lines += ["", *gpu_lines(), "", "backends:"]
    for check in CHECKS:
        result = _safe(check)
        if result.usable:
            lines.append(f"  {result.name:<12}ok")
        else:
            lines.append(f"  {result.name:<12}not usable: {result.reason}")
            if result.fix:
                lines.append(f"  {'':<12}fix: {result.fix}")
    return lines


def main() -> int:
    for line in report():
        print(line)
    return 0
