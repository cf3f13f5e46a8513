"""``lockstep status``'s rows and sentence, and the driver's socket."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from lockstep._core import storage
from lockstep._internal.controller import status
from lockstep._internal.controller.hang import Frame
from lockstep._internal.controller.status import RankFacts, RankRow, rank_row, summary
from lockstep._internal.execution.worker.phases import Phase


def facts(rank: int, **kwargs: object) -> RankFacts:
    values: dict[str, object] = {
        "rank": rank,
        "pid": 100 + rank,
        "node": "n1",
        "started": True,
        "steps": 16,
        "waiting_for_step": None,
        "last_report": 50.0,
    }
    values.update(kwargs)
    return RankFacts(**values)  # type: ignore[arg-type]


def row(
    rank: int, page: Phase | None = None, frames: list[Frame] | None = None, **kwargs: object
) -> RankRow:
    run_dir = storage.StorageDir.from_uri("/nonexistent")
    made = rank_row(facts(rank, **kwargs), page, None, now=100.0, run_dir=run_dir)
    if frames is not None:
        status._from_stack(made, frames)
    return made


IN_ALL_REDUCE = [
    Frame("/env/site-packages/torch/distributed/distributed_c10d.py", 2800, "all_reduce"),
    Frame("/home/me/train.py", 88, "step"),
    Frame("/home/me/train.py", 120, "train_func"),
]


def test_a_rank_in_a_collective_is_named_with_where_the_others_wait() -> None:
    rows = [
        row(0, waiting_for_step=17, page=Phase("report", 16, 59.0)),
        row(1, page=Phase("training", -1, 59.0), frames=IN_ALL_REDUCE),
        row(2, waiting_for_step=17, page=Phase("report", 16, 60.0)),
        row(3, waiting_for_step=17, page=Phase("report", 16, 61.0)),
    ]
    assert [r.phase for r in rows] == ["report", "collective", "report", "report"]
    assert rows[1].seconds_in_phase == 41.0
    assert summary(rows, state="running") == (
        "rank 1 (pid 101, node n1) has been in all_reduce for 41 s in step() at train.py:88; "
        "ranks 0, 2, 3 wait in report() for step 17"
    )
    assert rows[1].detail == "in all_reduce, from step() at train.py:88"


def test_all_ranks_waiting_for_data_name_the_slowest_stage() -> None:
    page = Phase("data_wait", -1, 88.0, what="the train dataset", detail="map_batches(tokenize)")
    rows = [row(0, page=page), row(1, page=page)]
    assert summary(rows, state="running") == (
        "all ranks waiting for data for 12 s: the train dataset's map_batches(tokenize) is "
        "the slowest stage"
    )


def test_a_rank_persisting_a_checkpoint_says_how_far_it_got(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "stage").mkdir()
    (tmp_path / "stage" / "a.bin").write_bytes(b"x" * 3_000_000)
    run_dir = storage.StorageDir.from_uri(str(tmp_path))
    page = Phase("checkpoint", 3, 90.0, size=4_000_000, what="stage")
    made = rank_row(facts(0), page, None, now=100.0, run_dir=run_dir)
    waiting = row(1, waiting_for_step=4, page=Phase("report", 3, 95.0))
    assert summary([made, waiting], state="running") == (
        "rank 0 (pid 100, node n1) is persisting a checkpoint: 3.0 MB written of about "
        "4.0 MB, 300.0 kB/s; rank 1 waits in report() for step 4"
    )


def test_without_a_page_the_driver_knows_who_waits_and_who_starts() -> None:
    rows = [row(0, waiting_for_step=3), row(1, started=False)]
    assert [r.phase for r in rows] == ["report", "starting"]
    assert rows[0].seconds_in_phase == 50.0  # since its report
    assert summary(rows, state="running") == (
        "rank 1 (pid 101, node n1) has not started its training function yet; "
        "rank 0 waits in report() for step 3"
    )


def test_without_a_page_a_rank_in_its_code_counts_from_its_last_report() -> None:
    # a rank on another node: the driver has its reports, and its stack when asked
    made = row(1, frames=IN_ALL_REDUCE[1:])
    assert (made.phase, made.seconds_in_phase, made.detail) == (
        "training",
        50.0,
        "in step() at train.py:88",
    )
    assert summary([made, row(0, waiting_for_step=17)], state="running") == (
        "rank 1 (pid 101, node n1) has been in its own code for 50 s in step() at "
        "train.py:88; rank 0 waits in report() for step 17"
    )


def test_a_dead_rank_comes_first() -> None:
    rows = [row(0, dead="rank 0 (pid 100) was killed by SIGKILL"), row(1)]
    assert rows[0].phase == "dead"
    assert summary(rows, state="running").startswith("rank 0 (pid 100, node n1) is dead")


def test_the_json_row_has_the_documented_keys() -> None:
    made = row(0, page=Phase("training", -1, 99.0))
    assert list(made.as_dict(stacks=False)) == [
        "rank",
        "pid",
        "node",
        "phase",
        "seconds_in_phase",
        "steps",
        "since_last_report_s",
        "detail",
    ]
    assert made.as_dict(stacks=True)["stack"] == ""


def test_a_stuck_driver_is_named() -> None:
    assert status.driver_note(99, 2.0, None) is None
    note = status.driver_note(99, 40.0, threading.get_ident())
    assert note is not None
    assert note.startswith("the driver (pid 99) has not updated the run for 40 s, in ")


def test_the_socket_answers_only_its_user_and_goes_away(tmp_path) -> None:  # type: ignore[no-untyped-def]
    run_dir = storage.StorageDir.from_uri(str(tmp_path / ("a" * 120)))  # a long path
    run_dir.makedirs()
    asked: list[dict[str, object]] = []

    def answer(request: dict[str, object]) -> dict[str, object]:
        asked.append(request)
        return {"summary": "fine", "state": "running"}

    server = status.StatusServer(run_dir, answer)
    try:
        path = run_dir.join(status.SOCKET_FILE)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert status.ask(run_dir.join(""), stacks=True) == {"summary": "fine", "state": "running"}
        assert asked == [{"stacks": True}]
    finally:
        server.close()
    assert not os.path.exists(run_dir.join(status.SOCKET_FILE))
    assert status.ask(run_dir.join("")) is None


def test_an_answer_that_fails_is_an_error_not_a_dead_driver(tmp_path) -> None:  # type: ignore[no-untyped-def]
    run_dir = storage.StorageDir.from_uri(str(tmp_path))

    def answer(request: dict[str, object]) -> dict[str, object]:
        raise KeyError("gone")

    server = status.StatusServer(run_dir, answer)
    try:
        assert status.ask(str(tmp_path)) == {"error": "KeyError: 'gone'"}
    finally:
        server.close()


@pytest.mark.parametrize("value, text", [(512, "512 B"), (2_500_000, "2.5 MB"), (4e9, "4.0 GB")])
def test_sizes_read_as_people_say_them(value: float, text: str) -> None:
    assert status._bytes(value) == text


def test_ranks_all_in_their_code_say_since_when_and_where() -> None:
    where = [Frame("/home/me/train.py", 12, "forward")]
    rows = [row(r, page=Phase("training", -1, 97.0), frames=where) for r in (0, 1)]
    assert summary(rows, state="running") == (
        "all ranks in their training function after step 16, in forward() at train.py:12, "
        "the last report 50 s ago"
    )
    fresh = [row(r, page=Phase("training", -1, 99.0), last_report=None, steps=0) for r in (0, 1)]
    assert summary(fresh, state="running") == (
        "all ranks in their training function; none has reported yet"
    )
