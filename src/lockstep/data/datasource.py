"""Ray's ``ray.data.datasource`` names that readers take: partitioning of file paths.

Example:
    >>> from lockstep.data.datasource import Partitioning
    >>> Partitioning("hive").style
    'hive'
"""

from lockstep.data._partitioning import Partitioning, PathPartitionFilter
from lockstep.data._write import FilenameProvider, SaveMode

__all__ = ["FilenameProvider", "Partitioning", "PathPartitionFilter", "SaveMode"]
