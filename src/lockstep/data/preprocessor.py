"""Ray's module path for the preprocessor base: ``from ray.data.preprocessor import ...``.

Example:
    >>> from lockstep.data.preprocessor import Preprocessor, PreprocessorNotFittedException
    >>> issubclass(PreprocessorNotFittedException, RuntimeError)
    True
"""

from lockstep.data.preprocessors import (
    Preprocessor,
    PreprocessorNotFittedException,
    SerializablePreprocessorBase,
)

__all__ = ["Preprocessor", "PreprocessorNotFittedException", "SerializablePreprocessorBase"]
