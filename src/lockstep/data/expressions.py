"""Ray's ``ray.data.expressions``: ``col`` and ``lit`` for ``with_column`` and ``filter``.

Example:
    >>> import lockstep.data as ld
    >>> from lockstep.data.expressions import col
    >>> ld.range(5).filter(expr=col("id") >= 3).take_all()
    [{'id': 3}, {'id': 4}]
"""

from lockstep.data._expressions import col, lit

__all__ = ["col", "lit"]
