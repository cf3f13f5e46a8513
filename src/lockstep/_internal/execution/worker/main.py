"""What runs in each worker: set up the backend, run the training function, report back.

Run as ``python -m lockstep._internal.execution.worker.main FD PARENT_PID`` for a local
process, where FD is this worker's end of its connection to the driver. The user's
``__main__`` is never imported: the function arrives pickled by value (cloudpickle).
"""

from __future__ import annotations

import atexit
import functools
import os
import pickle
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from lockstep._core.errors import UsageError, WorkerFailure
from lockstep._core.storage import MARKER_FILE
from lockstep._internal.execution.messages import (
    STACK_SIGNAL,
    Failed,
    Heartbeat,
    LocalFunction,
    Returned,
    WorkerStart,
    receive_line,
)
from lockstep._internal.execution.worker import session as session_module
from lockstep._internal.execution.worker import stopping
from lockstep._internal.execution.worker.phases import PhasePage
from lockstep._internal.execution.worker.stack_text import stacks_text
from lockstep._internal.execution.worker.stopping import (
    WorkerStopped,
    begin_run,
    end_run,
    stop_handler,
)
from lockstep._internal.execution.worker.unnamed import unnamed_file

__all__ = ["WorkerStopped", "exit_process", "run_process", "run_worker", "stop_handler"]


def run_worker(
    conn: Connection,
    *,
    in_process: bool,
    start: WorkerStart | None = None,
    read_inline: bool = True,
) -> int:
    """Run one worker to completion over ``conn``; return its exit code.

    ``start`` arrives over ``conn`` unless it was handed over already (by Ray, whose
    actors read the driver's messages with a thread of their own: ``read_inline``
    False, see ``link.py``).
    """
    if start is None:
        start = conn.recv()
    line = receive_line(conn) if start.release_line else None
    begin_run()
    on_lost = None if in_process else _exit_now
    page = PhasePage.create()
    session = session_module.WorkerSession(
        conn, start, on_driver_lost=on_lost, phases=page, read_inline=read_inline, line=line
    )
    stack_fd = None
    if not in_process:
        _allow(start.allowed_cpus)
        _extend_sys_path(start.sys_path)
        # the stack signal's thread watches for the driver hanging up, where nothing reads
        wait = session.watch_hangup if read_inline else threading.Event().wait
        stack_fd = _dump_stacks_on_signal(wait)
    session.start()  # the threads it runs, if any, leave the stack signal to that thread
    session_module.install(session, process_wide=not in_process)
    backend = start.backend
    try:
        if not in_process:  # a thread of the driver sees what the driver sees
            _check_run_dir_visible(start)
        backend.on_worker_start(start.context, session)
        _bind_to(start.cpus)
        # the hang watchdog counts from here: setup (imports, rendezvous) is not a step
        phase_fd = page.fd if page is not None else None
        rank = start.context.world_rank
        started = Heartbeat(rank, True, stack_fd, phase_fd, os.getpid())
        session.send(started)
        session.function_started()
        value = _run_function(start.train_fn)
        payload, dropped = _pickle_return_value(value, start.context.world_rank)
        session.close()
        session.send(Returned(start.context.world_rank, payload, session.num_reports, dropped))
        return 0
    except WorkerStopped:
        session.close()
        return 128 + signal.SIGTERM
    except BaseException as exc:
        session.close()
        _send_failure(session, start.context.world_rank, exc)
        return 1
    finally:
        session.end()
        end_run()  # the backend's teardown is a clean-up a stop does not cut short
        try:
            backend.on_worker_shutdown(start.context)
        finally:
            session_module.install(None, process_wide=not in_process)
            if page is not None and in_process:
                page.close()  # a worker process's goes with it


def _dump_stacks_on_signal(wait: Callable[[], object]) -> int | None:
    """On STACK_SIGNAL, write every thread's stack to a file with no name; return its
    descriptor, which the driver reads as ``/proc/PID/fd/N`` (its hang watchdog and
    ``lockstep status`` ask).

    Every thread blocks the signal, so that it never interrupts a collective's socket call
    (which fails with EINTR when the socket has a timeout, as LightGBM's do, and aborts the
    worker); a thread of its own takes it (``sigwait``) and writes the stacks from Python,
    holding the GIL: a consistent copy. (faulthandler's handler, in C, reads the frames of
    threads that run on meanwhile, and crashes a worker that runs Python code.) A worker
    whose GIL is held in C does not answer: the driver reads it with py-spy. Another
    thread of its own runs ``wait`` (for the driver's end of the connection to close).
    """
    import _thread

    try:
        stacks = unnamed_file("lockstep-stacks")  # kept open for the driver
    except OSError:
        return None
    # The training function runs in this thread: the driver looks for its stack.
    main = threading.get_ident()
    stacks.write(f"main thread 0x{main:016x}\n".encode())
    # Blocked first: the threads started from now on (these two, the session's, the
    # framework's) inherit it. A signal that reaches a thread which does not block it
    # (one started earlier) is ignored rather than ending the worker.
    signal.signal(STACK_SIGNAL, lambda *_: None)
    signal.pthread_sigmask(signal.SIG_BLOCK, {STACK_SIGNAL})
    # not waited for: a worker among many would wait to be scheduled twice
    _thread.start_new_thread(wait, ())
    _thread.start_new_thread(_answer_stack_signals, (stacks, main))
    return stacks.fileno()


def _answer_stack_signals(stacks: Any, main: int) -> None:
    """Write every thread's stack, in faulthandler's format, at each STACK_SIGNAL."""
    while True:
        signal.sigwait({STACK_SIGNAL})
        os.write(stacks.fileno(), stacks_text(sys._current_frames(), main).encode())


def _check_run_dir_visible(start: WorkerStart) -> None:
    """Checkpoints are written by the workers: they must see the driver's run directory."""
    if not start.run_dir.exists(MARKER_FILE):
        import socket

        raise UsageError(
            f"rank {start.context.world_rank} on node {start.context.node_ip} (host "
            f"{socket.gethostname()!r}) cannot see the run directory {start.run_dir.uri!r} that "
            "the driver created. HINT: put "
            "storage_path on storage every worker shares (a local path on one machine, an "
            "NFS mount, or s3:// / gs://); memory:// works only with num_workers=0"
        )


def _allow(cpus: tuple[int, ...] | None) -> None:
    """Run on ``cpus``, the driver's, before any thread of the worker starts (threads
    inherit the CPUs of the thread that starts them)."""
    if cpus is not None and set(cpus) != os.sched_getaffinity(0):
        os.sched_setaffinity(0, cpus)


def _bind_to(cpus: tuple[int, ...] | None) -> None:
    """Bind this thread, and so every thread it starts from now on, to ``cpus``.

    After the backend's setup: threads it started (a collective's tracker) stay free to
    run on any CPU, so they never wait behind the training function's threads.
    """
    if cpus is not None:
        os.sched_setaffinity(0, cpus)


def _run_function(train_fn: bytes | LocalFunction) -> Any:
    if isinstance(train_fn, bytes):
        import cloudpickle

        train_fn = LocalFunction(*cloudpickle.loads(train_fn))
    fn, config, takes_config = train_fn
    return fn(config) if takes_config else fn()


def _pickle_return_value(value: Any, rank: int) -> tuple[bytes, str | None]:
    """The return value, pickled; one that cannot be is dropped (Ray too), with the reason
    for the driver to warn about."""
    import cloudpickle

    try:
        return bytes(cloudpickle.dumps(value)), None
    except Exception as exc:
        reason = (
            f"rank {rank}'s training function returned a {type(value).__name__}, which cannot "
            f"be pickled ({exc}); its return value is None. HINT: return plain data, or save "
            "objects into a checkpoint"
        )
        return bytes(cloudpickle.dumps(None)), reason


def _send_failure(session: session_module.WorkerSession, rank: int, exc: BaseException) -> None:
    failure = exception_failure(rank, exc)
    try:
        session.send(Failed(failure))
    except Exception:
        pass  # the driver is gone; it sees the exit code instead


def exception_failure(rank: int, exc: BaseException) -> WorkerFailure:
    """The failure of rank ``rank``'s training function, which raised ``exc``."""
    pid = os.getpid()
    return WorkerFailure(
        rank=rank,
        pid=pid,
        kind="exception",
        summary=f"rank {rank} (pid {pid}) raised {type(exc).__name__}: {exc}",
        traceback=user_traceback(exc),
        full_traceback="".join(traceback.format_exception(exc)),
        retryable=not isinstance(exc, UsageError),
        exception=_sendable(exc),
    )


def user_traceback(exc: BaseException) -> str:
    """The traceback of ``exc`` as the user wrote the code: lockstep's own frames left out,
    and, for an error lockstep raised, not how it came to raise it (its chained causes).

    The traceback of a lockstep bug, all lockstep's frames, is left whole.
    """
    shown = traceback.TracebackException.from_exception(exc)
    _leave_out_our_frames(shown, set())
    return "".join(shown.format())


def _leave_out_our_frames(shown: traceback.TracebackException, seen: set[int]) -> None:
    if id(shown) in seen:
        return
    seen.add(id(shown))
    stack = shown.stack
    theirs = [frame for frame in stack if not _is_ours(frame.filename)]
    if stack and _is_ours(stack[-1].filename):
        shown.__cause__ = shown.__context__ = None
    if theirs:
        shown.stack = traceback.StackSummary.from_list(theirs)
    for chained in (shown.__cause__, shown.__context__):
        if chained is not None:
            _leave_out_our_frames(chained, seen)


# lockstep's package directory; lockstep.testing's fault functions count as the user's code
_PACKAGE = os.path.dirname(sys.modules["lockstep"].__file__ or "")  # where lockstep's frames are
_USERS = os.path.join(_PACKAGE, "testing") + os.sep


def _is_ours(filename: str) -> bool:
    return filename.startswith(_PACKAGE + os.sep) and not filename.startswith(_USERS)


def _sendable(exc: BaseException) -> BaseException | None:
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return None
    return exc


def _extend_sys_path(driver_path: tuple[str, ...]) -> None:
    # The driver's path first: the function's modules must resolve as they did there.
    sys.path[:] = list(dict.fromkeys([*driver_path, *sys.path]))


def _exit_now() -> None:
    os._exit(1)


def die_with_parent(parent_pid: int) -> None:
    """Ask Linux to kill this process when the driver dies, even if it hangs in C code."""
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        prctl()(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the driver died before prctl took effect
        os._exit(1)


@functools.cache
def prctl() -> Any:
    """libc's ``prctl``, looked up once: the fork server does, so that a forked worker
    does not (0.3 ms of its start)."""
    import ctypes

    return ctypes.CDLL(None).prctl


def main() -> None:
    """Entry point of a worker started from scratch: ``python -m ... FD PARENT_PID``."""
    run_process(int(sys.argv[1]), int(sys.argv[2]))


def run_process(fd: int, parent_pid: int) -> None:
    """Run the worker whose connection is ``fd``; exits the process when done."""
    stopping.install()
    die_with_parent(parent_pid)
    try:
        code = run_worker(Connection(fd), in_process=False)
    except WorkerStopped:  # told to stop while already reporting a result or a failure
        code = 128 + signal.SIGTERM
    exit_process(code)


def exit_process(code: int) -> None:
    """Exit without the interpreter's teardown, as a Ray worker does.

    Tearing down the modules costs 30 ms, or hundreds with torch or pandas loaded, and the
    driver waits for it. atexit handlers (wandb's, say) still run; files the training
    function left unclosed are not flushed, as on Ray.
    """
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    main()
