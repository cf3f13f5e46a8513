"""What the benchmarks share: their command line, timing the best of several runs, and a
trainer's quiet run on two workers."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def options(doc: str, **defaults: int) -> argparse.ArgumentParser:
    """A parser described by the first line of ``doc``, with an int option ``--name`` for
    each of ``defaults``; add more options to it, or ``parse_args()`` it."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    for name, default in defaults.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=default)
    return parser


def best_of(repeats: int, run: Callable[[], T]) -> tuple[float, T]:
    """The fastest of ``repeats`` runs of ``run``, in seconds, and what the last one gave."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        value = run()
        times.append(time.perf_counter() - start)
    return min(times), value


def fit_two_workers(trainer_cls: Any, fn: Callable[..., Any], config: dict, storage: str) -> Any:
    """The result of ``trainer_cls`` running ``fn(config)`` on 2 workers, quietly, with its
    runs under ``storage``."""
    from lockstep.train import RunConfig, ScalingConfig

    return trainer_cls(
        fn,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=storage, verbose=0),
    ).fit()


def machine_load() -> str:
    """The machine's load averages and CPUs, to print with figures (a loaded machine's
    figures need a quiet rerun)."""
    import os

    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} CPUs"
