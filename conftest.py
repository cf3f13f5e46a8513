"""Fixtures shared by every test, and the guard that fails a test which leaks.

Each test must leave no child process, no thread, no environment variable change and no
``lockstep-*`` temporary file behind.
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from lockstep.train import RunConfig


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


def _children() -> set[int]:
    from tests.helpers import worker_processes

    return {p.pid for p in worker_processes()}


# Threads a library starts once and keeps for the life of the process, by design: fsspec's
# IO loop for its async filesystems (s3fs), and Ray Data's usage-metrics poller in a driver
# that ran a dataset.
LIBRARY_THREADS = ("fsspecIO", "asyncio_", "data-usage-metrics-poller")


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
# scikit-learn sets KMP_DUPLICATE_LIB_OK and KMP_INIT_AT_FORK for Intel's OpenMP.
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
}


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in LIBRARY_ENV}


def _temp_files() -> set[str]:
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("lockstep-")}


def _settle(check, timeout: float = 2.0):  # type: ignore[no-untyped-def]
    """Threads and processes already told to stop may take a moment to be gone."""
    deadline = time.monotonic() + timeout
    leaked = check()
    while leaked and time.monotonic() < deadline:
        time.sleep(0.02)
        leaked = check()
    return leaked


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    children, threads, env, files = _children(), _threads(), _environment(), _temp_files()
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
    if problems:
        pytest.fail("; ".join(problems))


@pytest.fixture
def run_config(tmp_path: Path) -> RunConfig:
    """A quiet run in this test's own directory."""
    return RunConfig(name="run", storage_path=str(tmp_path / "runs"), verbose=0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def s3_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A real S3 API (moto's server) on a local port, with bucket ``lockstep-runs``.

    The endpoint goes through the environment, so worker processes reach it too.
    """
    import fsspec
    import requests
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        # moto keeps its buckets per process: start every test from none
        requests.post(f"{endpoint}/moto-api/reset", timeout=10)
        for key, value in {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint,
        }.items():
            monkeypatch.setenv(key, value)
        fsspec.filesystem("s3").clear_instance_cache()
        fsspec.filesystem("s3", skip_instance_cache=True).mkdir("lockstep-runs")
        yield endpoint
    finally:
        fsspec.filesystem("s3").clear_instance_cache()
        server.stop()


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[object]:
    """A real Ray cluster for this test session: a head node with 4 CPUs."""
    from tests.ray_cluster import LocalRayCluster

    cluster = LocalRayCluster()
    try:
        cluster.start_head(num_cpus=4)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def ray_connected(ray_cluster: object) -> Iterator[None]:
    """This process joined to the test cluster, for one module only: while Ray is
    initialised, every trainer that does not name an executor picks Ray."""
    import ray

    ray.init(address=ray_cluster.address, log_to_driver=False)  # type: ignore[attr-defined]
    yield
    ray.shutdown()
