"""The ``lockstep`` command."""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="lockstep", description="Distributed training, locally.")
    commands = top.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo", help="train a small ConvNet on 8x8 digits with 2 local workers"
    )
    demo.add_argument("--epochs", type=int, default=15)
    demo.add_argument("--workers", type=int, default=2)
    demo.add_argument("--storage-path", default="./runs")
    demo.add_argument("--name", default=None, help="default: demo-<date>-<time>, a new run")
    demo.add_argument("--limit", type=int, default=None, help="use only this many images")
    from lockstep.cli import _runs

    _runs.add_parser(commands)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``lockstep`` command line; returns the exit code.

    Example:
        >>> parser().parse_args(["demo", "--epochs", "3"]).epochs
        3
    """
    args = parser().parse_args(argv)
    if args.command == "demo":
        from lockstep.cli._demo import main as demo

        return demo(args)
    if args.command == "runs":
        from lockstep.cli._runs import main as runs

        return runs(args)
    raise AssertionError(args.command)
