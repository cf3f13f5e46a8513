"""Whether this process may still be forked: native libraries whose state a fork breaks.

A fork copies memory but only the thread that forked. A library that runs threads of its
own, or holds handles those threads serve, is broken in the copy: the AWS CRT that
pyarrow's S3 filesystem starts (its event loop; forked workers die with SIGSEGV, "CRT
Generate Random Bytes Failed"), CUDA once initialised, TensorFlow's runtime and gRPC
(channels, servers; TensorFlow's distributed runtime uses it). The fork server is forked
before the run opens its storage, so that it holds none of them; where one already runs
when it is first needed, workers start as fresh processes instead, and
:func:`fork_unsafe_reason` says why. (OpenMP and MKL pools are the fork server's own check:
a fork of a process that had one may still run single-threaded workers.)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

# Thread names (as the kernel keeps them, at most 15 characters) of native runtimes.
AWS_CRT_THREADS = ("AwsEventLoop",)
GRPC_THREADS = ("grpc_global_tim", "event_engine")


def fork_unsafe_reason() -> str | None:
    """Why a fork of this process would break the workers forked from it, or None: the
    first of :data:`CHECKS` that finds its library running here."""
    for check in CHECKS:
        reason = check()
        if reason is not None:
            return reason
    return None


def native_thread_names() -> list[str]:
    """The names of every thread of this process, Python's and native libraries' alike
    (empty where ``/proc`` does not list them)."""
    names = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return []
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            pass  # the thread ended while we looked
    return names


def _running(prefixes: tuple[str, ...]) -> bool:
    return any(name.startswith(prefixes) for name in native_thread_names())


def cuda_initialised() -> str | None:
    """CUDA, initialised by torch (``torch.cuda.is_available()`` does not initialise it;
    allocating a tensor on the GPU does)."""
    torch: Any = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "CUDA is initialised in this process (a forked worker could not use it)"
    return None


def tensorflow_started() -> str | None:
    """TensorFlow's runtime and its thread pools (importing TensorFlow starts none)."""
    if "tensorflow" not in sys.modules:
        return None
    try:
        from tensorflow.python.eager import context
    except ImportError:
        return None
    if context.context()._context_handle is None:
        return None
    return "TensorFlow's runtime runs in this process (its thread pools do not survive a fork)"


def aws_crt_started() -> str | None:
    """The AWS Common Runtime: pyarrow's S3 filesystem starts it, so does boto3's CRT."""
    if _running(AWS_CRT_THREADS):
        return (
            "the AWS CRT runs in this process (pyarrow's S3 filesystem started it; a forked "
            "worker using S3 dies with SIGSEGV)"
        )
    return None


def grpc_started() -> str | None:
    """gRPC's core threads: a channel or a server was made (gRPC supports no fork)."""
    if _running(GRPC_THREADS):
        return "gRPC runs in this process (it supports no fork without exec)"
    return None


CHECKS: tuple[Callable[[], str | None], ...] = (
    cuda_initialised,
    tensorflow_started,
    aws_crt_started,
    grpc_started,
)
