"""The prefetch thread keeps order, passes errors on, and is always joined."""

import itertools
import threading

import pytest

from lockstep.data._prefetch import THREAD_NAME, prefetch


def test_prefetch_keeps_order_and_joins_its_thread():
    assert list(prefetch(lambda: iter(range(100)), depth=3)) == list(range(100))
    assert not [t for t in threading.enumerate() if t.name == THREAD_NAME]


def test_prefetch_stops_a_producer_blocked_on_a_full_queue():
    full = threading.Event()

    def produce():
        for i in itertools.count():
            if i == 3:  # 0 was taken, 1 and 2 fill the queue: putting 3 waits
                full.set()
            yield i

    items = prefetch(produce, depth=2)
    assert next(items) == 0
    assert full.wait()
    items.close()
    assert not [t for t in threading.enumerate() if t.name == THREAD_NAME]


def test_prefetch_re_raises_the_producer_error():
    def broken():
        yield 1
        raise OSError("disk gone")

    items = prefetch(broken, depth=1)
    assert next(items) == 1
    with pytest.raises(OSError, match="disk gone"):
        next(items)
