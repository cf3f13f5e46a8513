"""One ``fit()`` as the execution plan says, with what the job around it asks for.

- In a cluster run, every launched process but the driver (process rank 0) joins the run
  here and leaves the program when it ends, with the run's outcome as its exit status:
  the script's code after ``fit()`` runs once, in the driver.
- The driver waits for the others to join, then runs the controller on their workers.
- Under torchrun's elastic rendezvous, a launched process lost (its node gone) stops the
  run at once with a retryable status: torchrun starts every process again with the
  nodes left, and the new driver continues the run from its latest checkpoint.
- Under SLURM, SIGUSR1 (``sbatch --signal=USR1@90``: the warning before the time limit)
  is a preemption, as SIGTERM is; a preempted run's job is requeued when it may be.
- Under SageMaker, the final checkpoint's files go to the model directory, and a failure's
  first 1,024 characters to ``output/failure``; a preemption deadline longer than the
  120 s SageMaker gives a job after its SIGTERM is refused before anything starts.

Exit statuses follow Kubeflow's restart policy: 1-127 a permanent failure (the run
failed), 128-255 a retryable one (130: the run was stopped and can continue).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from lockstep._core import flags, storage
from lockstep._core.errors import TrainingInterrupted
from lockstep._core.result import Result
from lockstep._internal.execution.environments import sagemaker, slurm
from lockstep._internal.execution.environments.base import Launch
from lockstep._internal.execution.plan import ExecutionPlan
from lockstep._internal.execution.worker_group.cluster import member
from lockstep._internal.execution.worker_group.cluster.driver import DriverSession

FAILED_EXIT = 1
# SageMaker's SIGKILL follows its SIGTERM after this long; the run keeps a margin to exit.
SAGEMAKER_STOP_S = 120.0
SAGEMAKER_DEADLINE_S = 100.0


class Controller(Protocol):
    """What this module needs of the controller."""

    def run(self) -> Result: ...

    def request_preemption(self, reason: str) -> None: ...

    def request_stop(self, reason: str) -> None: ...


def fit(
    plan: ExecutionPlan,
    storage_root: Callable[[], storage.StorageDir],
    make_controller: Callable[[DriverSession | None], Controller],
    *,
    preemption_deadline_s: float | None = None,
) -> Result:
    """Run the controller that ``make_controller`` makes (given the cluster's session,
    if any), as ``plan`` says; in a cluster's member, serve and exit. The storage is
    opened (``storage_root()``) only by a cluster run here: a local run's controller opens
    it once the fork server is forked (opening it may start a library a fork breaks)."""
    launch = plan.launch
    if preemption_deadline_s is not None:
        check_preemption_deadline(launch, preemption_deadline_s)
    if plan.executor == "cluster" and launch is not None and not launch.is_driver:
        raise SystemExit(member.serve(plan, storage_root()))
    session = DriverSession(plan, storage_root()) if plan.executor == "cluster" else None
    code = FAILED_EXIT
    try:
        if session is not None:
            session.open()
        controller = make_controller(session)
        if session is not None:
            session.on_signal = controller.request_preemption
            if session.launch.resizable:
                session.on_member_lost = controller.request_stop
        with _slurm_warning(plan, controller):
            result = controller.run()
        code = 0
        _keep_model(plan, result)
        return result
    except TrainingInterrupted as stopped:
        code = stopped.EXIT_CODE
        _requeue(plan)
        raise
    except BaseException as error:
        _record_failure(plan, error)
        raise
    finally:
        if session is not None:
            session.end(code)


def check_preemption_deadline(launch: Launch | None, deadline_s: float) -> None:
    """Refuse, in every process before anything starts, a preemption deadline that the
    job's platform does not give: SageMaker kills a job 120 s after its SIGTERM.

    Example:
        >>> sm = Launch(name="sagemaker", launcher="SageMaker", process_rank=0,
        ...             num_processes=2, local_process_rank=0, processes_per_node=1, num_nodes=2)
        >>> check_preemption_deadline(sm, 100.0)
        >>> check_preemption_deadline(sm, 300.0)
        Traceback (most recent call last):
        ...
        ValueError: FailureConfig(preemption_deadline_s=300.0) is longer than SageMaker ...
    """
    if launch is None or launch.name != "sagemaker" or deadline_s <= SAGEMAKER_DEADLINE_S:
        return
    raise ValueError(
        f"FailureConfig(preemption_deadline_s={deadline_s}) is longer than SageMaker waits "
        f"after stopping a job ({SAGEMAKER_STOP_S:.0f} s from its SIGTERM to its SIGKILL): "
        "the preempted run's checkpoint could be cut off before it is committed. HINT: "
        f"preemption_deadline_s={SAGEMAKER_DEADLINE_S:.0f} or less (the default is 30)"
    )


@contextlib.contextmanager
def _slurm_warning(plan: ExecutionPlan, controller: Controller) -> Iterator[None]:
    """In a SLURM job, SIGUSR1 (``--signal=USR1@SECONDS``) stops the run as SIGTERM does."""
    if plan.launch is None or plan.launch.slurm_job is None:
        yield
        return

    def on_warning(signum: int, frame: Any) -> None:
        controller.request_preemption("SIGUSR1 (SLURM's warning before the time limit)")

    try:
        previous = signal.signal(signal.SIGUSR1, on_warning)
    except ValueError:  # not the main thread: signals are the main thread's
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR1, previous)


def _requeue(plan: ExecutionPlan) -> None:
    if plan.launch is not None and plan.launch.slurm_job is not None:
        print(f"lockstep: {slurm.requeue(plan.launch.slurm_job)}", file=sys.stderr, flush=True)


def _keep_model(plan: ExecutionPlan, result: Result) -> None:
    """SageMaker uploads its model directory when the job ends: the final checkpoint."""
    if plan.launch is None or plan.launch.name != "sagemaker" or result.checkpoint is None:
        return
    target = sagemaker.model_dir(flags.launch_environment())
    os.makedirs(target, exist_ok=True)
    result.checkpoint.to_directory(target)


def _record_failure(plan: ExecutionPlan, error: BaseException) -> None:
    if plan.launch is not None and plan.launch.name == "sagemaker":
        sagemaker.write_failure(f"{type(error).__name__}: {error}", flags.launch_environment())
