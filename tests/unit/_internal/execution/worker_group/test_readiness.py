"""Readiness: whose descriptor the driver can read without waiting."""

from __future__ import annotations

import socket

from lockstep._internal.execution.worker_group.readiness import Readiness


def test_ready_names_the_readable_descriptors_and_an_end_of_file():
    pairs = [socket.socketpair() for _ in range(3)]
    ready = Readiness()
    try:
        for rank, (ours, _) in enumerate(pairs):
            ready.add(ours if rank else ours.fileno(), ("conn", rank))
        assert ready
        assert ready.ready(0) == []
        assert ready.ready(-1.0) == []  # a deadline passed: a look, not a wait for ever
        pairs[1][1].send(b"x")
        pairs[2][1].close()  # the peer's end: readable, as its end of file
        assert sorted(ready.ready(1.0)) == [("conn", 1), ("conn", 2)]
    finally:
        ready.close()
        for ours, theirs in pairs:
            ours.close()
            theirs.close()
    empty = Readiness()
    assert not empty
    empty.close()
