"""Where the user's code is on the stack, for warnings that name the user's line."""

from __future__ import annotations

import os
import sys

_PACKAGE = os.path.dirname(sys.modules["lockstep"].__file__ or "")  # lockstep's own files


def users_frame() -> int:
    """The ``stacklevel`` (for the caller of ``warnings.warn``) of the first frame outside
    lockstep, so that a warning names the user's line; a trainer subclass adds frames.

    Example:
        >>> users_frame() >= 1
        True
    """
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE + os.sep):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level
