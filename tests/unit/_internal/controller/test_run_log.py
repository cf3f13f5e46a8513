import csv
import io
import json
import os

from lockstep._core.result import read_results
from lockstep._core.storage import StorageDir
from lockstep._internal.controller.run_log import Journal, RunLog


def test_lines_and_csv_grow_columns(tmp_path):
    run_dir = StorageDir.from_uri(tmp_path)
    log = RunLog(run_dir)
    log.append({"loss": 1.0, "training_iteration": 1})
    log.append({"loss": 0.5, "training_iteration": 2, "extra": {"acc": 0.9}})
    log.append({"loss": 0.2, "training_iteration": 3})
    log.close()
    lines = [json.loads(x) for x in (tmp_path / "result.json").read_text().splitlines()]
    assert [x["loss"] for x in lines] == [1.0, 0.5, 0.2]
    rows = list(csv.DictReader(io.StringIO((tmp_path / "progress.csv").read_text())))
    assert list(rows[0]) == ["loss", "training_iteration", "extra/acc"]
    assert [r["extra/acc"] for r in rows] == ["", "0.9", ""]


def test_reopen_appends(tmp_path):
    run_dir = StorageDir.from_uri(tmp_path)
    first = RunLog(run_dir)
    first.append({"x": 1})
    first.close()
    second = RunLog(run_dir)
    assert second.last_row == {"x": 1}
    second.append({"x": 2})
    second.close()
    assert len((tmp_path / "result.json").read_text().splitlines()) == 2
    assert len(list(csv.DictReader(io.StringIO((tmp_path / "progress.csv").read_text())))) == 2


def test_object_store_is_written_at_flush(request):
    run_dir = StorageDir.from_uri(f"memory://lockstep-runlog/{request.node.name}")
    run_dir.makedirs()
    try:
        log = RunLog(run_dir)
        log.append({"x": 1})
        assert not run_dir.exists("result.json")
        log.flush()
        assert json.loads(run_dir.read_text("result.json")) == {"x": 1}
        assert run_dir.read_text("progress.csv").splitlines() == ["x", "1"]
    finally:
        run_dir.remove("")


def test_object_store_rows_wait_in_a_local_journal_for_the_next_driver(request, tmp_path):
    run_dir = StorageDir.from_uri(f"memory://lockstep-runlog/{request.node.name}")
    run_dir.makedirs()
    try:
        dead = RunLog(run_dir)
        dead.append({"x": 1, "training_iteration": 1})
        dead.flush()  # uploaded
        dead.append({"x": 2, "training_iteration": 2})  # in the journal only: the driver dies
        journal = Journal.of(run_dir)
        assert os.path.exists(journal.path)
        assert [r["x"] for r in read_results(run_dir)] == [1]

        again = RunLog(run_dir)
        assert again.reconcile(lambda row: True) == 0
        assert [r["x"] for r in read_results(run_dir)] == [1, 2]  # uploaded now
        assert not os.path.exists(journal.path)
        again.close()
    finally:
        run_dir.remove("")
        if dead._journal is not None:
            dead._journal.clear()


def test_reconcile_drops_rows_and_a_torn_line(tmp_path):
    run_dir = StorageDir.from_uri(tmp_path)
    log = RunLog(run_dir)
    for i in (1, 2, 3):
        log.append({"x": i, "training_iteration": i})
    log.close()
    with open(tmp_path / "result.json", "a") as f:
        f.write('{"x": 4, "trai')  # a write cut short
    again = RunLog(run_dir)
    assert again.reconcile(lambda row: row["x"] != 3) == 1
    assert [r["x"] for r in read_results(run_dir)] == [1, 2]
    assert len(list(csv.DictReader(io.StringIO((tmp_path / "progress.csv").read_text())))) == 2
    again.close()


def test_appended_lines_are_the_lines_a_whole_rewrite_writes(tmp_path):
    run_dir = StorageDir.from_uri(tmp_path)
    rows = [
        {"name": "a,b", "quote": 'say "hi"', "n": 1, "x": 0.1, "flag": True, "none": None},
        {"name": "line\nbreak", "quote": "", "n": -2, "x": float("nan"), "flag": False},
        {"name": "plain", "quote": "q", "n": 3, "x": 1e-300, "nested": {"a": {"b": 2}}},
        {"name": "ü", "quote": "'", "n": 4, "x": 2.5, "nested": {"a": {"b": 3}}},
    ]
    log = RunLog(run_dir)
    for row in rows:
        log.append(dict(row), sync=False)
    log.close()
    appended = ((tmp_path / "result.json").read_bytes(), (tmp_path / "progress.csv").read_bytes())
    again = RunLog(run_dir)
    again.reconcile(lambda row: True)  # writes both files whole from the rows read back
    again.close()
    rewritten = ((tmp_path / "result.json").read_bytes(), (tmp_path / "progress.csv").read_bytes())
    assert appended == rewritten
    text = (tmp_path / "progress.csv").read_bytes().decode()  # its line ends as written
    table = list(csv.DictReader(io.StringIO(text, newline="")))
    assert [r["name"] for r in table] == ["a,b", "line\nbreak", "plain", "ü"]
    assert [r["nested/a/b"] for r in table] == ["", "", "2", "3"]


def test_a_new_runs_first_row_creates_both_files_by_appending(tmp_path, monkeypatch):
    run_dir = StorageDir.from_uri(tmp_path)
    written = []
    monkeypatch.setattr(
        type(run_dir), "write_atomic", lambda self, rel, data, **kw: written.append(rel)
    )
    log = RunLog(run_dir)
    log.append({"loss": 1.0, "training_iteration": 1})
    log.append({"loss": 0.5, "training_iteration": 2})
    log.close()
    assert written == []  # no whole-file rewrite: two files opened for appending
    assert read_results(run_dir) == [
        {"loss": 1.0, "training_iteration": 1},
        {"loss": 0.5, "training_iteration": 2},
    ]
    rows = list(csv.DictReader((tmp_path / "progress.csv").open()))
    assert rows == [
        {"loss": "1.0", "training_iteration": "1"},
        {"loss": "0.5", "training_iteration": "2"},
    ]


def test_progress_csv_follows_result_json_at_catch_up(tmp_path):
    def table():
        return list(csv.DictReader((tmp_path / "progress.csv").open()))

    run_dir = StorageDir.from_uri(tmp_path)
    log = RunLog(run_dir)
    log.append({"loss": 1.0, "training_iteration": 1})  # a new run's first line: both files
    log.append({"loss": 0.5, "training_iteration": 2})
    log.append({"loss": 0.2, "training_iteration": 3, "extra": {"acc": 0.9}})
    assert [r["training_iteration"] for r in read_results(run_dir)] == [1, 2, 3]
    assert log.behind
    assert table() == [{"loss": "1.0", "training_iteration": "1"}]
    log.catch_up()  # two lines, one with a new column: the table is written whole
    assert not log.behind
    assert [(r["training_iteration"], r["extra/acc"]) for r in table()] == [
        ("1", ""),
        ("2", ""),
        ("3", "0.9"),
    ]
    log.append({"loss": 0.1, "training_iteration": 4})
    log.append({"loss": 0.0, "training_iteration": 5})
    log.catch_up()  # appended, in one write
    assert [(r["training_iteration"], r["extra/acc"]) for r in table()][3:] == [
        ("4", ""),
        ("5", ""),
    ]
    log.close()
    again = RunLog(run_dir)
    assert again.reconcile(lambda row: True) == 0
    assert [r["training_iteration"] for r in table()] == ["1", "2", "3", "4", "5"]
    again.close()


def test_a_long_runs_rows_are_not_kept_in_memory(tmp_path):
    """Locally the files hold every row: the driver keeps the last one only, so a run of
    a million steps does not hold a million rows; a column that appears late still
    rewrites progress.csv from every row, read back from result.json."""
    import tracemalloc

    log = RunLog(StorageDir.from_uri(tmp_path))
    log.append({"loss": 0.0, "training_iteration": 1})

    def steps(first: int, last: int) -> None:
        for i in range(first, last + 1):
            log.append({"loss": 1.0 / i, "step": i, "training_iteration": i})
            if i % 500 == 0:
                log.catch_up()

    steps(2, 1000)  # what the first steps import and allocate once
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    steps(1001, 6000)
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert grown < 100_000, f"5,000 rows grew the log by {grown} bytes"  # kept: ~2 MB
    assert log.last_row == {"loss": 1.0 / 6000, "step": 6000, "training_iteration": 6000}
    log.append({"loss": 0.1, "val_acc": 0.5, "training_iteration": 6001})
    log.close()
    table = list(csv.DictReader(io.StringIO((tmp_path / "progress.csv").read_text())))
    assert len(table) == 6001
    assert list(table[0]) == ["loss", "training_iteration", "step", "val_acc"]
    assert [table[0]["step"], table[1]["step"], table[-1]["val_acc"]] == ["", "2", "0.5"]
    assert [r["training_iteration"] for r in read_results(StorageDir.from_uri(tmp_path))] == list(
        range(1, 6002)
    )


def test_appending_after_close_continues_the_files(tmp_path):
    log = RunLog(StorageDir.from_uri(tmp_path))
    for i in range(1, 4):
        log.append({"x": i, "training_iteration": i})
    log.close()
    log.append({"x": 4, "training_iteration": 4})
    log.close()
    assert [r["x"] for r in read_results(StorageDir.from_uri(tmp_path))] == [1, 2, 3, 4]
    table = list(csv.DictReader(io.StringIO((tmp_path / "progress.csv").read_text())))
    assert [r["x"] for r in table] == ["1", "2", "3", "4"]


def test_opening_a_long_run_reads_its_rows_one_at_a_time(tmp_path):
    """A driver that opens a run of many steps (a restore, a restart) keeps the last row,
    not every row: the rows are read and written back a line at a time."""
    import tracemalloc

    run_dir = StorageDir.from_uri(tmp_path)
    log = RunLog(run_dir)
    for i in range(1, 20_001):
        log.append({"loss": 1.0 / i, "step": i, "training_iteration": i}, sync=False)
    log.close()
    with open(tmp_path / "result.json", "a") as f:
        f.write('{"loss": 0.0, "trai')  # a write cut short
    tracemalloc.start()
    again = RunLog(run_dir)
    dropped = again.reconcile(lambda row: row["training_iteration"] % 1000 != 0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1_000_000, f"opening 20,000 rows took {peak} bytes"  # all of them: ~10 MB
    assert dropped == 20
    assert again.last_row == {"loss": 1.0 / 19_999, "step": 19_999, "training_iteration": 19_999}
    again.append({"loss": 0.5, "step": 20_001, "training_iteration": 20_001})
    again.close()
    rows = read_results(run_dir)
    assert len(rows) == 19_981 and rows[-1]["step"] == 20_001
    table = list(csv.DictReader(io.StringIO((tmp_path / "progress.csv").read_text())))
    assert [r["step"] for r in table] == [str(r["step"]) for r in rows]
