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
