"""The driver listener's key check on one incoming connection, without a cluster."""

from __future__ import annotations

import socket
import threading
from multiprocessing.connection import Client

import pytest

from lockstep._internal.execution.worker_group import listener

KEY = b"k" * 32


@pytest.fixture
def server():
    with socket.create_server(("127.0.0.1", 0)) as s:
        yield s


def test_a_worker_with_the_key_is_let_in_with_its_rank(server):
    def worker():
        with Client(server.getsockname(), authkey=KEY) as conn:
            conn.send(3)
            conn.recv()  # stays until the driver answers

    thread = threading.Thread(target=worker)
    thread.start()
    sock, peer = server.accept()
    rank, conn = listener.authenticated(sock, peer, KEY)
    conn.send("bye")
    thread.join()
    conn.close()
    assert rank == 3


def test_a_silent_peer_is_dropped_after_the_handshake_timeout(server, monkeypatch, caplog):
    monkeypatch.setattr(listener, "HANDSHAKE_TIMEOUT_S", 0.2)
    with socket.create_connection(server.getsockname()):
        sock, peer = server.accept()
        assert listener.authenticated(sock, peer, KEY) is None
    assert "refused a connection to the driver from 127.0.0.1" in caplog.text
