"""The torch.distributed backend: one process group across the workers.

Rank 0 opens the rendezvous store on a port its host picks (port 0, so no other process
can take it between choosing and binding) and tells the others its address through the
driver; every worker then joins the process group with gloo (CPU) or NCCL (GPU), through
``init_method`` as Ray does: ``env://`` with ``MASTER_ADDR``/``MASTER_PORT`` set in every
worker, or ``tcp://ADDRESS:PORT``. torch's rendezvous would have rank 0 open a store of
its own on every interface; told that a store is already up (as torchrun's agents tell
their workers), every rank joins rank 0's instead.

Everything listens on the worker's node address only: in a local run that is 127.0.0.1,
so the store, gloo's pairs and NCCL's bootstrap are out of the network's reach.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from lockstep._core.context import Collective, TrainContext
from lockstep._core.errors import UsageError
from lockstep._internal.backends.base import Backend, BackendConfig, check_timeout_s

BACKENDS = ("gloo", "nccl")
ACCELERATE_DEVICE = "ACCELERATE_TORCH_DEVICE"


class TorchBackend(Backend):
    """Sets up ``torch.distributed`` in each worker and tears it down after."""

    config: TorchConfig
    _accelerate_device: str | None = None  # what on_worker_start set, for shutdown
    # The first DistributedDataParallel built imports torch._dynamo (1 s here).
    worker_imports = ("torch._dynamo",)

    def __init__(self, config: TorchConfig) -> None:
        super().__init__(config)
        self._store: Any = None  # rank 0's rendezvous store, served until shutdown

    def worker_env(self, context: TrainContext) -> dict[str, str]:
        return {
            "RANK": str(context.world_rank),
            "LOCAL_RANK": str(context.local_rank),
            "WORLD_SIZE": str(context.world_size),
            "LOCAL_WORLD_SIZE": str(context.local_world_size),
            "NODE_RANK": str(context.node_rank),
        }

    def on_worker_start(self, context: TrainContext, collective: Collective) -> None:
        import torch
        import torch.distributed as dist

        backend = self.config.backend
        assert backend is not None, "the execution plan chooses gloo or NCCL"
        for name, value in loopback_env(context.node_ip).items():
            os.environ.setdefault(name, value)  # a user's own choice of interface wins
        if backend == "nccl":
            os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
            torch.cuda.set_device(0)  # the first of the GPUs this worker was given
            uuid = str(torch.cuda.get_device_properties(0).uuid)
            check_one_rank_per_gpu(collective.all_gather(uuid))
        timeout = datetime.timedelta(seconds=self.config.timeout_s)
        self._store, address, port = _rendezvous(context, collective, timeout)
        url = f"tcp://{_host(address)}:{port}"
        if self.config.init_method == "env":
            os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = address, str(port)
            url = "env://"
        with _joining_a_running_store():
            dist.init_process_group(
                backend,
                init_method=url,
                rank=context.world_rank,
                world_size=context.world_size,
                timeout=timeout,
            )
        if ACCELERATE_DEVICE not in os.environ:
            # Hugging Face Accelerate's device, as Ray sets it: the one get_device() gives.
            device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
            os.environ[ACCELERATE_DEVICE] = self._accelerate_device = str(device)

    def on_worker_shutdown(self, context: TrainContext) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
        self._store = None
        if self._accelerate_device is not None:  # a worker in the driver's process
            value = os.environ.pop(ACCELERATE_DEVICE, None)
            if value not in (None, self._accelerate_device):
                os.environ[ACCELERATE_DEVICE] = value  # the user's own, set since
            self._accelerate_device = None


@dataclass(frozen=True, kw_only=True)
class TorchConfig(BackendConfig):
    """How the workers' ``torch.distributed`` process group is set up.

    Args:
        backend: ``"gloo"`` or ``"nccl"``; when None, NCCL with GPUs and gloo without.
        init_method: How ``init_process_group`` finds rank 0, as in Ray: ``"env"``
            (``MASTER_ADDR``/``MASTER_PORT`` are set in every worker, as ``torchrun``
            does, and the group is joined through ``env://``) or ``"tcp"``
            (``tcp://ADDRESS:PORT``, those variables left unset); torch's spelling
            (``"env://"``, ``"tcp://host:port"``) is accepted too, the address and port
            always rank 0's.
        timeout_s: How long collective operations wait before failing.

    Example:
        >>> TorchConfig(backend="gloo", timeout_s=60).backend
        'gloo'
    """

    backend: Literal["gloo", "nccl"] | None = None
    init_method: str = "env"
    timeout_s: int = 1800

    def __post_init__(self) -> None:
        if self.backend is not None and self.backend not in BACKENDS:
            raise ValueError(
                f"unknown torch backend {self.backend!r}. HINT: use 'gloo' (CPU) or 'nccl' (GPU)"
            )
        scheme = str(self.init_method).split("://", 1)[0]
        if scheme not in ("env", "tcp"):
            raise ValueError(
                f"init_method must be 'env' or 'tcp', got {self.init_method!r}. "
                "HINT: init_method='env' (or torch's 'env://')"
            )
        object.__setattr__(self, "init_method", scheme)
        check_timeout_s(self.timeout_s)

    def for_devices(self, use_gpu: bool) -> TorchConfig:
        """This config with the process-group backend chosen, checked against ``use_gpu``."""
        if self.backend is None:
            from dataclasses import replace

            return replace(self, backend="nccl" if use_gpu else "gloo")
        if self.backend == "nccl" and not use_gpu:
            raise ValueError(
                "TorchConfig(backend='nccl') needs GPUs but use_gpu=False. "
                "HINT: set ScalingConfig(use_gpu=True), or use backend='gloo'"
            )
        return self

    backend_cls: ClassVar[type[Backend]] = TorchBackend


def _rendezvous(
    context: TrainContext, collective: Collective, timeout: datetime.timedelta
) -> tuple[Any, str, int]:
    """Rank 0's store (None on other ranks) and where every rank finds it."""
    store = None
    address, port = context.node_ip, 0
    if context.world_rank == 0:
        store = _server_store(address, context.world_size, timeout)
        port = store.port
    address, port = collective.broadcast_from_rank_zero((address, port))
    return store, address, port


@contextlib.contextmanager
def _joining_a_running_store() -> Iterator[None]:
    """While torch's rendezvous runs, every rank (rank 0 too) joins the store at the
    init method's address as a client, as torchrun's workers join their agent's: rank 0's
    store is up already, listening on its node address alone."""
    name = "TORCHELASTIC_USE_AGENT_STORE"
    before = os.environ.pop(name, None)
    os.environ[name] = "True"
    try:
        yield
    finally:
        if before is None:
            del os.environ[name]
        else:
            os.environ[name] = before


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def _server_store(address: str, world_size: int, timeout: datetime.timedelta) -> Any:
    """The rendezvous store's server, listening on ``address`` only.

    Given a host and a port, TCPStore's server listens on every interface (``::``): the
    host only tells clients where to connect. Given a socket already bound, it listens on
    that socket, and owns it from then on.
    """
    import torch.distributed as dist

    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    server = socket.create_server((address, 0), family=family)
    try:
        store = dist.TCPStore(  # type: ignore[attr-defined]
            address,
            server.getsockname()[1],
            world_size,
            is_master=True,
            timeout=timeout,
            wait_for_workers=False,
            master_listen_fd=server.fileno(),
        )
    except BaseException:
        with contextlib.suppress(OSError):  # the store may have closed it already
            server.close()
        raise
    server.detach()
    return store


def check_one_rank_per_gpu(gpu_of_rank: list[str]) -> None:
    """Fail, before NCCL does, when two ranks got the same GPU (its UUID, one per rank).

    NCCL cannot run two ranks of one communicator on one GPU: it fails at the first
    collective ("Duplicate GPU detected"), and restarting cannot help. Workers that share
    GPUs (``resources_per_worker={"GPU": 0.5}``) need gloo, which runs on CUDA tensors too.

    Example:
        >>> check_one_rank_per_gpu(["GPU-a", "GPU-b"])
        >>> check_one_rank_per_gpu(["GPU-a", "GPU-a"])
        Traceback (most recent call last):
        ...
        lockstep._core.errors.UsageError: ranks 0 and 1 were given the same GPU (GPU-a), ...
    """
    ranks: dict[str, list[int]] = {}
    for rank, gpu in enumerate(gpu_of_rank):
        ranks.setdefault(gpu, []).append(rank)
    shared = next((r for r in ranks.values() if len(r) > 1), None)
    if shared is None:
        return
    names = ", ".join(map(str, shared[:-1])) + f" and {shared[-1]}"
    raise UsageError(
        f"ranks {names} were given the same GPU ({gpu_of_rank[shared[0]]}), and NCCL cannot "
        "run two ranks of one process group on one GPU. HINT: give each worker a whole GPU "
        "(resources_per_worker={'GPU': 1}, no more workers than GPUs), or keep sharing GPUs "
        "with TorchConfig(backend='gloo'), which runs on CUDA tensors too"
    )


def loopback_env(node_ip: str) -> dict[str, str]:
    """The variables that keep gloo's pairs and NCCL's sockets on loopback, on a loopback node.

    Left alone, gloo listens on the address the host name resolves to (often the machine's
    network address) and NCCL on the first interface it likes; both follow these variables.
    """
    try:
        if not ipaddress.ip_address(node_ip).is_loopback:
            return {}
    except ValueError:  # a host name: its node is not known to be this machine alone
        return {}
    names = {name for _, name in socket.if_nameindex()}
    interface = next((name for name in ("lo", "lo0") if name in names), None)
    if interface is None:
        return {}
    return {"GLOO_SOCKET_IFNAME": interface, "NCCL_SOCKET_IFNAME": interface}
