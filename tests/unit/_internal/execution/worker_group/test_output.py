"""The output pump keeps each rank's last lines for the error of a worker that fails."""

from __future__ import annotations

import io
import os
import sys

from lockstep._internal.execution.worker_group.output import TAIL_LINES, OutputPump


def test_the_last_lines_of_both_streams_are_kept_per_rank(monkeypatch):
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    pump = OutputPump()
    writers = {}
    for rank in (0, 1):
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        pump.add(rank, os.fdopen(out_r, "rb", buffering=0), os.fdopen(err_r, "rb", buffering=0))
        writers[rank] = (out_w, err_w)
    pump.start()
    os.write(writers[0][0], b"to stdout\n")
    os.write(writers[0][1], b"Traceback: boom\nno newline at the end")
    os.write(writers[1][0], b"".join(b"line %d\n" % i for i in range(30)))
    for fds in writers.values():
        for fd in fds:
            os.close(fd)
    # each returns as soon as that rank's streams ended
    assert pump.tail(1, wait=30.0) == tuple(f"line {i}" for i in range(30 - TAIL_LINES, 30))
    assert sorted(pump.tail(0, wait=30.0)) == [
        "Traceback: boom",
        "no newline at the end",
        "to stdout",
    ]
    pump.join()
    assert "(rank 1) line 29\n" in sys.stdout.getvalue()
    assert "(rank 0) no newline at the end\n" in sys.stderr.getvalue()
