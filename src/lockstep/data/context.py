"""Ray's module path for the data settings: ``from ray.data.context import DataContext``.

Example:
    >>> from lockstep.data.context import DataContext
    >>> DataContext.get_current().target_max_block_size > 0
    True
"""

from lockstep.data._context import DataContext, ExecutionOptions, ExecutionResources

__all__ = ["DataContext", "ExecutionOptions", "ExecutionResources"]
