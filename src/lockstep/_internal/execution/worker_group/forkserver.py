"""The fork server: a copy of the driver, forked once, that forks workers on request.

A worker started from scratch pays for Python and for importing its framework (1.5 s for
torch here) on every start. The fork server is forked from the driver at its first fit(),
so it holds everything the driver had imported, torch included, and imports once what
the workers of a framework need and the driver does not (``Backend.worker_imports``); each
worker is then a fork of it, ready in milliseconds, for the next fit() and for every
restart.

Forking is only done when it is safe, otherwise workers are started fresh (see
``fork_safety``). The server forks before lockstep starts any thread of its own, closes
every file descriptor it inherited, leaves the driver's process group, and dies with the
driver. It reaps its workers and reports their exit codes to the driver.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import logging
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from lockstep._internal.execution.worker_group import fork_safety

logger = logging.getLogger(__name__)
_MAX_MESSAGE = 1 << 20
_AHEAD = 16  # fork requests sent before the first of them is answered


class ServerDied(RuntimeError):
    """The fork server is gone (killed, say): the workers it forked went with it."""

    def __init__(self, pid: int, status: int | None) -> None:
        how = "exited"
        if status is not None and status < 0:
            try:
                how = f"was killed by {signal.Signals(-status).name}"
            except ValueError:
                how = f"was killed by signal {-status}"
        elif status is not None:
            how = f"exited with code {status}"
        super().__init__(f"lockstep's fork server (pid {pid}) {how}")
        self.pid = pid


@dataclass(frozen=True)
class SpawnRequest:
    """What a forked worker needs besides its three file descriptors."""

    env: dict[str, str]
    num_threads: int
    # modules the server imports (once) before it forks the worker: its backend's
    imports: tuple[str, ...] = ()
    # a worker of a run across nodes: it connects to the driver itself (TCP, with the
    # run's key, as this rank), and the scheduler's SIGTERM is the driver's to act on first
    remote: RemoteWorker | None = None


@dataclass(frozen=True)
class RemoteWorker:
    """Where a worker of a run across nodes connects, and as whom."""

    address: tuple[str, int]
    key: bytes
    rank: int


@dataclass(frozen=True)
class _Fork:
    """A request as the server gets it: the worker's environment as the changes to the
    server's own (the driver's when it forked the server), most often a few names."""

    num_threads: int
    remote: RemoteWorker | None
    env_set: dict[str, str]
    env_unset: tuple[str, ...]
    imports: tuple[str, ...]


@dataclass(frozen=True)
class _Preload:
    """Import these now, for workers asked for later (while the driver opens the run)."""

    imports: tuple[str, ...]


class ForkServer:
    """The driver's handle on its fork server process."""

    def __init__(self, *, native_threads_at_fork: bool) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        driver = os.getpid()
        self._env = dict(os.environ)  # the server's, which it never changes
        # The kernel's parent-death signal follows the thread that forked, not the
        # process: a server forked from a thread that ends (a Tune trial's) would be killed.
        from_main_thread = threading.current_thread() is threading.main_thread()
        pid = os.fork()
        if pid == 0:  # the fork server; never returns
            ours.close()
            _serve(theirs, driver, from_main_thread)
        theirs.close()
        self.pid = pid
        # Workers may use several threads only if no OpenMP pool existed when we forked:
        # GNU OpenMP cannot run a parallel region in a fork of a process that had one
        # (a native thread of unknown origin counts as one).
        self.threads_ok = not native_threads_at_fork
        self._sock = ours
        self._lock = threading.Lock()
        self._exits: dict[int, int] = {}
        self._spawned: list[int] = []
        self._preloaded: set[str] = set()
        self._status: int | None = None  # its exit code, once it died and was reaped
        # Wait until the server has let go of the driver's descriptors.
        if pickle.loads(self._sock.recv(_MAX_MESSAGE))[0] != "ready":
            raise RuntimeError("the fork server failed to start")

    def preload(self, imports: tuple[str, ...]) -> None:
        """Have the server import ``imports`` now, before it is asked for a worker that
        needs them (a request waits for the import otherwise)."""
        new = tuple(name for name in imports if name not in self._preloaded)
        if new:
            self._preloaded.update(new)
            with self._lock:
                try:
                    socket.send_fds(self._sock, [pickle.dumps(_Preload(new))], [])
                except OSError:
                    pass  # the server is gone: the spawn that follows finds out, and says so

    def spawn(self, request: SpawnRequest, fds: list[int]) -> int:
        """Fork a worker that runs with ``fds`` = (connection, stdout, stderr); its pid."""
        return self.spawn_all([(request, fds)])[0]

    def spawn_all(self, requests: Sequence[tuple[SpawnRequest, list[int]]]) -> list[int]:
        """Fork a worker per request; their pids, in order. The requests go out while the
        server forks, so that it forks one after another without waiting for the driver to
        ask again; at most ``_AHEAD`` wait unanswered, so that neither side's socket buffer
        fills while the other is sending."""
        pids: list[int] = []
        with self._lock:
            for sent, (request, fds) in enumerate(requests, 1):
                socket.send_fds(self._sock, [pickle.dumps(self._fork(request))], fds)
                while sent - len(pids) > _AHEAD:
                    pids.append(self._next_spawned())
            while len(pids) < len(requests):
                pids.append(self._next_spawned())
        return pids

    def _fork(self, request: SpawnRequest) -> _Fork:
        server, env = self._env, request.env
        return _Fork(
            request.num_threads,
            request.remote,
            {name: value for name, value in env.items() if server.get(name) != value},
            tuple(name for name in server if name not in env),
            request.imports,
        )

    def _next_spawned(self) -> int:
        while not self._spawned:
            self._read()
        return self._spawned.pop(0)

    def exit_code(self, pid: int, timeout: float) -> int | None:
        """The worker's exit code (negative: killed by that signal), waiting up to
        ``timeout`` seconds; None if it is still running."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while pid not in self._exits:
                left = max(0.0, deadline - time.monotonic())
                if not select.select([self._sock.fileno()], [], [], left)[0]:
                    return None
                self._read()
            return self._exits.pop(pid)

    def alive(self) -> bool:
        if self._status is not None:
            return False
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True
        self._status = os.waitstatus_to_exitcode(status)
        return False

    def _exit_status(self) -> int | None:
        """The dead server's exit code (its end of the socket closed as it exited)."""
        deadline = time.monotonic() + 1.0
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        return self._status

    def close(self) -> None:
        self._sock.close()  # the server sees end of file and exits
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass

    def _read(self) -> None:
        try:
            data = self._sock.recv(_MAX_MESSAGE)
        except OSError:
            data = b""
        if not data:
            raise ServerDied(self.pid, self._exit_status())
        kind, pid, code = pickle.loads(data)
        if kind == "spawned":
            self._spawned.append(pid)
        else:
            self._exits[pid] = code


class WorkerProcess(Protocol):
    """What the group needs of a worker process; subprocess.Popen is one."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


class ForkedWorker:
    """A worker forked by the fork server; its exit code comes from the server.

    If the server dies, so do its workers (their parent-death signal is SIGKILL): the
    exit code is then SIGKILL's, and ``server_died`` says what happened.
    """

    def __init__(self, server: ForkServer, pid: int) -> None:
        self._server = server
        self.pid = pid
        self.returncode: int | None = None
        self.server_died: ServerDied | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._exit_code(0.0)
        return self.returncode

    def _exit_code(self, timeout: float) -> int | None:
        try:
            return self._server.exit_code(self.pid, timeout)
        except ServerDied as died:
            self.server_died = died
            return -signal.SIGKILL

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._exit_code(1e9 if timeout is None else timeout)
        if self.returncode is None:
            assert timeout is not None
            raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
        return self.returncode


def _serve(sock: socket.socket, driver: int, death_signal: bool) -> None:
    """The fork server's loop: fork a worker per request, report each one's exit.

    Without ``death_signal`` the server still ends with the driver: the driver's end of
    the socket closes when it dies, and the loop ends at end of file.
    """
    os.setsid()  # Ctrl-C at the terminal goes to the driver only
    _die_with(driver, death_signal)
    # The driver's exit handlers and finalizers are not ours to run: a copy of its
    # TemporaryDirectory, say, would delete the driver's directory. Forget the handlers, and
    # freeze every inherited object so that the collector never finalizes one here.
    atexit._clear()
    _forget_the_drivers_finalizers()
    _forget_the_drivers_multiprocessing()
    _import_what_every_worker_imports()
    gc.freeze()
    _release_inherited_fds(keep={0, 1, 2, sock.fileno()})
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    sock.send(pickle.dumps(("ready", 0, None)))
    try:
        while True:
            ready = select.select([sock.fileno(), wake_r], [], [])[0]
            if wake_r in ready:
                os.read(wake_r, 4096)
                _report_exits(sock)
            if sock.fileno() in ready and not _fork_worker(sock, (wake_r, wake_w)):
                break
    finally:
        os._exit(0)


def _forget_the_drivers_finalizers() -> None:
    """Detach the driver's ``weakref.finalize`` callbacks (a TemporaryDirectory's cleanup):
    they run neither at exit here nor when a copy of their object dies in a worker. The
    workers' own finalizers run at their exit, as in a fresh process: the next one made
    registers weakref's exit handler again (``atexit._clear()`` forgot the driver's), so
    that a TemporaryDirectory a stopped function never cleaned up is removed."""
    for finalizer in list(weakref.finalize._registry):  # type: ignore[attr-defined]
        finalizer.detach()
    weakref.finalize._registered_with_atexit = False  # type: ignore[attr-defined]


def _forget_the_drivers_multiprocessing() -> None:
    """Where the driver imported multiprocessing, forget its children and finalizers, as
    multiprocessing does in a process it forks (not its after-fork hooks: a manager's
    proxy would connect to the driver's manager from here). Its exit handler is registered
    again, as importing it in a fresh worker does: it runs the worker's own finalizers at
    exit (the named semaphores of a loky pool, joblib's, are unlinked by them)."""
    util: Any = sys.modules.get("multiprocessing.util")
    if util is None:
        return
    import itertools
    import multiprocessing.process

    process: Any = multiprocessing.process
    process._children = set()
    process._process_counter = itertools.count(1)
    util._finalizer_registry.clear()
    atexit.register(util._exit_function)


def _import_what_every_worker_imports() -> None:
    """Import here, once, what each forked worker would import for itself (a few
    milliseconds each, times the number of workers): the worker's own code, and numpy's
    random module, which numpy loads on first use and which ``_reseed`` uses."""
    from lockstep._internal.execution.worker import main, remote  # noqa: F401

    if sys.platform.startswith("linux"):
        main.prctl()  # looked up here once, not in every worker
    if "numpy" in sys.modules:
        import numpy.random  # noqa: F401


def _import_for_workers(modules: tuple[str, ...]) -> None:
    """Import, here and once, what every worker of a request's backend imports (for torch,
    torch._dynamo: a DistributedDataParallel imports it, 1 s here), so that the driver
    need not. Only parts of a package the driver had imported: a package new here could
    start threads a fork does not take along (``threads_ok`` is the driver's). A module
    that fails to import is left to the workers, whose error their user sees."""
    new = [
        name
        for name in modules
        if name not in sys.modules
        and name not in _tried_imports
        and name.partition(".")[0] in sys.modules
    ]
    if not new:
        return
    # No collection while importing: what is imported stays, and torch._dynamo's import
    # would set off passes over every object (0.08 s of its 0.8 s here).
    collecting = gc.isenabled()
    gc.disable()
    try:
        for name in new:
            _tried_imports.add(name)
            try:
                importlib.import_module(name)
            except Exception:  # any: the server must go on forking
                pass  # a worker that needs it meets the error where its user sees it
    finally:
        if collecting:
            gc.enable()
    gc.freeze()  # as the server's other objects: never walked by a worker's collector


_tried_imports: set[str] = set()


def _fork_worker(sock: socket.socket, server_fds: tuple[int, ...]) -> bool:
    data, fds, _flags, _addr = socket.recv_fds(sock, _MAX_MESSAGE, 3)
    if not data:
        return False  # the driver closed its end: time to go
    request: _Fork | _Preload = pickle.loads(data)
    _import_for_workers(request.imports)
    if isinstance(request, _Preload):
        return True
    pid = os.fork()
    if pid == 0:
        sock.close()
        for fd in server_fds:
            os.close(fd)
        _become_worker(request, fds)
    for fd in fds:
        os.close(fd)
    sock.send(pickle.dumps(("spawned", pid, None)))
    return True


def _report_exits(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        sock.send(pickle.dumps(("exited", pid, os.waitstatus_to_exitcode(status))))


def _become_worker(request: _Fork, fds: list[int]) -> None:
    """In the forked worker: take over its descriptors (connection, unless it connects
    itself; stdout; stderr) and run it; never returns."""
    *conn, out_fd, err_fd = fds
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setsid()  # its own process group, so that stopping it stops what it forks
    null = os.open(os.devnull, os.O_RDONLY)
    for src, dst in ((null, 0), (out_fd, 1), (err_fd, 2)):
        os.dup2(src, dst)
        os.close(src)
    _take_environment(request.env_set, request.env_unset)
    _fresh_stdio()
    _reseed(request.num_threads)
    if request.remote is not None:
        from lockstep._internal.execution.worker import remote

        to = request.remote
        remote.run_connected(to.address, to.key, to.rank, os.getppid())
    from lockstep._internal.execution.worker import main as worker_main

    worker_main.run_process(conn[0], os.getppid())


def _take_environment(changes: dict[str, str], removed: tuple[str, ...]) -> None:
    """Make this process's environment the worker's: the one inherited, with ``changes``
    and without ``removed``. (Comparing the whole of it here took 250 Python calls of each
    worker's start; rewriting it whole, copying the pages it touched, 0.35 ms.)"""
    environ = os.environ
    for name in removed:
        environ.pop(name, None)
    for name, value in changes.items():
        environ[name] = value


def _fresh_stdio() -> None:
    # The driver's sys.stdout may be a progress display's proxy: start from the raw streams.
    import io

    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True)


def _reseed(num_threads: int) -> None:
    """Every fork shares its parent's random state: give each worker its own; and its
    parent's thread counts: give each its own."""
    import ctypes
    import random

    random.seed()
    numpy: Any = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(int.from_bytes(os.urandom(4), "little"))
    torch: Any = sys.modules.get("torch")
    if torch is not None:
        torch.seed()
        torch.set_num_threads(num_threads)
    lightgbm: Any = sys.modules.get("lightgbm")
    if lightgbm is not None:
        # LightGBM's parallel regions default to OpenMP's thread count, which its runtime
        # read from the driver (every core); in a fork of a driver whose OpenMP pool ran,
        # a region of more than one thread waits forever for the pool's threads (loading
        # a model, say). Workers of several threads are not forked from such a driver.
        set_max_threads = getattr(lightgbm.basic._LIB, "LGBM_SetMaxThreads", None)  # >= 4.2
        if set_max_threads is not None:
            set_max_threads(ctypes.c_int(num_threads))


def _die_with(pid: int, death_signal: bool = True) -> None:
    if death_signal and sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != pid:
        os._exit(1)


def _release_inherited_fds(keep: set[int]) -> None:
    """Point every inherited descriptor but ``keep`` at /dev/null.

    The driver's sockets, pipes and files must not live on here (a port would stay bound, a
    pipe never reach end of file); its handles on /dev/urandom may. Closing them would free
    their numbers for reuse, and an inherited Python object closing "its" number later would
    close someone else's file; pointing them at /dev/null releases the originals and keeps
    the numbers taken.
    """
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    null = os.open(os.devnull, os.O_RDWR)
    for fd in fds:
        if fd not in keep and fd != null and not _entropy_source(fd):
            try:
                os.dup2(null, fd)
            except OSError:
                pass  # already closed (listdir's own descriptor, say)
    os.close(null)


def _entropy_source(fd: int) -> bool:
    """Whether ``fd`` reads /dev/urandom: a library may open it once and read it for ever
    (the AWS CRT does). It holds no port, pipe or file; pointed at /dev/null, every random
    byte it gives would fail, or be zero."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}") in ("/dev/urandom", "/dev/random")
    except OSError:
        return False


_server: ForkServer | None = None
_server_lock = threading.Lock()


# Native threads that a fork leaves working (their libraries start them again in the
# child): jemalloc's background thread (pyarrow's allocator), and the pool of a pthreads
# build of OpenBLAS (numpy's, scipy's), counted from the library itself.
FORK_SAFE_THREADS = ("jemalloc_bg_thd",)


def native_threads() -> bool:
    """Whether this process runs threads that Python does not know of and that may not
    survive a fork (an OpenMP pool, say)."""
    names = fork_safety.native_thread_names()
    if not names:
        return True  # no /proc to count them: assume the worst
    known = threading.active_count() + sum(n.startswith(FORK_SAFE_THREADS) for n in names)
    return len(names) > known + _openblas_pool_threads()


def _openblas_pool_threads() -> int:
    """The threads the pools of the loaded pthreads builds of OpenBLAS run (each starts
    its pool, of one thread fewer than it uses, as it loads; threadpoolctl finds them).
    A build whose globals cannot be read counts none: its threads stay unexplained."""
    import ctypes

    from threadpoolctl import threadpool_info

    count = 0
    for lib in threadpool_info():
        if lib.get("internal_api") != "openblas" or lib.get("threading_layer") != "pthreads":
            continue
        try:
            handle = ctypes.CDLL(lib["filepath"], mode=os.RTLD_NOLOAD)  # loaded already
            running = ctypes.c_int.in_dll(handle, "blas_server_avail").value
            threads = ctypes.c_int.in_dll(handle, "blas_num_threads").value
        except (OSError, ValueError):
            continue
        if running:
            count += max(threads - 1, 0)
    return count


def get(num_threads: int) -> ForkServer | None:
    """The fork server, started now if needed; None when workers must start from scratch
    (the first time for each reason, a line on the log says why)."""
    global _server
    with _server_lock:
        if _server is not None and not _server.alive():
            _server = None
        if _server is None:
            if not sys.platform.startswith("linux"):
                return None
            reason = fork_safety.fork_unsafe_reason()
            if reason is not None:
                _say_once(f"workers start as fresh processes, not forks of this one: {reason}")
                return None
            _server = ForkServer(native_threads_at_fork=native_threads())
            atexit.register(_server.close)
        if num_threads > 1 and not _server.threads_ok:
            _say_once(
                "workers of several threads start as fresh processes, not forks: an OpenMP "
                "pool ran in this process when the fork server was forked (a forked worker "
                "would hang in its first parallel region)"
            )
            return None
        return _server


_said: set[str] = set()


def _say_once(line: str) -> None:
    if line not in _said:
        _said.add(line)
        logger.warning("lockstep: %s", line)


def server_pid() -> int | None:
    """The fork server's pid, if one runs."""
    return _server.pid if _server is not None else None
