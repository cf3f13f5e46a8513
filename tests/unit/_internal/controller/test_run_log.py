import csv
import json

from lockstep._core.storage import StorageDir
from lockstep._internal.controller.run_log import RunLog, flatten


def test_flatten():
    assert flatten({"a": 1, "b": {"c": 2, "d": {"e": 3}}}) == {"a": 1, "b/c": 2, "b/d/e": 3}


def test_lines_and_csv_grow_columns(tmp_path):
    run_dir = StorageDir.from_uri(tmp_path)
    log = RunLog(run_dir)
    log.append({"loss": 1.0, "training_iteration": 1})
    log.append({"loss": 0.5, "training_iteration": 2, "extra": {"acc": 0.9}})
    log.append({"loss": 0.2, "training_iteration": 3})
    log.close()
    lines = [json.loads(x) for x in (tmp_path / "result.json").read_text().splitlines()]
    assert [x["loss"] for x in lines] == [1.0, 0.5, 0.2]
    rows = list(csv.DictReader((tmp_path / "progress.csv").open()))
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
    assert len(list(csv.DictReader((tmp_path / "progress.csv").open()))) == 2


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
