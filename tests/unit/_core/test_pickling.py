import threading

import pytest

from lockstep._core import pickling


def test_names_the_config_entry():
    with pytest.raises(ValueError, match=r"train_loop_config\['lock'\] \(a _thread.lock\)"):
        pickling.dumps({"lr": 0.1, "lock": threading.Lock()}, "train_loop_config")


def test_names_the_captured_variable():
    lock = threading.Lock()

    def train_func():
        return lock

    with pytest.raises(ValueError, match=r"variable 'lock' used by .*train_func\(\).*HINT"):
        pickling.dumps(train_func, "train_loop_per_worker")


LOCK = threading.Lock()


def uses_global():
    return LOCK


def test_names_the_global():
    # pickled by value when it cannot be found by name: as a function from __main__ is
    uses_global.__module__ = "__main__"
    with pytest.raises(ValueError, match=r"global 'LOCK' used by uses_global\(\)"):
        pickling.dumps(uses_global, "train_loop_per_worker")


def test_nested_attribute():
    class Holder:
        def __init__(self):
            self.inner = {"x": threading.Lock()}

    with pytest.raises(ValueError, match=r"config\.inner\['x'\]"):
        pickling.dumps(Holder(), "config")


def test_picklable_round_trip():
    import cloudpickle

    assert cloudpickle.loads(pickling.dumps({"a": [1, 2]}, "x")) == {"a": [1, 2]}


def module_level(x):
    return x + 1


def test_plain_pickling_where_it_means_what_cloudpickle_means(monkeypatch):
    import pickle
    import sys

    fast = pickling.dumps_plain({"fn": module_level, "data": [1.5, "a"]}, "state")
    assert pickle.loads(fast)["fn"] is module_level  # by reference: an importable module
    assert pickle.loads(pickling.dumps_plain(lambda: 7, "fn"))() == 7  # no name: by value

    # What __main__ defines is not in another process's __main__: it goes by value.
    def helper():
        return "by value"

    helper.__module__, helper.__qualname__ = "__main__", "helper"
    monkeypatch.setattr(sys.modules["__main__"], "helper", helper, raising=False)
    data = pickling.dumps_plain({"fn": helper}, "state")
    monkeypatch.delattr(sys.modules["__main__"], "helper")
    assert pickle.loads(data)["fn"]() == "by value"
