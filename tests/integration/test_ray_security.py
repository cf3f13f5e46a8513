"""The Ray executor's driver listener: on the node's own address, only while the workers
connect, and closed to anyone without the run's key."""

from __future__ import annotations

import logging
import socket
import threading
from multiprocessing import AuthenticationError
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge

import psutil
import pytest

from lockstep import train
from lockstep.train import DataParallelTrainer, ScalingConfig

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_connected")]


class Intruder(logging.Handler):
    """Connects to the driver's listener with a wrong key as soon as it is announced.

    The TCP connection is made at once, in the driver's thread, so it is queued before any
    worker's; the key exchange then runs in a thread of its own, as the driver answers it.
    """

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.address: tuple[str, int] | None = None
        self.listening: list[str] = []
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if not record.getMessage().startswith("waiting for") or self.thread is not None:
            return
        _, host, port = record.args  # type: ignore[misc]
        self.address = (host, port)
        self.listening = [
            c.laddr.ip
            for c in psutil.Process().net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port
        ]
        sock = socket.create_connection(self.address)
        self.thread = threading.Thread(target=self._exchange, args=(sock,))
        self.thread.start()

    def _exchange(self, sock: socket.socket) -> None:
        conn = Connection(sock.detach())
        try:
            answer_challenge(conn, b"not the run's key")
            deliver_challenge(conn, b"not the run's key")
        except AuthenticationError as exc:
            self.error = exc
        finally:
            conn.close()


def test_a_wrong_key_is_refused_and_logged_and_the_run_goes_on(run_config, caplog):
    import ray

    caplog.set_level(logging.DEBUG, logger="lockstep")
    intruder = Intruder()
    logging.getLogger("lockstep").addHandler(intruder)
    try:
        result = DataParallelTrainer(
            lambda: train.get_context().get_world_rank() + 10,
            scaling_config=ScalingConfig(num_workers=2, executor="ray"),
            run_config=run_config,
        ).fit()
    finally:
        logging.getLogger("lockstep").removeHandler(intruder)
        if intruder.thread is not None:
            intruder.thread.join()

    assert result.error is None
    assert result.return_value == 10  # rank 0's
    assert isinstance(intruder.error, AuthenticationError)  # told so, then dropped
    host = ray.util.get_node_ip_address()
    assert intruder.address is not None and intruder.address[0] == host
    assert intruder.listening == [host]  # the node's address, not every interface
    refused = [r for r in caplog.records if "refused a connection to the driver" in r.message]
    assert len(refused) == 1 and refused[0].levelno == logging.WARNING
    assert "failed the run's key check" in refused[0].message
    # Once every worker is in, nothing listens there any more.
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(intruder.address, timeout=10).close()
