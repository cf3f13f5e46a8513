"""The time ledger's figures, findings, checkpoint advice and files."""

from __future__ import annotations

import json
import math
import struct

import pytest

from lockstep._core import storage
from lockstep._core.time_ledger import (
    KEYS,
    TIME_FILE,
    TIME_HOT_FILE,
    RankTime,
    TimeLedger,
    read_ledger,
)


def test_the_json_keys_are_the_documented_ones() -> None:
    ledger = TimeLedger(wall=10.0, starting=1.0, replayed=2.0, per_rank=(RankTime(0),))
    assert list(ledger.as_dict()) == [
        "wall",
        "starting",
        "training",
        "data_wait",
        "barrier_wait",
        "checkpoint_stall",
        "recovering",
        "replayed",
        "preemption_drain",
        "shutdown",
        "goodput",
    ]
    assert tuple(ledger.as_dict()) == KEYS
    assert list(ledger.per_rank_dicts()[0]) == ["rank", *KEYS]
    assert ledger.as_dict()["training"] == 7.0
    assert ledger.goodput == pytest.approx(0.7)


def test_a_rank_gets_the_runs_shared_categories_and_its_own() -> None:
    ledger = TimeLedger(
        wall=10.0,
        starting=1.0,
        barrier_wait=1.0,
        per_rank=(RankTime(0, barrier_wait=2.0), RankTime(1, data_wait=0.5)),
    )
    zero, one = ledger.per_rank_dicts()
    assert (zero["starting"], zero["barrier_wait"], zero["training"]) == (1.0, 2.0, 7.0)
    assert (one["starting"], one["data_wait"], one["training"]) == (1.0, 0.5, 8.5)


def test_no_straggler_is_named_when_the_wait_is_small_or_shared() -> None:
    ranks = (RankTime(0, barrier_wait=0.1), RankTime(1, slowest_steps=10))
    assert TimeLedger(wall=10.0, num_steps=10, per_rank=ranks).findings() == []
    shared = (RankTime(0, barrier_wait=3.0, slowest_steps=5), RankTime(1, slowest_steps=5))
    assert TimeLedger(wall=10.0, num_steps=10, per_rank=shared).findings() == []


def test_data_waiting_under_a_fifth_of_a_step_says_nothing() -> None:
    assert TimeLedger(wall=10.0, data_wait=1.9).findings() == []
    assert TimeLedger(wall=10.0, data_wait=2.5, data_sources={"x": 2.5}).findings() == [
        "waiting for data for x took 25% of each step (2.5s of the run)"
    ]


def test_the_advice_is_young_daly_with_the_assumed_failure_rate() -> None:
    # 360 checkpoints of 10 s in an hour of steps, no failure: a day assumed
    ledger = TimeLedger(wall=3600.0, checkpoint_stall=3600.0, num_checkpoints=360)
    advice = ledger.checkpoint_advice()
    assert advice is not None
    assert advice.assumed
    assert advice.interval_s == pytest.approx(10.0)
    assert advice.cost_s == pytest.approx(10.0)
    assert advice.best_interval_s == pytest.approx(math.sqrt(2 * 10.0 * 86400.0))

    def lost(every: float) -> float:
        return 10.0 / every + every / (2 * 86400.0)

    assert advice.saving == pytest.approx(lost(10.0) - lost(advice.best_interval_s))
    assert "assumed" in advice.describe() and "FailureConfig(assumed_mtbf_s" in advice.describe()


def test_the_advice_uses_the_failures_seen_and_the_assumption_given() -> None:
    seen = TimeLedger(
        wall=1000.0, checkpoint_stall=1.0, num_checkpoints=1, num_failures=4
    ).checkpoint_advice()
    assert seen is not None and not seen.assumed
    assert seen.mtbf_s == pytest.approx(250.0)
    assert seen.best_interval_s == pytest.approx(math.sqrt(2 * 1.0 * 250.0))
    given = TimeLedger(
        wall=1000.0, checkpoint_stall=1.0, num_checkpoints=1, assumed_mtbf_s=50.0
    ).checkpoint_advice()
    assert given is not None and given.mtbf_s == 50.0


def test_no_advice_within_a_factor_of_two_or_without_checkpoints() -> None:
    best = math.sqrt(2 * 1.0 * 86400.0)  # 415.7 s
    near = TimeLedger(wall=best * 1.5 * 4, checkpoint_stall=4.0, num_checkpoints=4)
    assert near.checkpoint_advice() is None
    assert TimeLedger(wall=100.0).checkpoint_advice() is None


def _hot(values: dict[str, float], seq: int, ranks: int = 0) -> bytes:
    from lockstep._core.time_ledger import HOT_HEADER, HOT_RANK, HOT_RUN

    figures = [1.0, float(seq), float(ranks)] + [values.get(n, 0.0) for n in HOT_RUN]
    figures += [0.0] * (ranks * len(HOT_RANK))
    assert len(HOT_HEADER) == 3
    return struct.pack(f"<{len(figures)}d", *figures)


def test_the_newer_of_the_two_files_is_read(tmp_path) -> None:  # type: ignore[no-untyped-def]
    run_dir = storage.StorageDir.from_uri(str(tmp_path))
    assert read_ledger(run_dir) is None
    older = TimeLedger(wall=5.0, data_sources={"train": 1.0})
    run_dir.write_atomic(TIME_FILE, json.dumps({**older.to_json(), "seq": 3}).encode())
    (tmp_path / TIME_HOT_FILE).write_bytes(_hot({"wall": 9.0}, seq=2))
    ledger, seq = read_ledger(run_dir)  # type: ignore[misc]
    assert (ledger.wall, seq) == (5.0, 3)
    (tmp_path / TIME_HOT_FILE).write_bytes(_hot({"wall": 9.0}, seq=4, ranks=2))
    ledger, seq = read_ledger(run_dir)  # type: ignore[misc]
    assert (ledger.wall, seq, len(ledger.per_rank)) == (9.0, 4, 2)
    assert ledger.data_sources == {"train": 1.0}  # only the JSON has names
    (tmp_path / TIME_HOT_FILE).write_bytes(b"\0" * 12)  # cut short: not read
    assert read_ledger(run_dir)[0].wall == 5.0  # type: ignore[index]
