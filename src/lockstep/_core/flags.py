"""Every environment variable lockstep reads, declared once.

They are debugging knobs; anything a user needs is a config field. Nothing else in lockstep
reads ``os.environ`` for its own settings.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T", int, float, str, bool)


@dataclass(frozen=True)
class Flag(Generic[T]):
    """One environment variable: its name, type, default and what it does."""

    name: str
    default: T
    doc: str

    def get(self) -> T:
        raw = os.environ.get(self.name)
        if raw is None or raw == "":
            return self.default
        kind = type(self.default)
        try:
            if kind is bool:
                return raw.strip().lower() in {"1", "true", "yes", "on"}
            return kind(raw)
        except ValueError as exc:
            raise ValueError(
                f"environment variable {self.name}={raw!r} is not a valid {kind.__name__}. "
                f"HINT: unset it or give a {kind.__name__} (default {self.default!r})"
            ) from exc


WORKER_SHUTDOWN_GRACE_S = Flag(
    "LOCKSTEP_WORKER_SHUTDOWN_GRACE_S",
    2.0,
    "Seconds a worker gets after SIGTERM to exit before it is killed with SIGKILL.",
)
PROGRESS_INTERVAL_S = Flag(
    "LOCKSTEP_PROGRESS_INTERVAL_S",
    5.0,
    "Seconds between plain progress lines when the output is not a terminal.",
)
DEFAULT_STORAGE_PATH = Flag(
    "LOCKSTEP_STORAGE_PATH",
    "~/lockstep_results",
    "Where runs go when RunConfig(storage_path=...) is not given.",
)
RAY_ADDRESS = Flag(
    "RAY_ADDRESS",
    "",
    "Ray's own variable: the address of a Ray cluster. When set, workers run on Ray.",
)
MLFLOW_ALLOW_FILE_STORE = Flag(
    "MLFLOW_ALLOW_FILE_STORE",
    "",
    "MLflow's own variable: 'true' lets MLflow 3 open a file store (file:///path). "
    "lockstep's MLflow callback opens an explicit file:// tracking_uri with it set.",
)
WORKER_START = Flag(
    "LOCKSTEP_WORKER_START",
    "fork",
    "How local workers start: 'fork' (from the fork server, warm, when it is safe) or "
    "'spawn' (a fresh Python process every time, which re-imports everything).",
)
PIN_WORKERS = Flag(
    "LOCKSTEP_PIN_WORKERS",
    False,
    "Whether local workers are each bound to CPUs of their own when together they take "
    "every CPU (resources_per_worker CPUs each). Off by default: the kernel moves them "
    "freely, which is faster wherever the driver or other programs share the CPUs.",
)
CUDA_VISIBLE_DEVICES = Flag(
    "CUDA_VISIBLE_DEVICES",
    "",
    "CUDA's own: the GPUs this driver may use; each local worker gets its share of them.",
)
TF_USE_LEGACY_KERAS = Flag(
    "TF_USE_LEGACY_KERAS",
    "",
    "TensorFlow's own: '1' makes tf.keras the Keras 2 package tf_keras, '0' Keras 3. When "
    "unset and tf_keras is installed, lockstep sets it to '1' for TensorFlow runs.",
)
ROOT_CAUSE_WAIT_S = Flag(
    "LOCKSTEP_ROOT_CAUSE_WAIT_S",
    2.0,
    "Seconds the driver waits, when the only failures it has seen are consequences (a "
    "closed connection, a timed-out collective), for the failure that caused them.",
)
JOURNAL_DIR = Flag(
    "LOCKSTEP_JOURNAL_DIR",
    "",
    "Local directory of the journal that keeps a remote run's result rows until they are "
    "uploaded (default: the system's temporary directory).",
)
FSYNC_ROWS = Flag(
    "LOCKSTEP_FSYNC_ROWS",
    False,
    "Whether every result row is fsync'd before report() returns, so that a crash of the "
    "machine loses none; by default rows are fsync'd with each checkpoint commit (a killed "
    "driver loses none either way).",
)
SEARCH_PROCESS = Flag(
    "LOCKSTEP_SEARCH_PROCESS",
    True,
    "Whether a search algorithm that asks for it (OptunaSearch) runs in a forked process of "
    "its own while an experiment runs (when the driver has no other thread); off keeps it "
    "in the driver.",
)
FAULT_POINT = Flag(
    "LOCKSTEP_FAULT_POINT",
    "",
    "For lockstep's own tests of driver deaths: 'name' or 'name:n' makes the process kill "
    "itself with SIGKILL the n-th time (default: the first) it reaches the named point "
    "(see fault_point).",
)

_fault_hits: dict[str, int] = {}


def fault_point(name: str) -> None:
    """Die here (SIGKILL, no clean-up) when ``LOCKSTEP_FAULT_POINT`` names this point.

    The points: ``run_opened`` (the run is recorded, no worker started yet), ``row_written``
    (a step's row is durable, its checkpoint not yet committed), ``checkpoint_moved`` (a
    checkpoint directory is in place, the run state not yet saved), ``step_recorded``
    (a step is complete, its row and checkpoint durable) in the driver, and
    ``step_ended`` in a worker (the last rank to reach a step wrote its row and released
    the others, before it sent its own report: see ``execution.step_page``). Without the
    variable this costs one dictionary lookup.
    """
    spec = FAULT_POINT.get()
    if not spec:
        return
    point, _, count = spec.partition(":")
    if point != name:
        return
    _fault_hits[name] = _fault_hits.get(name, 0) + 1
    if _fault_hits[name] >= int(count or 1):
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


CLUSTER = Flag(
    "LOCKSTEP_CLUSTER",
    "auto",
    "What launched this process: 'auto' (detected, in the order torchrun, mpi, slurm, "
    "kubeflow, sagemaker), 'off' (none: a run on this machine), or one of those names "
    "(that one only; its variables must be set).",
)
CLUSTER_IGNORE = Flag(
    "LOCKSTEP_CLUSTER_IGNORE",
    "",
    "Launchers detection skips, comma-separated (e.g. 'slurm' inside an allocation whose "
    "processes another tool started).",
)
NODE_ADDRESS = Flag(
    "LOCKSTEP_NODE_ADDRESS",
    "",
    "The address this node's workers use and, on the driver's node, where the driver "
    "listens, in a run across nodes (default: the address of the interface that reaches "
    "the other nodes).",
)
JOIN_TIMEOUT_S = Flag(
    "LOCKSTEP_JOIN_TIMEOUT_S",
    300.0,
    "Seconds the processes of a run across nodes wait for each other to start (the driver "
    "for every node, a node for the driver's address in storage_path).",
)


def launch_environment() -> dict[str, str]:
    """The variables a launcher or scheduler set for this process (SLURM_*, RANK, ...):
    what the cluster environments read to find where the process runs."""
    return dict(os.environ)
