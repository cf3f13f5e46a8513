"""When one rank dies, its peers fail too (a closed connection): the error names the rank
that died first, and lists the peers' errors as its consequences."""

import dataclasses
import os
import random
import signal
import socket

import pytest

from lockstep import train
from lockstep._core.errors import root_cause
from lockstep.train import DataParallelTrainer, FailureConfig, TrainingFailedError
from tests.helpers import fit_on

KILLS = 25


def ping_pong(config):
    """Rank 0 and rank 1 exchange a byte per round over their own socket, as a collective
    library's ranks do; rank 1 kills itself (SIGKILL) at a random moment of a random round.
    Rank 0 then fails with gloo's words for it."""
    rank = train.get_context().get_world_rank()
    server = socket.create_server(("127.0.0.1", 0)) if rank == 0 else None
    port = train.collective.broadcast_from_rank_zero(server.getsockname()[1] if server else 0)
    if server is not None:
        peer, _ = server.accept()
        server.close()
    else:
        peer = socket.create_connection(("127.0.0.1", port))
    moment = random.randrange(2 * config["rounds"])
    with peer:
        for i in range(2 * config["rounds"]):
            if rank == 1 and i == moment:
                os.kill(os.getpid(), signal.SIGKILL)
            if (i + rank) % 2 == 0:
                peer.sendall(b"x")
            elif not peer.recv(1):
                raise RuntimeError(f"Connection closed by peer [127.0.0.1]:{port}")
    train.report({"done": 1})


class Blame(train.UserCallback):
    """The root cause of every failed attempt."""

    def __init__(self):
        self.roots = []

    def after_exception(self, run_context, worker_exceptions):
        self.roots.append(root_cause(worker_exceptions))


@pytest.mark.slow
def test_the_rank_killed_is_named_every_time(run_config):
    blame = Blame()
    config = dataclasses.replace(
        run_config, callbacks=[blame], failure_config=FailureConfig(max_failures=KILLS - 1)
    )
    with pytest.raises(TrainingFailedError) as raised:
        fit_on(DataParallelTrainer, ping_pong, config, train_loop_config={"rounds": 20})
    assert len(blame.roots) == KILLS
    for root in blame.roots:
        assert (root.rank, root.kind) == (1, "signal"), root.summary
    error = raised.value
    pid = error.root_cause.pid
    assert error.root_cause.rank == 1 and error.worker_failures[1].pid == pid
    assert str(error).startswith(f"Training failed: rank 1 (pid {pid}) was killed by SIGKILL")
    if 0 in error.worker_failures:  # rank 0 saw the closed connection before it was stopped
        assert "Consequences on other workers:\n  rank 0" in str(error)
