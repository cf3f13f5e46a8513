"""Python stacks as text, in faulthandler's format, which the controller's ``hang``
module reads: taken under the GIL (``sys._current_frames()``), a consistent copy."""

from __future__ import annotations

import traceback
from typing import Any


def stacks_text(frames: dict[int, Any], main: int) -> str:
    """The stacks of ``frames`` (``sys._current_frames()``) as faulthandler writes them,
    innermost call first, the thread ``main`` first.

    Example:
        >>> import sys, threading
        >>> me = threading.get_ident()
        >>> print(stacks_text(sys._current_frames(), me).splitlines()[0] == (
        ...     f"Thread 0x{me:016x} (most recent call first):"))
        True
    """
    lines = []
    for ident in sorted(frames, key=lambda i: i != main):
        lines.append(f"Thread 0x{ident:016x} (most recent call first):")
        for frame in reversed(traceback.extract_stack(frames[ident])):
            lines.append(f'  File "{frame.filename}", line {frame.lineno} in {frame.name}')
        lines.append("")
    return "\n".join(lines) + "\n"
