"""The TensorFlow backend: every worker gets a ``TF_CONFIG`` naming the whole cluster.

``MultiWorkerMirroredStrategy`` reads ``TF_CONFIG`` when it is created and starts a gRPC
server on this worker's port. Each worker reserves its port before anyone learns of it: a
socket bound with ``SO_REUSEPORT`` (port 0, so the kernel picks a free one) and held until
the worker ends. No other process can bind that port meanwhile; TensorFlow's server can,
because ``TF_GRPC_REUSE_PORT=1`` makes it bind with ``SO_REUSEPORT`` too. A port chosen and
released instead could be taken by another process before TensorFlow binds it.

The workers then exchange their addresses through the driver, and each one's ``TF_CONFIG``
lists every worker, in rank order, with its own index.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import warnings
from dataclasses import dataclass
from typing import ClassVar

from lockstep._core import flags
from lockstep._core.context import Collective, TrainContext
from lockstep._internal.backends._threads import ThreadsConfig
from lockstep._internal.backends.base import Backend, BackendConfig


class TensorflowBackend(Backend):
    """Gives each worker its ``TF_CONFIG`` before the training function runs."""

    config: TensorflowConfig
    # TensorFlow's runtime, gRPC and collective threads start after the binding, inside the
    # training function: bound to the worker's one CPU with its compute threads, they wait
    # behind them every step (4x slower here with 2 workers on 2 CPUs).
    pin_cpus = False

    def __init__(self, config: BackendConfig) -> None:
        super().__init__(config)
        self._reserved: socket.socket | None = None

    def worker_env(self, context: TrainContext) -> dict[str, str]:
        # TensorFlow's gRPC server binds with SO_REUSEPORT only when asked: see the module.
        return {"TF_GRPC_REUSE_PORT": "1", **legacy_keras_env()}

    def on_worker_start(self, context: TrainContext, collective: Collective) -> None:
        os.environ["TF_GRPC_REUSE_PORT"] = "1"  # also for workers on Ray, which get no env
        self._reserved = reserve_port(context.node_ip)
        port = self._reserved.getsockname()[1]
        addresses = collective.all_gather(f"{_host(context.node_ip)}:{port}")
        os.environ["TF_CONFIG"] = tf_config(addresses, context.world_rank)
        if self.config.num_threads:
            _set_threads(self.config.num_threads)

    def on_worker_shutdown(self, context: TrainContext) -> None:
        reserved, self._reserved = self._reserved, None
        if reserved is not None:
            reserved.close()
        os.environ.pop("TF_CONFIG", None)


@dataclass(frozen=True, kw_only=True)
class TensorflowConfig(ThreadsConfig):
    """How each worker's TensorFlow is set up (``TF_CONFIG`` and threads).

    Ray's ``TensorflowConfig`` has no fields; ``num_threads`` is filled in by
    :class:`~lockstep.train.tensorflow.TensorflowTrainer` from the worker's CPUs.

    Args:
        num_threads: TensorFlow's intra- and inter-op thread pools in each worker; None
            leaves TensorFlow's defaults (every CPU of the machine).

    Example:
        >>> TensorflowConfig().backend_cls.__name__
        'TensorflowBackend'
    """

    backend_cls: ClassVar[type[Backend]] = TensorflowBackend


def legacy_keras_env() -> dict[str, str]:
    """``TF_USE_LEGACY_KERAS=1`` when ``tf_keras`` is installed and the variable is unset.

    ``tf.keras`` is Keras 3 from TensorFlow 2.16 on, and Keras 3's ``model.fit`` fails under
    ``MultiWorkerMirroredStrategy`` with more than one worker (keras-team/keras#20585).
    Keras 2 code (``tf.keras.*`` under that strategy) works as written with ``tf_keras``.
    Setting the variable to ``0`` keeps Keras 3.
    """
    import importlib.util

    if flags.TF_USE_LEGACY_KERAS.get() or importlib.util.find_spec("tf_keras") is None:
        return {}
    return {flags.TF_USE_LEGACY_KERAS.name: "1"}


def prefer_legacy_keras() -> None:
    """In the driver: set :func:`legacy_keras_env`, and warn if ``tf.keras`` is Keras 3
    here already (used before this was called), as workers forked from here inherit it."""
    env = legacy_keras_env()
    os.environ.update(env)
    tf = sys.modules.get("tensorflow")
    keras = vars(tf).get("keras") if tf is not None else None
    if env and getattr(keras, "__name__", "").startswith("keras."):
        warnings.warn(
            "tf.keras was used before lockstep.train.tensorflow was imported, so it is "
            "Keras 3 in this process and in workers forked from it, and Keras 3's model.fit "
            "fails under MultiWorkerMirroredStrategy with several workers. HINT: import "
            "lockstep.train.tensorflow before the first use of tf.keras",
            stacklevel=3,
        )


def reserve_port(host: str) -> socket.socket:
    """A TCP socket bound (not listening) with ``SO_REUSEPORT`` to a free port of ``host``.

    Example:
        >>> sock = reserve_port("127.0.0.1")
        >>> sock.getsockname()[1] > 0
        True
        >>> sock.close()
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, 0))
    except BaseException:
        sock.close()
        raise
    return sock


def tf_config(addresses: list[str], rank: int) -> str:
    """The ``TF_CONFIG`` of worker ``rank`` among workers at ``addresses`` (rank order).

    Example:
        >>> json.loads(tf_config(["127.0.0.1:1", "127.0.0.1:2"], 1))["task"]
        {'type': 'worker', 'index': 1}
    """
    task = {"type": "worker", "index": rank}
    return json.dumps({"cluster": {"worker": list(addresses)}, "task": task})


def _host(node_ip: str) -> str:
    return f"[{node_ip}]" if ":" in node_ip else node_ip


def _set_threads(num_threads: int) -> None:
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(num_threads)
        tf.config.threading.set_inter_op_parallelism_threads(num_threads)
    except RuntimeError:
        pass  # TensorFlow's runtime already started in this process: its pools are set
