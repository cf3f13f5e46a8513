"""Ray's module path of ``FilenameProvider`` (``ray.data.datasource.filename_provider``).

Example:
    >>> from lockstep.data.datasource.filename_provider import FilenameProvider
    >>> FilenameProvider.__name__
    'FilenameProvider'
"""

from lockstep.data._write import FilenameProvider

__all__ = ["FilenameProvider"]
