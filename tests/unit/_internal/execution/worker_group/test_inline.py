"""The inline worker's end of its pipe outlives the session thread that reads it."""

from __future__ import annotations

import gc
import weakref
from multiprocessing.connection import Connection

from lockstep import tune
from lockstep._internal.execution.worker import session as session_module


def test_the_worker_end_is_not_closed_while_the_session_reader_may_read_it(tmp_path, monkeypatch):
    # Closed under a reader about to read, its descriptor number goes to the next pipe
    # opened (the next Tune trial's), whose messages that reader would then take.
    seen = {}
    closes = []
    close = Connection.close

    def recording_close(conn):
        if conn is seen.get("conn"):
            closes.append(seen["reader"].is_alive())
        close(conn)

    monkeypatch.setattr(Connection, "close", recording_close)

    def objective(config):  # a Tune function trial: run inline, never pickled
        session = session_module.current()
        seen["conn"], seen["reader"] = session._conn, session._reader
        tune.report({"step": 1})

    (result,) = tune.Tuner(
        objective, run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0)
    ).fit()
    assert result.error is None
    seen["reader"].join(timeout=30)
    assert not seen["reader"].is_alive()  # it saw the driver's end close
    assert True not in closes  # never closed under the running reader
    conn = weakref.ref(seen.pop("conn"))
    seen.clear()
    gc.collect()
    assert conn() is None  # nor kept open once nothing reads it (collected: closed)
