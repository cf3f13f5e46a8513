"""Where workers on other nodes reach the driver: a TCP listener that lets in only those
that hold the run's key.

The driver listens on one address (its node's, never every interface), only while the
peers it waits for connect. Each peer proves it has the key and is proven the driver has
it (``multiprocessing``'s HMAC challenge, both ways), then sends who it is (a worker its
rank). A peer that fails the check, stays silent or hangs up is dropped and logged; the
run goes on.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import time
from collections.abc import Callable
from multiprocessing import AuthenticationError
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge
from typing import Any

# How long a connecting peer has to pass the key check: one that stays silent must not
# hold up the peers queued behind it.
HANDSHAKE_TIMEOUT_S = 10.0

logger = logging.getLogger(__name__)


class Listener:
    """A listening socket on ``host`` (port 0: the kernel picks one), for peers with ``key``."""

    def __init__(self, host: str, key: bytes) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._server: socket.socket | None = socket.create_server((host, 0), family=family)
        self._server.settimeout(1.0)
        self.key = key
        self.address: tuple[str, int] = (host, self._server.getsockname()[1])

    def accept(
        self,
        count: int,
        *,
        timeout: float,
        check: Callable[[dict[Any, Connection]], None] = lambda peers: None,
        what: str = "workers",
    ) -> dict[Any, Connection]:
        """``count`` peers' connections by the identity each sent (a worker's rank).

        ``check`` is called while waiting, with the peers in so far: it raises when one
        that is awaited can no longer come (its process died).
        """
        assert self._server is not None
        peers: dict[Any, Connection] = {}
        deadline = time.monotonic() + timeout
        while len(peers) < count:
            try:
                sock, peer = self._server.accept()
            except TimeoutError:
                sock = None
            if sock is not None and (joined := authenticated(sock, peer, self.key)):
                peers[joined[0]] = joined[1]
                continue
            check(peers)
            if time.monotonic() > deadline:
                for conn in peers.values():
                    conn.close()
                raise TimeoutError(f"{count - len(peers)} {what} did not connect in {timeout:g} s")
        return peers

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    def __enter__(self) -> Listener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def authenticated(sock: socket.socket, peer: Any, key: bytes) -> tuple[Any, Connection] | None:
    """The identity and connection of a peer that passed the key check; None, logged, for
    a peer that failed it (or stayed silent, or hung up)."""
    sock.setblocking(True)
    # A receive timeout on the socket itself, which the Connection's plain reads obey.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(HANDSHAKE_TIMEOUT_S))
    conn = Connection(os.dup(sock.fileno()))
    try:
        deliver_challenge(conn, key)
        answer_challenge(conn, key)
        identity = conn.recv()
    except (AuthenticationError, OSError, EOFError) as exc:
        conn.close()
        logger.warning(
            "refused a connection to the driver from %s: it failed the run's key check (%s)",
            peer[0],
            type(exc).__name__,
        )
        return None
    finally:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(0))
        sock.close()  # the Connection holds its own descriptor of the socket
    return identity, conn


def keep_alive(conn: Connection) -> None:
    """Notice a peer whose machine died (no FIN, no RST) in about 30 s, not hours."""
    sock = socket.socket(fileno=os.dup(conn.fileno()))
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 4)):
            if hasattr(socket, name):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
    finally:
        sock.close()


def _timeval(seconds: float) -> bytes:
    return struct.pack("ll", int(seconds), int(seconds % 1 * 1e6))
