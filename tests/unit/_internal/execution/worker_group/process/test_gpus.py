import pytest

from lockstep._internal.execution.worker_group.process import gpus


def test_visible_from_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert gpus.visible_gpus() == ["2", "3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert gpus.visible_gpus() == []


@pytest.mark.parametrize(
    ("per_worker", "expected"),
    [
        (1, [["a"], ["b"], ["c"], ["d"]]),
        (2, [["a", "b"], ["c", "d"], [], []]),
        (0.5, [["a"], ["a"], ["b"], ["b"]]),
        (0.25, [["a"], ["a"], ["a"], ["a"]]),
        (0, [[], [], [], []]),
    ],
)
def test_assignment(per_worker, expected):
    assert [gpus.assign(["a", "b", "c", "d"], r, per_worker) for r in range(4)] == expected


def test_needed():
    assert gpus.needed(4, 1) == 4
    assert gpus.needed(3, 0.5) == 2
    assert gpus.needed(2, 2) == 4
    assert gpus.needed(5, 0) == 0
