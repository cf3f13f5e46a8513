"""Ray's module path of the error ``deserialize`` raises for an unknown preprocessor type.

Example:
    >>> from lockstep.data.preprocessors.version_support import UnknownPreprocessorError
    >>> issubclass(UnknownPreprocessorError, ValueError)
    True
"""

from lockstep.data.preprocessors import UnknownPreprocessorError

__all__ = ["UnknownPreprocessorError"]
