"""Ray's module path of ``FileShuffleConfig`` (``ray.data.datasource.file_based_datasource``).

Example:
    >>> from lockstep.data.datasource.file_based_datasource import FileShuffleConfig
    >>> FileShuffleConfig(seed=1).seed
    1
"""

from lockstep.data._file_order import FileShuffleConfig

__all__ = ["FileShuffleConfig"]
