"""What the GBDT benchmarks share: synthetic binary classification data (in memory or in
parquet), the trainer's timed fit, and the comparison with the plain framework."""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import bench
import numpy as np
import pandas as pd

import lockstep.data as ld
from lockstep.train import RunConfig, ScalingConfig


def make_data(rows: int, features: int = 30, seed: int = 0) -> pd.DataFrame:
    """Features from a normal distribution; the label from a noisy non-linear rule."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, features)).astype(np.float32)
    w = rng.standard_normal(features)
    logits = x @ w + 0.5 * x[:, 0] * x[:, 1] + rng.standard_normal(rows)
    frame = pd.DataFrame(x, columns=[f"f{i}" for i in range(features)])
    frame["label"] = (logits > 0).astype(np.float32)
    return frame


def write_parquet(frame: pd.DataFrame, directory: str, files: int = 8) -> str:
    """``frame`` as ``files`` parquet files in ``directory``."""
    for i, part in enumerate(np.array_split(np.arange(len(frame)), files)):
        frame.iloc[part].to_parquet(os.path.join(directory, f"part-{i:02d}.parquet"))
    return directory


def trainer_once(
    trainer_cls: type,
    params: dict,
    metric: str,
    source: pd.DataFrame | str,
    rounds: int,
    storage: str,
) -> tuple[float, float]:
    """Seconds and final train ``metric`` of the trainer's classic form, 2 workers x 1 thread."""
    start = time.perf_counter()
    in_memory = isinstance(source, pd.DataFrame)
    dataset = ld.from_pandas(source) if in_memory else ld.read_parquet(source)
    trainer = trainer_cls(
        datasets={"train": dataset},
        label_column="label",
        params=params,
        num_boost_round=rounds,
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(storage_path=storage, verbose=0),
    )
    result = trainer.fit()
    elapsed = time.perf_counter() - start
    assert result.metrics is not None
    return elapsed, result.metrics[f"train-{metric}"]


@dataclass
class Timings:
    """Seconds (and final train loss) of each side, repeat by repeat."""

    plain: list[tuple[float, float]] = field(default_factory=list)
    trainer: list[tuple[float, float]] = field(default_factory=list)
    first_fit: float = 0.0


def compare(
    doc: str,
    plain_once: Callable[[pd.DataFrame | str, int], tuple[float, float]],
    trainer_once: Callable[[pd.DataFrame | str, int, str], tuple[float, float]],
    also: Callable[[pd.DataFrame, int], None] | None = None,
) -> tuple[argparse.Namespace, Timings]:
    """Parse the benchmark's arguments, then time the plain framework and the trainer in
    turn (and ``also`` on in-memory data), on data in memory or in parquet files."""
    parser = bench.options(doc, rows=400_000, rounds=50, repeats=3)
    parser.add_argument("--source", choices=["memory", "parquet"], default="memory")
    args = parser.parse_args()
    frame = make_data(args.rows)
    timings = Timings()
    with tempfile.TemporaryDirectory(prefix="lockstep-bench-") as tmp:
        storage = os.path.join(tmp, "runs")
        os.makedirs(os.path.join(tmp, "data"))
        source = frame if args.source == "memory" else write_parquet(frame, f"{tmp}/data")
        timings.first_fit = trainer_once(source, args.rounds, storage)[0]  # the fork server
        for _ in range(args.repeats):  # alternate, so that load changes hit both alike
            timings.plain.append(plain_once(source, args.rounds))
            timings.trainer.append(trainer_once(source, args.rounds, storage))
            if also is not None and args.source == "memory":
                also(frame, args.rounds)
    return args, timings


def print_comparison(args: argparse.Namespace, timings: Timings, plain: str, trainer: str) -> None:
    """The medians, their ratio and the final losses, against the targets."""
    plain_s = statistics.median(t for t, _ in timings.plain)
    ours_s = statistics.median(t for t, _ in timings.trainer)
    plain_loss, ours_loss = timings.plain[-1][1], timings.trainer[-1][1]
    gap = abs(ours_loss - plain_loss) / plain_loss
    print(f"data: {args.rows} rows x 30 features from {args.source}, {args.rounds} rounds")
    print(f"plain {plain}, median of {args.repeats}: {plain_s:.2f} s")
    print(f"{trainer}, 2 workers x 1 thread, median of {args.repeats}: {ours_s:.2f} s")
    print(f"{trainer}, first fit in this process: {timings.first_fit:.2f} s")
    print(f"wall-time ratio trainer / plain: {ours_s / plain_s:.2f}x (target <= 1.2x)")
    print(
        f"final train logloss: plain {plain_loss:.5f}, trainer {ours_loss:.5f}, "
        f"difference {100 * gap:.2f}% (target <= 1%)"
    )
