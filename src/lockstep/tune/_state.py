"""The experiment directory: the Tuner's arguments, and the experiment state.

``experiment_state.pkl`` holds the trials, the search algorithm and the scheduler; it is
rewritten atomically (write, fsync, rename), so a driver killed at any moment leaves the
previous or the new state, never a torn one. ``experiment_state.json`` is the same for
people to read.
"""

from __future__ import annotations

import json
import time
from typing import Any

from lockstep._core import pickling, storage

TUNER_FILE = "tuner.pkl"
STATE_FILE = "experiment_state.pkl"
STATE_JSON = "experiment_state.json"
STUDY_FILE = "optuna.db"
STATE_VERSION = 1


def write_state(exp_dir: storage.StorageDir, state: dict[str, Any]) -> None:
    data = pickling.dumps({**state, "version": STATE_VERSION}, "the experiment state")
    exp_dir.write_atomic(STATE_FILE, data)
    summary = {
        "status": state["status"],
        "time": time.time(),
        "trials": [
            {
                "trial_id": t.trial_id,
                "status": t.status,
                "dirname": t.dirname,
                "last_result": t.last_result,
                "error": t.error_text,
            }
            for t in state["trials"]
        ],
    }
    exp_dir.write_atomic(STATE_JSON, json.dumps(summary, default=str, indent=1).encode())


def read_state(exp_dir: storage.StorageDir) -> dict[str, Any]:
    import cloudpickle

    state: dict[str, Any] = cloudpickle.loads(exp_dir.read_bytes(STATE_FILE))
    if state.get("version") != STATE_VERSION:
        raise ValueError(f"experiment state version {state.get('version')!r} is not supported")
    return state


def has_state(exp_dir: storage.StorageDir) -> bool:
    return exp_dir.exists(STATE_FILE)


class SaveThrottle:
    """Saves at most every ``interval`` seconds, the interval growing with the save's cost,
    so that saving never takes more than a small part of the experiment's time."""

    def __init__(self, minimum: float = 0.5) -> None:
        self._minimum = minimum
        self._interval = minimum
        self._last = 0.0

    def due(self) -> bool:
        return time.monotonic() - self._last >= self._interval

    def done(self, took: float) -> None:
        self._last = time.monotonic()
        self._interval = max(self._minimum, 20 * took)
