"""Hosts from ``scripts/hosts.sh``, for tests: up, run a command as a host, kill a host, down."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import psutil


def stop(processes: Sequence[psutil.Process], timeout: float = 15) -> None:
    """SIGTERM ``processes``, then SIGKILL those still running after ``timeout``; return
    when all are gone (a zombie is gone: init reaps it)."""

    def running() -> list[psutil.Process]:
        alive = []
        for p in processes:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.NoSuchProcess:
                continue
        return alive

    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in running():
            with contextlib.suppress(psutil.NoSuchProcess):
                p.send_signal(sig)
        deadline = time.monotonic() + timeout
        while running() and time.monotonic() < deadline:
            time.sleep(0.05)
    if left := running():
        raise AssertionError(f"processes did not stop: {[p.pid for p in left]}")


SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "hosts.sh"
_CLONE_NEWNET = 0x40000000


class Hosts:
    """``names`` as hosts: network namespaces ``PREFIX-NAME`` on the subnet ``SUBNET.0/24``.

    Use as a context manager (up on entry, down on exit) or call :meth:`up`/:meth:`down`.
    """

    def __init__(self, names: Sequence[str], prefix: str, subnet: str = "10.231.0") -> None:
        self.names = list(names)
        self.prefix = prefix
        self.subnet = subnet
        self.dir = Path("/run/lockstep-hosts") / prefix

    def __enter__(self) -> Hosts:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def env(self, more: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of a ``hosts.sh`` command about these hosts (with ``more``,
        whose own hosts' variables, from a copy of this environment, do not count)."""
        return {
            **os.environ,
            **(more or {}),
            "LOCKSTEP_HOSTS_PREFIX": self.prefix,
            "LOCKSTEP_HOSTS_SUBNET": self.subnet,
            "LOCKSTEP_HOSTS_DIR": str(self.dir),
        }

    def _script(self, *args: str) -> str:
        done = subprocess.run(
            ["bash", str(SCRIPT), *args],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode != 0:
            raise RuntimeError(f"hosts.sh {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout

    def up(self) -> None:
        self._script("up", *self.names)

    def down(self) -> None:
        self._script("down")

    def address(self, host: str) -> str:
        return f"{self.subnet}.{self.names.index(host) + 1}"

    def namespace(self, host: str) -> str:
        """The path of ``host``'s network namespace, for ``nsenter --net=...``."""
        assert host in self.names, host
        return f"/run/netns/{self.prefix}-{host}"

    @property
    def rsh(self) -> str:
        """The remote-shell agent: ``rsh HOST CMD`` runs CMD as HOST (for ``mpirun``)."""
        return str(self.dir / "rsh")

    def alias(self, host: str, *names: str) -> None:
        """More names for ``host`` in every host's /etc/hosts (running commands see them)."""
        self._script("alias", host, *names)

    def command(self, host: str, argv: Sequence[str], as_name: str | None = None) -> list[str]:
        """``argv`` run as ``host`` (with the hostname ``as_name`` when given)."""
        named = ["--as", as_name] if as_name else []
        return ["bash", str(SCRIPT), "exec", *named, host, *argv]

    def run(
        self,
        host: str,
        argv: Sequence[str],
        *,
        timeout: float = 120,
        as_name: str | None = None,
        env: dict[str, str] | None = None,
        check: bool = True,
        cwd: str | os.PathLike[str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` as ``host`` to its end; raise with its output if it fails (``check``)."""
        done = subprocess.run(
            self.command(host, argv, as_name),
            env=self.env(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)} on {host} exited {done.returncode}:\n"
                f"{done.stdout}\n{done.stderr}"
            )
        return done

    def popen(
        self,
        host: str,
        argv: Sequence[str],
        *,
        as_name: str | None = None,
        env: dict[str, str] | None = None,
        **kwargs: object,
    ) -> subprocess.Popen[str]:
        """Start ``argv`` as ``host``; the caller waits for it."""
        return subprocess.Popen(  # type: ignore[call-overload,no-any-return]
            self.command(host, argv, as_name),
            env=self.env(env),
            text=True,
            **kwargs,
        )

    def daemon(
        self, host: str, argv: Sequence[str], log: Path, env: dict[str, str] | None = None
    ) -> psutil.Process:
        """Start ``argv`` on ``host`` as a daemon, output to ``log``: no child of this
        process (init is its parent, as for a daemon a scheduler starts), so that tests
        which count this process's children do not see it. Stop it with :func:`stop`."""
        detach = 'setsid "$@" </dev/null >"$LOCKSTEP_DAEMON_LOG" 2>&1 & echo $!'
        done = self.run(
            host,
            ["sh", "-c", detach, "sh", *argv],
            env={**(env or {}), "LOCKSTEP_DAEMON_LOG": str(log)},
            timeout=30,
        )
        return psutil.Process(int(done.stdout))

    def kill(self, host: str, signal: str = "KILL") -> None:
        """Signal every process on ``host``: ``KILL`` is the machine dying."""
        self._script("kill", host, signal)

    def pids(self, host: str) -> list[int]:
        """The processes running on ``host``."""
        done = subprocess.run(
            ["ip", "netns", "pids", f"{self.prefix}-{host}"],
            capture_output=True,
            text=True,
            check=True,
        )
        return [int(p) for p in done.stdout.split()]

    @contextlib.contextmanager
    def inside(self, host: str) -> Iterator[None]:
        """This thread on ``host``'s network while inside (its hostname and files stay the
        machine's): sockets it opens, threads and processes it starts are on that host.
        For a test that must itself be on a host, as a Ray driver on the head node."""
        libc = ctypes.CDLL(None, use_errno=True)
        here = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        there = os.open(self.namespace(host), os.O_RDONLY)
        try:
            if libc.setns(there, _CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"cannot enter {host}'s network")
            try:
                yield
            finally:
                if libc.setns(here, _CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "cannot return to this machine's network")
        finally:
            os.close(there)
            os.close(here)
