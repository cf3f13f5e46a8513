"""The LightGBM backend: the network parameters of LightGBM's socket-based distributed mode.

LightGBM's workers connect to each other directly: each listens on a port of its own and
is given the list of every worker's ``ip:port`` (``machines``). Each worker here finds a
free port on its host, the workers exchange their addresses through the driver, and the
result is what :func:`network_params` returns in the worker, to be passed to
``lightgbm.train`` with ``tree_learner="data"`` (or another distributed learner).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any, ClassVar

from lockstep._core.context import Collective, TrainContext
from lockstep._internal.backends._threads import ThreadsConfig
from lockstep._internal.backends.base import Backend

# This worker's network parameters, set by the backend for the training function.
_network: dict[str, Any] | None = None


class LightGBMBackend(Backend):
    """Gives each worker the ``machines`` list and its own listening port."""

    config: LightGBMConfig

    def on_worker_start(self, context: TrainContext, collective: Collective) -> None:
        global _network
        if self.config.num_threads:
            _default_threads(self.config.num_threads)
        if context.world_size == 1:
            _network = {}  # one worker trains alone; LightGBM then opens no socket
            return
        address = (context.node_ip, _free_port(context.node_ip))
        addresses = collective.all_gather(address)
        _network = {
            "machines": ",".join(f"{ip}:{port}" for ip, port in addresses),
            "local_listen_port": address[1],
            "num_machines": context.world_size,
        }

    def on_worker_shutdown(self, context: TrainContext) -> None:
        global _network
        if _network:
            # Close LightGBM's sockets now, even if a booster still holds the network.
            from lightgbm.basic import _LIB  # type: ignore[attr-defined]

            _LIB.LGBM_NetworkFree()
        _network = None


@dataclass(frozen=True, kw_only=True)
class LightGBMConfig(ThreadsConfig):
    """Sets up LightGBM's distributed mode: every worker gets its network parameters.

    The training function passes ``**lockstep.train.lightgbm.get_network_params()`` to
    ``lightgbm.train``.

    Args:
        num_threads: LightGBM's default number of threads in each worker (``num_threads``
            given to LightGBM wins). LightGBMTrainer sets it to the worker's CPUs.

    Example:
        >>> LightGBMConfig().backend_cls.__name__
        'LightGBMBackend'
    """

    backend_cls: ClassVar[type[Backend]] = LightGBMBackend


def network_params() -> dict[str, Any] | None:
    """This worker's network parameters; None outside a LightGBM trainer's worker."""
    return None if _network is None else dict(_network)


def _free_port(ip: str) -> int:
    # LightGBM binds the port itself, so it is closed here and could in principle be taken
    # in between; the kernel hands out ports round-robin, which makes that unlikely.
    with socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET) as s:
        s.bind((ip, 0))
        return int(s.getsockname()[1])


def _default_threads(threads: int) -> None:
    """Make ``threads`` LightGBM's default (``num_threads=0``) in this thread.

    A worker forked from the driver inherits an OpenMP runtime sized for the driver's
    machine, not for the CPUs the worker was given. OpenMP's default, not a cap, so that a
    ``num_threads`` the training function passes stays in charge.
    """
    from lightgbm.basic import _LIB  # type: ignore[attr-defined]

    set_threads = getattr(_LIB, "omp_set_num_threads", None)  # LightGBM's own OpenMP
    if set_threads is not None:
        set_threads(threads)
