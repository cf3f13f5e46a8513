"""``lockstep demo`` as a command: it says what it does at once, before the seconds that
importing PyTorch takes, runs the demo (:mod:`lockstep.cli._demo`) and says where everything
is, and how long it took.

This module imports nothing heavy: its first line is printed a moment after the command
starts.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from lockstep.cli._main import EXIT_INTERRUPTED, usage_error


def main(args: Any, *, started: float) -> int:
    """Run ``lockstep demo``; ``started`` is the command's start (``time.monotonic()``)."""
    try:
        ran = _train(args)
    except KeyboardInterrupt as interrupt:
        if _said_where_it_stopped(interrupt):
            raise
        # Before the run's own Ctrl-C handling: nothing was trained, nothing to continue.
        print("lockstep demo: interrupted before the run started", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    if isinstance(ran, int):
        return ran
    result, fit_s = ran
    try:
        _print_outcome(result, args, started=started, fit_s=fit_s)
    except KeyboardInterrupt:
        print(
            f"lockstep demo: interrupted after the run finished; it is in {result.path}",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_INTERRUPTED
    return 0


def _train(args: Any) -> tuple[Any, float] | int:
    """The run's Result and how long its ``fit()`` took; or the exit code of a usage error."""
    problem = check_storage(args.storage_path)
    if problem is not None:
        return usage_error("demo", problem)
    say(
        f"demo: a ConvNet on 8x8 digits, {_count(args.epochs, 'epoch')} on "
        f"{_count(args.workers, 'worker')}; loading PyTorch ..."
    )
    name = args.name or f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    from lockstep.cli import _demo

    trainer = _demo.demo_trainer(  # imports torch: seconds
        epochs=args.epochs,
        num_workers=args.workers,
        storage_path=args.storage_path,
        name=name,
        limit=args.limit,
        seed=args.seed,
        resume_hint=_same_command(args, name),
    )
    fit_started = time.monotonic()
    result = trainer.fit()
    return result, time.monotonic() - fit_started


def _said_where_it_stopped(interrupt: KeyboardInterrupt) -> bool:
    from lockstep._core.errors import TrainingInterrupted

    return isinstance(interrupt, TrainingInterrupted)


def _print_outcome(result: Any, args: Any, *, started: float, fit_s: float) -> None:
    from lockstep.cli import _demo

    assert result.metrics is not None, "the run reported nothing"
    best_checkpoint, best = result.best_checkpoints[-1]
    plot = _demo.plot(result)
    print()
    print(
        f"Validation accuracy: {result.metrics['val_accuracy']:.1%} after "
        f"{_count(result.metrics['epoch'] + 1, 'epoch')} (best {best['val_accuracy']:.1%}, "
        f"epoch {best['epoch']}, in {os.path.basename(best_checkpoint.path)})"
    )
    total_s = time.monotonic() - started
    print(
        f"Time: {total_s:.1f} s since the command started: {fit_s:.1f} s the run on "
        f"{args.workers} workers (fit(), as above), {total_s - fit_s:.1f} s starting, "
        "importing PyTorch and drawing the plot"
    )
    print(f"Run directory: {result.path}")
    print(f"Plot: {plot}")


def _count(number: int, thing: str) -> str:
    return f"{number} {thing}{'s' if number != 1 else ''}"


def say(line: str) -> None:
    """A line of the demo's own, as the run's progress lines look."""
    print(f"[lockstep] {line}", file=sys.stderr, flush=True)


def check_storage(storage_path: str | None) -> str | None:
    """Why runs cannot be written under ``storage_path`` (None: the default), or None."""
    from lockstep._core import flags, storage

    raw = storage_path or flags.DEFAULT_STORAGE_PATH.get()
    try:
        root = storage.StorageDir.from_uri(os.path.expanduser(raw))
        root.makedirs()
        probe = f".lockstep-write-test-{os.getpid()}"
        root.write_atomic(probe, b"")
        root.remove(probe)
    except (OSError, ValueError) as exc:
        return f"--storage-path {raw!r} cannot be written: {exc}"
    return None


def _same_command(args: Any, name: str) -> str:
    """The command that continues this demo run."""
    parts = ["lockstep demo", f"--name {name}", f"--epochs {args.epochs}"]
    parts += [f"--workers {args.workers}", f"--seed {args.seed}"]
    if args.storage_path:
        parts.append(f"--storage-path {args.storage_path}")
    if args.limit:
        parts.append(f"--limit {args.limit}")
    return " ".join(parts)
