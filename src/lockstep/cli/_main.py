"""The ``lockstep`` command: ``lockstep demo``, ``lockstep doctor``, ``lockstep runs``,
``lockstep status``, ``lockstep --version``.

Like pip and git: every command and option has a help text that shows its default, and a
mistake on the command line is one line on standard error with exit code 2, never a
traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

from lockstep._core import flags

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # as a shell reports a program ended by Ctrl-C


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line: ``lockstep demo: error: ... (see --help)``."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


class _Formatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default after its help, except where there is none to show."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


def at_least(minimum: int) -> Any:
    """An argparse ``type`` for whole numbers no smaller than ``minimum``.

    Example:
        >>> at_least(1)("3")
        3
    """

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is too small: give {minimum} or more")
        return value

    return parse


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("lockstep")
    except PackageNotFoundError:
        ours = "unknown"
    python = ".".join(str(n) for n in sys.version_info[:3])
    return f"lockstep {ours} (Python {python})"


def parser() -> argparse.ArgumentParser:
    """The ``lockstep`` command line.

    Example:
        >>> parser().parse_args(["demo", "--epochs", "3"]).epochs
        3
    """
    top = _Parser(
        prog="lockstep",
        description="Distributed training on local processes or a Ray cluster.",
        formatter_class=_Formatter,
    )
    top.add_argument("--version", action="version", version=_version())
    commands = top.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    commands.required = True
    _add_demo(commands)
    _add_doctor(commands)
    from lockstep.cli import _runs, _status

    _runs.add_parser(commands)
    _status.add_parser(commands, _Formatter)
    return top


def _add_demo(commands: Any) -> None:
    demo = commands.add_parser(
        "demo",
        help="train a small ConvNet on 8x8 digits with local workers, and plot it",
        description="Train a small ConvNet on scikit-learn's 8x8 digits with local workers, "
        "keep the best checkpoints by validation accuracy, and plot the curves.",
        formatter_class=_Formatter,
    )
    demo.set_defaults(command_parser=demo)
    demo.add_argument("--epochs", type=at_least(1), default=15, help="epochs to train (at least 1)")
    demo.add_argument(
        "--workers", type=at_least(1), default=2, help="worker processes (at least 1)"
    )
    demo.add_argument(
        "--storage-path",
        default=None,
        help="directory (or s3:// URL) the run is written under; default: "
        f"${flags.DEFAULT_STORAGE_PATH.name}, else {flags.DEFAULT_STORAGE_PATH.default}",
    )
    demo.add_argument(
        "--name", default=None, help="run name; default: demo-<date>-<time>, a new run"
    )
    demo.add_argument(
        "--limit", type=at_least(1), default=None, help="use only this many images; default: all"
    )
    demo.add_argument(
        "--seed", type=int, default=0, help="random seed: the same seed, the same run"
    )


def _add_doctor(commands: Any) -> None:
    doctor = commands.add_parser(
        "doctor",
        help="show versions, and which backends can be used here and how to fix those that can't",
        description="Print the versions of lockstep, Python and the frameworks, and for each "
        "backend whether it can be used on this machine, with the command that fixes it if not.",
        formatter_class=_Formatter,
    )
    doctor.set_defaults(command_parser=doctor)


def usage_error(command: str, message: str) -> int:
    """One line on standard error; the exit code of a usage error."""
    print(f"lockstep {command}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``lockstep`` command line; returns the exit code.

    Example:
        >>> main(["demo", "--epochs", "0"])
        Traceback (most recent call last):
        SystemExit: 2
    """
    # As a program, the command started with the process; called with arguments (from
    # Python), now.
    started = time.monotonic() - (_process_age_s() if argv is None else 0.0)
    args = parse(argv)
    prog = getattr(args, "command_parser", None)
    try:
        with plain_warnings(prog.prog if prog is not None else "lockstep"):
            return _run(args, started)
    except KeyboardInterrupt:
        # The run said where it stopped and how to continue; a traceback would add nothing.
        return EXIT_INTERRUPTED


@contextlib.contextmanager
def plain_warnings(prog: str) -> Iterator[None]:
    """Show lockstep's own warnings as one line, ``lockstep demo: warning: ...``: Python's
    format names the line that issued it, which for a command is the ``lockstep`` script's
    ``sys.exit(main())``. Warnings of other libraries keep Python's format."""
    shown = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        if _ours(filename):
            print(f"{prog}: warning: {message}", file=file or sys.stderr, flush=True)
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


def _ours(filename: str) -> bool:
    """Whether a warning was issued for lockstep's code: a module of the package, or the
    command's script (lockstep's warnings name the first line outside the package)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.abspath(filename)
    return path.startswith(package + os.sep) or path == os.path.abspath(sys.argv[0])


def _process_age_s() -> float:
    """Seconds since this process started (Linux; else 0): a command's time includes the
    interpreter's start and its imports.

    Example:
        >>> 0 <= _process_age_s() < 24 * 3600
        True
    """
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            # the 22nd field, counted after the command name (which may hold spaces)
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
        return max(0.0, since_boot - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line's arguments; an error names the command it is about
    (``lockstep demo: error: unrecognized arguments: --bogus``), not just ``lockstep``.

    Example:
        >>> parse(["runs", "list"]).runs_command
        'list'
    """
    top = parser()
    args, unknown = top.parse_known_args(argv)
    if unknown:
        command: argparse.ArgumentParser = getattr(args, "command_parser", top)
        command.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def _run(args: argparse.Namespace, started: float) -> int:
    if args.command == "demo":
        from lockstep.cli._demo_command import main as demo

        return demo(args, started=started)
    if args.command == "doctor":
        from lockstep.cli._doctor import main as doctor

        return doctor()
    if args.command == "runs":
        from lockstep.cli._runs import main as runs

        return runs(args)
    if args.command == "status":
        from lockstep.cli._status import main as status

        return status(args)
    raise AssertionError(args.command)
