"""Fixtures shared by every test, and the guard that fails a test which leaks.

Each test must leave no child process, no thread, no environment variable change, no
``lockstep-*`` temporary file and no new entry in the working directory behind (a path
such as ``s3://bucket/x`` handed to ``os`` by mistake becomes a local ``s3:`` tree there).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from hypothesis import settings

from lockstep.train import RunConfig

# The hosts and schedulers of multi-node tests (tests/cluster).
pytest_plugins = ["tests.cluster.fixtures"]

SESSION_MARK = "LOCKSTEP_TEST_SESSION"
_BASE = pytest.StashKey[Path]()
# Property tests: 40 examples each in the full run; `--hypothesis-profile=fast` for the
# quick run a developer makes while working (README, "Development").
settings.register_profile("lockstep", max_examples=40)
settings.register_profile("fast", max_examples=8)
settings.load_profile("lockstep")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-api-snapshot",
        action="store_true",
        help="rewrite tests/unit/public_api.txt from the current __all__ lists",
    )


def pytest_configure(config: pytest.Config) -> None:
    # A temp directory of our own, so that the leak check sees only this session's files.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    base = Path(tempfile.gettempdir()) / f"lockstep-tests-{os.getpid()}-{worker}"
    base.mkdir(parents=True, exist_ok=True)
    os.environ["TMPDIR"] = str(base)
    tempfile.tempdir = str(base)
    # Hypothesis keeps its example database under the working directory by default.
    from hypothesis import configuration

    configuration.set_hypothesis_home_dir(base / "hypothesis")
    # Every process this session starts inherits the mark, Ray's daemons included, so the
    # session can find them at its end even after they were orphaned.
    os.environ[SESSION_MARK] = f"{os.getpid()}-{worker}"
    config.stash[_BASE] = base
    # A shell that starts the suite in the background (`pytest &`) ignores SIGINT, and an
    # ignored signal stays ignored in every process started from here: the Ctrl-C tests
    # would press a key nobody hears. The session takes it as a terminal's Ctrl-C comes.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_unconfigure(config: pytest.Config) -> None:
    # The session's own temp directory goes too: nothing of lockstep's stays in the
    # system's temp directory after a run.
    if _BASE in config.stash:
        shutil.rmtree(config.stash[_BASE], ignore_errors=True)


# The directory pytest was started in (the checkout, usually): nothing may appear in it.
WORKING_DIR = os.getcwd()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Everything in tests/integration starts worker processes: mark it so, in one place.
    integration = Path(__file__).parent / "tests" / "integration"
    for item in items:
        if integration in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.processes)


def _children() -> set[int]:
    from tests.helpers import worker_processes

    return {p.pid for p in worker_processes()}


# Threads a library starts once and keeps for the life of the process, by design: fsspec's
# IO loop for its async filesystems (s3fs), and Ray Data's usage-metrics poller in a driver
# that ran a dataset, and OpenTelemetry's exporters (started by W&B and MLflow's tracing).
LIBRARY_THREADS = ("fsspecIO", "asyncio_", "data-usage-metrics-poller", "Otel")


def _threads() -> set[threading.Thread]:
    # A _DummyThread is a native library's own thread that called into Python (TensorFlow's
    # tf.data pool runs generators on them); Python keeps them listed forever.
    return {
        t
        for t in threading.enumerate()
        if not t.name.startswith(LIBRARY_THREADS) and not isinstance(t, threading._DummyThread)
    }


# Variables a library sets for the whole process the first time it is imported:
# torch._dynamo (imported by lockstep.train.torch) sets TORCHINDUCTOR_CACHE_DIR, and
# scikit-learn sets KMP_DUPLICATE_LIB_OK and KMP_INIT_AT_FORK for Intel's OpenMP;
# tensorboardX (the TensorBoard logger) sets CRC32C_SW_MODE, and Lightning's Trainer
# PYTORCH_NVML_BASED_CUDA_CHECK when it looks for GPUs.
# TensorFlow sets TF2_BEHAVIOR, TPU_ML_PLATFORM(_VERSION) and ENABLE_RUNTIME_UPTIME_TELEMETRY
# at import, h5py HDF5_PLUGIN_PATH; lockstep.train.tensorflow sets TF_USE_LEGACY_KERAS.
LIBRARY_ENV = {
    "PYTEST_CURRENT_TEST",
    "TF2_BEHAVIOR",
    "TPU_ML_PLATFORM",
    "TPU_ML_PLATFORM_VERSION",
    "ENABLE_RUNTIME_UPTIME_TELEMETRY",
    "HDF5_PLUGIN_PATH",
    "TF_USE_LEGACY_KERAS",
    "TORCHINDUCTOR_CACHE_DIR",
    "KMP_DUPLICATE_LIB_OK",
    "KMP_INIT_AT_FORK",
    "CRC32C_SW_MODE",
    "PYTORCH_NVML_BASED_CUDA_CHECK",
}


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in LIBRARY_ENV}


def _temp_files() -> set[str]:
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("lockstep-")}


def _working_dir() -> set[str]:
    return set(os.listdir(WORKING_DIR))


def _settle(check, timeout: float = 2.0):  # type: ignore[no-untyped-def]
    """Threads and processes already told to stop may take a moment to be gone."""
    deadline = time.monotonic() + timeout
    leaked = check()
    while leaked and time.monotonic() < deadline:
        time.sleep(0.02)
        leaked = check()
    return leaked


def _live_fork_server() -> Any:
    """The session's fork server while it lives, else None."""
    from lockstep._internal.execution.worker_group import forkserver

    server = forkserver._server
    return server if server is not None and server.alive() else None


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    children, threads, env, files = _children(), _threads(), _environment(), _temp_files()
    working_dir = _working_dir()
    server = _live_fork_server()
    yield
    leaked_children = _settle(lambda: _children() - children)
    leaked_threads = _settle(lambda: {t for t in _threads() - threads if t.is_alive()})
    problems = []
    if leaked_children:
        for pid in leaked_children:
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                pass
        problems.append(f"child processes left running: {sorted(leaked_children)}")
    if leaked_threads:
        problems.append(f"threads left running: {sorted(t.name for t in leaked_threads)}")
    if _environment() != env:
        changed = set(_environment().items()) ^ set(env.items())
        problems.append(f"environment changed: {sorted(k for k, _ in changed)}")
    if leftover := _temp_files() - files:
        problems.append(f"temporary files left: {sorted(leftover)}")
    if written := _working_dir() - working_dir:
        problems.append(
            f"files written into the working directory {WORKING_DIR}: {sorted(written)}"
        )
    if server is not None and _live_fork_server() is not server:
        problems.append(
            f"the session's fork server (pid {server.pid}) was stopped or replaced: every "
            "later run may start its workers fresh. HINT: a test that starts servers of its "
            "own uses the fork_safe_driver fixture"
        )
    if problems:
        pytest.fail("; ".join(problems))


@pytest.fixture
def fork_safe_driver(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """For the fork server's own tests, which start servers of their own: a library that an
    earlier test left running in this process (the AWS CRT of pyarrow's S3 filesystem, gRPC
    from Ray) would make lockstep start workers fresh instead of forking a new server. These
    tests' workers use none of them; ``tests/integration/test_fork_safety.py`` tests the
    libraries, each in a fresh driver.

    The session's server is set aside meanwhile and put back after, the test's own closed:
    with those libraries running no new one may be forked, so a server a test killed would
    leave every later run of the session starting its workers fresh (each importing its
    test module anew: seconds a run)."""
    from lockstep._internal.execution.worker_group import fork_safety, forkserver

    monkeypatch.setattr(fork_safety, "CHECKS", ())
    sessions = forkserver._server
    forkserver._server = None
    yield
    theirs, forkserver._server = forkserver._server, sessions
    if theirs is not None and theirs is not sessions:
        theirs.close()


@pytest.fixture
def run_config(tmp_path: Path) -> RunConfig:
    """A quiet run in this test's own directory."""
    return RunConfig(name="run", storage_path=str(tmp_path / "runs"), verbose=0)


@pytest.fixture
def s3_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A real S3 API (moto's server) on a local port, with bucket ``lockstep-runs``.

    The endpoint goes through the environment, so worker processes reach it too.
    """
    from tests.helpers import serving_s3

    with serving_s3(monkeypatch) as server:
        yield server.endpoint


@pytest.fixture(scope="session")
def ray_cluster(hosts: Any) -> Iterator[Any]:
    """A real Ray cluster for this test session: a head node with 4 CPUs on host node1
    (tests/cluster), listening on node1's address and loopback only."""
    from tests.ray_cluster import LocalRayCluster

    cluster = LocalRayCluster(hosts, head="node1")
    try:
        cluster.start_head(num_cpus=4)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def ray_connected(ray_cluster: Any) -> Iterator[None]:
    """This process joined to the test cluster, for one module only: while Ray is
    initialised, every trainer that does not name an executor picks Ray. A Ray driver runs
    on a node of its cluster, so the test's thread is on the head's host meanwhile (what it
    starts is there too)."""
    import ray

    with ray_cluster.hosts.inside(ray_cluster.head):
        ray.init(address=ray_cluster.address, log_to_driver=False)
        yield
        ray.shutdown()


@pytest.fixture
def second_node(ray_cluster: Any) -> Iterator[str]:
    """A second node of the test cluster, on host node3, labelled with its own resource
    ``second_node``; killed again after the test (every process on node3)."""
    host = ray_cluster.add_node("node3", num_cpus=2, resources={"second_node": 2})
    ray_cluster.wait_for_nodes(2)
    yield host
    ray_cluster.kill_node(host)
    ray_cluster.wait_for_nodes_dead(1)


def _marked_processes() -> list[psutil.Process]:
    """Every process on the machine that this session started, directly or not, but this
    process and the fork server (warm for the whole session by design)."""
    from lockstep._internal.execution.worker_group import forkserver

    mark = os.environ[SESSION_MARK]
    spared = {os.getpid(), forkserver.server_pid()}
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid not in spared and proc.environ().get(SESSION_MARK) == mark:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


# The files in /dev/shm a session may leave, and where their names carry the id of the
# process that made them: lockstep's ("lockstep-table-PID-..."), and the semaphores of
# loky's pools (joblib's: "sem.loky-PID-..."), which a worker's exit must unlink.
SHM_NAMES = {"lockstep-": 2, "sem.loky-": 1}


def _shm_files() -> set[str]:
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith(tuple(SHM_NAMES))}
    except FileNotFoundError:
        return set()


def _leaked_shm_files(before: set[str]) -> list[str]:
    """New files of :data:`SHM_NAMES` in /dev/shm that no live process of another session
    owns."""
    leaked = []
    for name in sorted(_shm_files() - before):
        at = next(at for prefix, at in SHM_NAMES.items() if name.startswith(prefix))
        parts = name.split("-")
        pid = parts[at] if len(parts) > at + 1 else ""
        # a name without a pid is not this code's (another checkout on this machine)
        if pid.isdigit() and (int(pid) == os.getpid() or not psutil.pid_exists(int(pid))):
            leaked.append(name)
    return leaked


def _session_leftovers(base: Path) -> list[Path]:
    """lockstep's files in the session's temp directory, and test Ray clusters' temp
    directories, still there. (The system's temp directory is shared with whatever else
    runs on the machine, so nothing there is judged: lockstep's own files go to TMPDIR,
    which is the session's directory.)"""
    from tests.ray_cluster import started_temp_dirs

    found = [p for p in base.iterdir() if p.name.startswith("lockstep-")]
    return found + [Path(d) for d in started_temp_dirs() if os.path.exists(d)]


@pytest.fixture(scope="session", autouse=True)
def suite_leaves_nothing(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails the run when, after the last test, a process the session started is still
    running (an orphaned Ray client server, say), or lockstep left files in the temp
    directory or in /dev/shm. Whatever is found is removed, so one leak is reported
    once and does not stay on the machine."""
    base = request.config.stash[_BASE]
    shm_before = _shm_files()
    yield
    problems = []
    _, alive = psutil.wait_procs(_marked_processes(), timeout=10)
    if alive:
        described = []
        for proc in alive:
            try:
                described.append(f"{proc.pid} {' '.join(proc.cmdline())[:120]}")
                proc.kill()
            except psutil.NoSuchProcess:
                continue
        if described:
            problems.append(f"processes left running after the tests: {described}")
    if leftover := _session_leftovers(base):
        for path in leftover:
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink()
        problems.append(f"left in the temp directory: {sorted(str(p) for p in leftover)}")
    if shm := _leaked_shm_files(shm_before):
        for name in shm:
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join("/dev/shm", name))
        problems.append(f"left in /dev/shm: {shm}")
    if problems:
        pytest.fail("the test suite left things behind: " + "; ".join(problems), pytrace=False)
