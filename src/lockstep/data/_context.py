"""DataContext: Ray Data's process-wide settings, with the fields Ray users set.

Ray scripts often start with ``DataContext.get_current().execution_options.preserve_order =
True``; every field Ray has exists here. The ones with a meaning for lockstep are honoured:

- ``execution_options.preserve_order``: rows always come out in order here (each worker
  reads its shard in order), so order is preserved whatever the value.
- ``target_max_block_size``: an in-memory constructor (``from_items``, ``from_pandas``,
  ``from_arrow``, ...) and ``materialize`` cut blocks larger than this many bytes.
- ``enable_progress_bars``: lockstep.data draws no progress bars, so none are shown
  whatever the value.

The others are accepted and have no effect here (they tune Ray's scheduler, shuffle and
object store). A dataset carries the context it was pickled under to the workers: there,
``DataContext.get_current()`` gives the driver's settings (those of its latest dataset).
"""

from __future__ import annotations

import copy
import itertools
import os
import threading
from dataclasses import dataclass, field
from typing import Any, ClassVar

DEFAULT_TARGET_MAX_BLOCK_SIZE = 128 * 1024 * 1024


@dataclass
class ExecutionResources:
    """Ray's resource limits for data execution (accepted; no effect here)."""

    cpu: float | None = None
    gpu: float | None = None
    object_store_memory: float | None = None


@dataclass
class ExecutionOptions:
    """Ray's execution options: ``preserve_order`` and the rest.

    Example:
        >>> from lockstep.data import DataContext
        >>> DataContext.get_current().execution_options.preserve_order
        False
    """

    resource_limits: ExecutionResources = field(default_factory=ExecutionResources)
    exclude_resources: ExecutionResources = field(default_factory=ExecutionResources)
    locality_with_output: bool | list[str] = False
    preserve_order: bool = False
    actor_locality_enabled: bool = True
    verbose_progress: bool = False


@dataclass
class DataContext:
    """The process's data settings, as Ray's ``ray.data.DataContext``.

    Example:
        >>> from lockstep.data import DataContext
        >>> ctx = DataContext.get_current()
        >>> ctx.execution_options.preserve_order = True
        >>> DataContext.get_current().execution_options.preserve_order
        True
        >>> ctx.execution_options.preserve_order = False
    """

    target_max_block_size: int | None = DEFAULT_TARGET_MAX_BLOCK_SIZE
    target_min_block_size: int = 1024 * 1024
    target_shuffle_max_block_size: int = 1024 * 1024 * 1024
    streaming_read_buffer_size: int = 32 * 1024 * 1024
    enable_pandas_block: bool = True
    actor_prefetcher_enabled: bool = False
    use_push_based_shuffle: bool = False
    pipeline_push_based_shuffle_reduce_tasks: bool = True
    shuffle_strategy: str = "sort_shuffle_pull_based"
    scheduling_strategy: Any = "SPREAD"
    scheduling_strategy_large_args: Any = "DEFAULT"
    large_args_threshold: int = 50 * 1024 * 1024
    use_polars: bool = False
    eager_free: bool = False
    decoding_size_estimation: bool = True
    min_parallelism: int = 200
    read_op_min_num_blocks: int = 200
    enable_tensor_extension_casting: bool = True
    use_arrow_tensor_v2: bool = True
    enable_fallback_to_arrow_object_ext_type: bool | None = None
    enable_auto_log_stats: bool = False
    verbose_stats_logs: bool = False
    trace_allocations: bool = False
    execution_options: ExecutionOptions = field(default_factory=ExecutionOptions)
    use_ray_tqdm: bool = True
    enable_progress_bars: bool = True
    enable_operator_progress_bars: bool = True
    enable_progress_bar_name_truncation: bool = True
    enable_rich_progress_bars: bool = False
    enable_get_object_locations_for_metrics: bool = False
    write_file_retry_on_errors: list[str] = field(default_factory=list)
    warn_on_driver_memory_usage_bytes: int = 2 * 1024 * 1024 * 1024
    max_errored_blocks: int = 0
    log_internal_stack_trace_to_stdout: bool = False
    raise_original_map_exception: bool = False
    print_on_execution_start: bool = True
    s3_try_create_dir: bool = False
    wait_for_min_actors_s: int = -1
    retried_io_errors: list[str] = field(default_factory=list)
    enable_per_node_metrics: bool = False
    memory_usage_poll_interval_s: float | None = 1.0
    op_resource_reservation_enabled: bool = True
    op_resource_reservation_ratio: float = 0.5
    max_num_blocks_in_streaming_gen_buffer: int | None = None
    _configs: dict[str, Any] = field(default_factory=dict, repr=False)

    _current: ClassVar[DataContext | None] = None
    _lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def get_current(cls) -> DataContext:
        """The process's one context, made with Ray's defaults on first use.

        Example:
            >>> from lockstep.data import DataContext
            >>> DataContext.get_current() is DataContext.get_current()
            True
        """
        with cls._lock:
            if DataContext._current is None:
                DataContext._current = cls()
            return DataContext._current

    @staticmethod
    def _set_current(context: DataContext) -> None:
        """Make ``context`` the process's context (Ray's name)."""
        DataContext._current = context

    def set_config(self, key: str, value: Any) -> None:
        """Set a free-form setting (Ray's ``set_config``).

        Example:
            >>> from lockstep.data import DataContext
            >>> ctx = DataContext()
            >>> ctx.set_config("my_key", 3)
            >>> ctx.get_config("my_key"), ctx.get_config("missing", "default")
            (3, 'default')
        """
        self._configs[key] = value

    def get_config(self, key: str, default: Any = None) -> Any:
        """A free-form setting, or ``default``."""
        return self._configs.get(key, default)

    def remove_config(self, key: str) -> None:
        """Forget a free-form setting."""
        self._configs.pop(key, None)

    def copy(self) -> DataContext:
        """An independent copy (what a dataset carries to the workers)."""
        return copy.deepcopy(self)


def current_snapshot() -> tuple[DataContext, int] | None:
    """A copy of this process's context and its pid, to send with a dataset; None when the
    context was never touched here."""
    current = DataContext._current
    return (current.copy(), os.getpid()) if current is not None else None


def adopt(snapshot: tuple[DataContext, int] | None) -> None:
    """In another process than the one that sent it (a worker), take the sender's context."""
    if snapshot is not None and snapshot[1] != os.getpid():
        with DataContext._lock:
            DataContext._current = snapshot[0]


def within_block_size(table: Any) -> list[Any]:
    """``table`` cut into slices of at most ``target_max_block_size`` bytes (one if it fits)."""
    target = DataContext.get_current().target_max_block_size
    if not target or table.nbytes <= target or table.num_rows <= 1:
        return [table]
    pieces = min(table.num_rows, -(-table.nbytes // target))
    bounds = [table.num_rows * i // pieces for i in range(pieces + 1)]
    return [table.slice(a, b - a) for a, b in itertools.pairwise(bounds)]
