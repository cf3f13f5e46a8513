"""DataContext: Ray's process-wide data settings."""

from __future__ import annotations

import pickle

import pytest

import lockstep.data as ld
from lockstep.data import DataContext
from lockstep.data.context import DataContext as FromContextModule

RAY_FIELDS = [
    "target_max_block_size",
    "target_min_block_size",
    "streaming_read_buffer_size",
    "enable_pandas_block",
    "use_push_based_shuffle",
    "scheduling_strategy",
    "eager_free",
    "min_parallelism",
    "read_op_min_num_blocks",
    "enable_tensor_extension_casting",
    "enable_auto_log_stats",
    "verbose_stats_logs",
    "use_ray_tqdm",
    "enable_progress_bars",
    "enable_operator_progress_bars",
    "max_errored_blocks",
    "write_file_retry_on_errors",
    "print_on_execution_start",
    "wait_for_min_actors_s",
]


@pytest.fixture
def context():
    saved = DataContext._current
    DataContext._set_current(DataContext())
    yield DataContext.get_current()
    DataContext._set_current(saved)


def test_one_context_per_process_with_every_field_ray_users_set(context):
    assert FromContextModule is DataContext and DataContext.get_current() is context
    for name in RAY_FIELDS:
        assert hasattr(context, name), name
    options = context.execution_options
    options.preserve_order = True
    options.resource_limits.cpu = 4
    options.verbose_progress = True
    context.enable_progress_bars = False
    assert DataContext.get_current().execution_options.preserve_order is True


def test_order_is_preserved_whatever_the_setting(context):
    for preserve in (True, False):
        context.execution_options.preserve_order = preserve
        ds = ld.range(100, override_num_blocks=7).map_batches(lambda b: b, batch_size=3)
        assert [r["id"] for r in ds.take_all()] == list(range(100))


def test_target_max_block_size_cuts_in_memory_blocks(context):
    context.target_max_block_size = 800  # bytes: 100 int64 values
    ds = ld.from_items([{"x": i} for i in range(1000)])
    assert ds.num_blocks() == 10 and ds.count() == 1000
    assert ld.range(1000).map_batches(lambda b: b).materialize().num_blocks() == 10
    context.target_max_block_size = None
    assert ld.from_items([{"x": i} for i in range(1000)]).num_blocks() == 1


def test_a_dataset_carries_the_context_to_another_process(context, monkeypatch):
    import os

    context.set_config("answer", 42)
    context.target_max_block_size = 1234
    payload = pickle.dumps(ld.range(3))
    assert pickle.loads(payload).count() == 3
    assert DataContext.get_current() is context  # the same process keeps its own object
    pid = os.getpid()
    monkeypatch.setattr(os, "getpid", lambda: pid + 1)  # as in a worker
    assert pickle.loads(payload).count() == 3
    adopted = DataContext.get_current()
    assert adopted is not context
    assert adopted.get_config("answer") == 42 and adopted.target_max_block_size == 1234
