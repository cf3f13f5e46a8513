"""Aggregations for ``Dataset.aggregate`` and ``GroupedData.aggregate`` (as ``ray.data.aggregate``).

Example:
    >>> import lockstep.data as ld
    >>> from lockstep.data.aggregate import Count, Mean
    >>> ld.range(4).aggregate(Count(), Mean("id"))
    {'count()': 4, 'mean(id)': 1.5}
"""

from lockstep.data._aggregate import AggregateFn, Count, Max, Mean, Min, Std, Sum

__all__ = ["AggregateFn", "Count", "Max", "Mean", "Min", "Std", "Sum"]
