"""Which libraries make a fork of the driver unsafe, from what each one exposes.

Each library running for real, in a fresh driver, is in tests/integration/test_fork_safety.py
(CUDA's in test_gpu.py): here the checks read their inputs as the libraries give them.
"""

from __future__ import annotations

import ctypes
import sys
import threading

import pytest
import torch

from lockstep._internal.execution.worker_group import fork_safety


def test_cuda_counts_once_torch_says_it_is_initialised(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert fork_safety.cuda_initialised() is None
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    reason = fork_safety.fork_unsafe_reason()
    assert reason == "CUDA is initialised in this process (a forked worker could not use it)"


def test_a_driver_that_never_imported_torch_has_no_cuda(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch")
    assert fork_safety.cuda_initialised() is None


@pytest.mark.parametrize(
    ("thread", "check", "says"),
    [
        ("AwsEventLoop1", fork_safety.aws_crt_started, "the AWS CRT runs in this process"),
        ("grpc_global_tim", fork_safety.grpc_started, "gRPC runs in this process"),
        ("event_engine", fork_safety.grpc_started, "gRPC runs in this process"),
    ],
)
def test_native_runtimes_are_known_by_their_threads(monkeypatch, thread, check, says):
    monkeypatch.setattr(fork_safety, "native_thread_names", lambda: ["python", "python"])
    assert check() is None
    monkeypatch.setattr(fork_safety, "native_thread_names", lambda: ["python", thread])
    assert check().startswith(says)


def test_threads_are_listed_by_the_name_the_kernel_keeps():
    # a native library names its threads as this one does (prctl), unseen by Python
    named, stop = threading.Event(), threading.Event()

    def name_and_wait():
        ctypes.CDLL(None).prctl(15, b"lockstep-probe")  # PR_SET_NAME
        named.set()
        stop.wait()

    # (not checked after join(): the kernel may list a joined thread a moment longer)
    assert "lockstep-probe" not in fork_safety.native_thread_names()
    thread = threading.Thread(target=name_and_wait)
    thread.start()
    named.wait()
    try:
        assert "lockstep-probe" in fork_safety.native_thread_names()
    finally:
        stop.set()
        thread.join()


def test_the_first_library_found_is_the_reason(monkeypatch):
    monkeypatch.setattr(fork_safety, "native_thread_names", lambda: ["AwsEventLoop1"])
    monkeypatch.setattr(
        fork_safety, "CHECKS", (fork_safety.grpc_started, fork_safety.aws_crt_started)
    )
    assert fork_safety.fork_unsafe_reason().startswith("the AWS CRT")
    monkeypatch.setattr(fork_safety, "CHECKS", (fork_safety.grpc_started,))
    assert fork_safety.fork_unsafe_reason() is None
