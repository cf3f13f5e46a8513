import pytest

from lockstep._core import flags


def test_default_and_override(monkeypatch):
    assert flags.WORKER_SHUTDOWN_GRACE_S.get() == 2.0
    monkeypatch.setenv("LOCKSTEP_WORKER_SHUTDOWN_GRACE_S", "0.5")
    assert flags.WORKER_SHUTDOWN_GRACE_S.get() == 0.5


def test_bad_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("LOCKSTEP_PROGRESS_INTERVAL_S", "soon")
    with pytest.raises(
        ValueError, match="LOCKSTEP_PROGRESS_INTERVAL_S='soon' is not a valid float"
    ):
        flags.PROGRESS_INTERVAL_S.get()


def test_only_flags_reads_the_environment():
    import pathlib

    import lockstep

    root = pathlib.Path(lockstep.__file__).parent
    readers = [
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if "os.environ.get" in p.read_text() or "os.getenv" in p.read_text()
    ]
    assert readers == ["_core/flags.py"]
