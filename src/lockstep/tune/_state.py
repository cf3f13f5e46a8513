"""The experiment directory: the Tuner's arguments, and the experiment state.

``experiment_state.pkl`` holds the trials, the search algorithm and the scheduler; it is
rewritten atomically (write, fsync, rename), so a driver killed at any moment leaves the
previous or the new state, never a torn one. ``experiment_state.json`` is the same for
people to read.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from lockstep._core import pickling, storage

TUNER_FILE = "tuner.pkl"
STATE_FILE = "experiment_state.pkl"
STATE_JSON = "experiment_state.json"
STUDY_FILE = "optuna.db"
STATE_VERSION = 1


def write_state(exp_dir: storage.StorageDir, state: dict[str, Any]) -> None:
    data = pickling.dumps_plain({**state, "version": STATE_VERSION}, "the experiment state")
    exp_dir.write_atomic(STATE_FILE, data)
    # The same for people to read: replaced whole, not flushed (the pickle is the state).
    exp_dir.write_atomic(STATE_JSON, _summary(state["status"], state["trials"]), fsync=False)


def _summary(status: str, trials: list[Any]) -> bytes:
    """experiment_state.json: one line per trial (json's C encoder; with ``indent`` json
    encodes in Python, ten times slower, and the state is written again and again)."""
    rows = ",\n".join(
        json.dumps(
            {
                "trial_id": t.trial_id,
                "status": t.status,
                "dirname": t.dirname,
                "last_result": t.last_result,
                "error": t.error_text,
            },
            default=str,
        )
        for t in trials
    )
    head = json.dumps({"status": status, "time": time.time()})
    return f'{head[:-1]}, "trials": [\n{rows}\n]}}\n'.encode()


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
    so that saving takes at most about 2% of the experiment's time (a state of 10,000
    trials takes a fraction of a second to write; the journal keeps what came after it)."""

    def __init__(self, minimum: float = 0.5) -> None:
        self._minimum = minimum
        self._interval = minimum
        self._last = 0.0

    def due(self) -> bool:
        return time.monotonic() - self._last >= self._interval

    def done(self, took: float) -> None:
        self._last = time.monotonic()
        self._interval = max(self._minimum, 50 * took)


JOURNAL_FILE = "trial_events.jsonl"


class Journal:
    """Trial creations and ends since the last snapshot, one appended line each.

    A line costs microseconds where a snapshot costs an fsync, so every event is recorded
    at once and the snapshot is taken now and then; restore replays the lines written
    after it. A line cut short by a kill is skipped.
    """

    def __init__(self, exp_dir: storage.StorageDir) -> None:
        self._exp_dir = exp_dir
        self.num_lines = len(read_journal(exp_dir))
        self._fd: int | None = None  # open while the experiment runs: one write a line

    def created(self, trial: Any) -> None:
        import base64

        blob = base64.b64encode(pickling.dumps_plain(trial, "the trial")).decode("ascii")
        self._append({"event": "created", "trial_id": trial.trial_id, "trial": blob})

    def ended(self, trial: Any) -> None:
        self._append({"event": "ended", "trial_id": trial.trial_id, "status": trial.status})

    def _append(self, record: dict[str, Any]) -> None:
        line = json.dumps(record) + "\n"
        if not isinstance(self._exp_dir, storage.LocalDir):
            self._exp_dir.append_text(JOURNAL_FILE, line)
        else:
            if self._fd is None:
                self._fd = storage.open_append(self._exp_dir.join(JOURNAL_FILE))
            storage.write_all(self._fd, line.encode())  # in the kernel's hands: a kill loses none
        self.num_lines += 1

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def read_journal(exp_dir: storage.StorageDir) -> list[dict[str, Any]]:
    if not exp_dir.exists(JOURNAL_FILE):
        return []
    records = []
    for line in exp_dir.read_text(JOURNAL_FILE).splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def replay_journal(state: dict[str, Any], exp_dir: storage.StorageDir) -> list[Any]:
    """Bring the snapshot ``state`` up to date with the journal lines written after it.
    Returns the trials that ended after it, whose results the snapshot's searcher never
    learned (see :func:`tell_ended`)."""
    import base64

    import cloudpickle

    trials = {t.trial_id: t for t in state["trials"]}
    ended: dict[str, Any] = {}
    for record in read_journal(exp_dir)[state.get("num_events", 0) :]:
        if record["event"] == "created" and record["trial_id"] not in trials:
            trial = cloudpickle.loads(base64.b64decode(record["trial"]))
            state["searcher"].restore_trial(
                getattr(trial, "search_key", trial.trial_id), dict(trial.config)
            )
            state["trials"].append(trial)
            state["num_created"] += 1
            trials[trial.trial_id] = trial
        elif record["event"] == "ended" and record["trial_id"] in trials:
            trials[record["trial_id"]].status = record["status"]
            ended[record["trial_id"]] = trials[record["trial_id"]]
    return list(ended.values())


def tell_ended(searcher: Any, trials: list[Any]) -> None:
    """Tell ``searcher`` the results of ``trials``, which ended after its snapshot (read
    back from their directories): restored, it knows every finished trial."""
    for trial in trials:
        key = str(getattr(trial, "search_key", trial.trial_id))
        if trial.status == "ERROR":
            searcher.on_trial_complete(key, None, error=True)
        elif trial.status == "TERMINATED":
            searcher.on_trial_complete(key, dict(trial.last_result) or None)
