"""Ray's module path of the partitioning of file paths (``ray.data.datasource.partitioning``).

Example:
    >>> from lockstep.data.datasource.partitioning import Partitioning
    >>> Partitioning("hive").style
    'hive'
"""

from lockstep.data._partitioning import Partitioning, PathPartitionFilter

__all__ = ["Partitioning", "PathPartitionFilter"]
