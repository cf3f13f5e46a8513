"""The Horovod backend: the environment ``horovodrun --gloo`` gives each process.

Horovod's gloo controller finds its peers through an HTTP rendezvous server. As
``horovodrun`` does, the driver runs that server (Horovod's own ``RendezvousHTTPServer``)
for each attempt and gives every worker the ``HOROVOD_*`` variables: its rank, size, local
and cross ranks, the server's address and port, and the network interface gloo uses. Unlike
``horovodrun``, the server listens on loopback only when every worker is on this machine
(and gloo uses ``lo``), and otherwise on the driver's address on the way to the workers;
Horovod's own launcher binds every interface. Each worker finds its interface on its own
node (the driver may run on another one).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from lockstep._core.context import Collective, TrainContext
from lockstep._internal.backends.base import Backend, BackendConfig, check_timeout_s
from lockstep._internal.backends.tensorflow import legacy_keras_env


class HorovodBackend(Backend):
    """Runs Horovod's rendezvous server in the driver; sets ``HOROVOD_*`` in each worker."""

    config: HorovodConfig
    # Horovod's background thread, which does all its communication, starts in hvd.init()
    # inside the training function, after the binding: bound to the worker's one CPU it
    # would wait behind the compute thread every step.
    pin_cpus = False

    def __init__(self, config: BackendConfig) -> None:
        super().__init__(config)
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._address: tuple[str, int] = ("127.0.0.1", 0)
        self._slots: dict[int, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        # Sent to the workers: they need the address and the slots, not the server.
        state = dict(self.__dict__)
        state["_server"] = state["_thread"] = None
        return state

    def on_group_start(self, contexts: Sequence[TrainContext]) -> None:
        from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

        self._slots = {c.world_rank: slot_info(c, contexts) for c in contexts}
        host = _bind_address(contexts)
        self._server = RendezvousHTTPServer((host, 0), RendezvousHandler, self.config.verbose)
        self._server.init(list(self._slots.values()))
        self._address = (host, self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="horovod-rendezvous", daemon=True
        )
        self._thread.start()

    def on_group_shutdown(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join()

    def worker_env(self, context: TrainContext) -> dict[str, str]:
        slot = self._slots[context.world_rank]
        nics = _iface_env(sorted(self.config.nics)[0]) if self.config.nics else {}
        return {
            "HOROVOD_HOSTNAME": slot.hostname,
            "HOROVOD_RANK": str(slot.rank),
            "HOROVOD_SIZE": str(slot.size),
            "HOROVOD_LOCAL_RANK": str(slot.local_rank),
            "HOROVOD_LOCAL_SIZE": str(slot.local_size),
            "HOROVOD_CROSS_RANK": str(slot.cross_rank),
            "HOROVOD_CROSS_SIZE": str(slot.cross_size),
            "HOROVOD_GLOO_RENDEZVOUS_ADDR": self._address[0],
            "HOROVOD_GLOO_RENDEZVOUS_PORT": str(self._address[1]),
            "HOROVOD_CONTROLLER": "gloo",
            "HOROVOD_CPU_OPERATIONS": "gloo",
            "HOROVOD_GLOO_TIMEOUT_SECONDS": str(int(self.config.timeout_s)),
            # horovod.tensorflow.keras (0.28.1) works with Keras 2 only.
            **legacy_keras_env(),
            **nics,
        }

    def on_worker_start(self, context: TrainContext, collective: Collective) -> None:
        if "HOROVOD_RANK" not in os.environ:  # a worker on Ray gets no environment of its own
            os.environ.update(self.worker_env(context))
        if not self.config.nics:  # before hvd.init(), which reads it
            os.environ.update(_iface_env(_iface(context.node_ip)))

    def on_worker_shutdown(self, context: TrainContext) -> None:
        for name in ("horovod.torch", "horovod.tensorflow", "horovod.tensorflow.keras"):
            module = sys.modules.get(name)
            if module is not None and module.is_initialized():
                module.shutdown()
                return


@dataclass(frozen=True, kw_only=True)
class HorovodConfig(BackendConfig):
    """How the workers' Horovod (gloo controller, no MPI) is set up; Ray's fields.

    Args:
        nics: Network interfaces gloo may use (the first is used); None picks ``lo`` when
            every worker is on this machine, else the interface of each worker's address.
        verbose: Horovod's log level for its rendezvous server (0 quiet).
        key: Accepted for Ray compatibility; the local rendezvous needs no secret key.
        ssh_port: Accepted for Ray compatibility; lockstep starts workers without ssh.
        ssh_identity_file: As ``ssh_port``.
        ssh_str: As ``ssh_port``.
        timeout_s: How long gloo waits for its peers (``HOROVOD_GLOO_TIMEOUT_SECONDS``).
        placement_group_timeout_s: Accepted for Ray compatibility.

    Example:
        >>> HorovodConfig(timeout_s=60).timeout_s
        60
    """

    nics: set[str] | None = None
    verbose: int = 1
    key: str | None = None
    ssh_port: int | None = None
    ssh_identity_file: str | None = None
    ssh_str: str | None = None
    timeout_s: int = 300
    placement_group_timeout_s: int = 100

    def __post_init__(self) -> None:
        if self.nics is not None and (isinstance(self.nics, str) or not self.nics):
            raise ValueError(
                f"nics must be a non-empty set of interface names, got {self.nics!r}. "
                'HINT: nics={"eth0"}, or leave it None'
            )
        check_timeout_s(self.timeout_s)

    backend_cls: ClassVar[type[Backend]] = HorovodBackend


def slot_info(context: TrainContext, contexts: Sequence[TrainContext]) -> Any:
    """Horovod's ``SlotInfo`` of ``context``'s worker: ranks by node, as horovodrun's."""
    from horovod.runner.common.util.hosts import SlotInfo

    nodes = sorted({c.node_rank for c in contexts})
    return SlotInfo(
        hostname=_hostname(context),
        rank=context.world_rank,
        local_rank=context.local_rank,
        cross_rank=nodes.index(context.node_rank),
        size=len(contexts),
        local_size=context.local_world_size,
        cross_size=len(nodes),
    )


def _hostname(context: TrainContext) -> str:
    return f"node{context.node_rank}"


def _is_loopback(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:
        return ip == "localhost"


def _bind_address(contexts: Sequence[TrainContext]) -> str:
    """Loopback when every worker is on this machine; else this machine's address on the
    way to the first worker elsewhere (the address it would send to that worker from)."""
    remote = [c.node_ip for c in contexts if not _is_loopback(c.node_ip)]
    if not remote:
        return "127.0.0.1"
    family = socket.AF_INET6 if ":" in remote[0] else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect((remote[0], 9))  # UDP: chooses the route, sends nothing
        return str(probe.getsockname()[0])


def _iface_env(iface: str) -> dict[str, str]:
    """The variables that put gloo's (and NCCL's) sockets on ``iface``."""
    return {"HOROVOD_GLOO_IFACE": iface, "NCCL_SOCKET_IFNAME": iface}


def _iface(ip: str) -> str:
    """The name of this node's network interface that has address ``ip`` (``lo`` for
    loopback)."""
    import psutil

    if _is_loopback(ip):
        ip = "127.0.0.1"
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.address == ip for a in addresses):
            return str(name)
    raise ValueError(
        f"no network interface has the worker's address {ip}. HINT: name the interface "
        'with HorovodConfig(nics={"eth0"})'
    )
