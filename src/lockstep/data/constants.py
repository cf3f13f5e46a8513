"""Ray's ``ray.data.constants`` that user code reads.

Example:
    >>> from lockstep.data.constants import MAX_REPR_LENGTH
    >>> MAX_REPR_LENGTH
    120
"""

#: The longest ``repr`` of a preprocessor, as in Ray (one and a half 80-column lines).
MAX_REPR_LENGTH = int(80 * 1.5)

__all__ = ["MAX_REPR_LENGTH"]
