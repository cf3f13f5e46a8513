"""Fixtures shared by every test, and the guard that fails a test which leaks.

Each test must leave no child process, no thread, no environment variable change and no
``lockstep-*`` temporary file behind.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from lockstep.train import RunConfig


def pytest_configure(config: pytest.Config) -> None:
    # A temp directory of our own, so that the leak check sees only this session's files.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    base = Path(tempfile.gettempdir()) / f"lockstep-tests-{os.getpid()}-{worker}"
    base.mkdir(parents=True, exist_ok=True)
    os.environ["TMPDIR"] = str(base)
    tempfile.tempdir = str(base)


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def _threads() -> set[threading.Thread]:
    return set(threading.enumerate())


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}


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
