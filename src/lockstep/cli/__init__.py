"""The ``lockstep`` command line: ``lockstep demo``."""

from lockstep.cli._main import main

__all__ = ["main"]
