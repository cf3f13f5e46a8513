"""Ray's ``ray.data.datasource`` names that readers take: partitioning of file paths.

Example:
    >>> from lockstep.data.datasource import Partitioning
    >>> Partitioning("hive").style
    'hive'
"""

from lockstep.data._file_order import FileShuffleConfig
from lockstep.data._partitioning import Partitioning, PathPartitionFilter
from lockstep.data._write import FilenameProvider, SaveMode

__all__ = [
    "FileShuffleConfig",
    "FilenameProvider",
    "Partitioning",
    "PathPartitionFilter",
    "SaveMode",
]
