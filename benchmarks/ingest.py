"""Ingest: 2 workers iterate their shards of a parquet dataset as torch batches.

Data: 2M rows x 16 float32 columns in 8 parquet files (pyarrow's defaults: one row group
per file). Each of 2 workers iterates ``get_dataset_shard("train").iter_torch_batches(4096)``.
Baseline, measured in the same run: one process reading the same files with pyarrow
(``ParquetFile.iter_batches(4096)``) into torch tensors.
Targets: total rows/s of the workers at least 0.9x the baseline; a worker's peak memory
for the data under 2x one file's decoded size (streaming, not loading its files).

    python benchmarks/ingest.py [--rows 2000000] [--files 8] [--epochs 3]
"""

from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time
import warnings

import bench
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import lockstep.data as ld
from lockstep import train
from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig, UserCallback

COLUMNS = 16
BATCH_SIZE = 4096


def write_dataset(directory: str, rows: int, files: int) -> list[str]:
    rng = np.random.default_rng(0)
    paths = []
    per_file = rows // files
    for i in range(files):
        table = pa.table({f"f{c}": rng.random(per_file, dtype=np.float32) for c in range(COLUMNS)})
        path = os.path.join(directory, f"part-{i:03d}.parquet")
        pq.write_table(table, path)
        paths.append(path)
    return paths


def baseline_once(paths: list[str]) -> tuple[int, float]:
    import torch

    start = time.perf_counter()
    rows = 0
    for path in paths:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH_SIZE):
            names = batch.schema.names
            tensors = {
                n: torch.from_numpy(c.to_numpy())
                for n, c in zip(names, batch.columns, strict=False)
            }
            rows += len(tensors["f0"])
    return rows, time.perf_counter() - start


class MemorySampler:
    """Samples the Arrow memory in use and the process RSS every millisecond, on a thread.

    Arrow's own ``max_memory()`` cannot be used: a worker forked from a process that had
    read data inherits that process's high-water mark.
    """

    def __init__(self) -> None:
        import psutil

        self._process = psutil.Process()
        self.arrow_baseline = pa.total_allocated_bytes()
        self.rss_baseline = self._process.memory_info().rss
        self.arrow_peak = self.rss_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-memory-sampler")

    def _run(self) -> None:
        while not self._stop.wait(0.001):
            arrow = pa.total_allocated_bytes() - self.arrow_baseline
            rss = self._process.memory_info().rss - self.rss_baseline
            self.arrow_peak, self.rss_peak = max(self.arrow_peak, arrow), max(self.rss_peak, rss)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def epoch(shard: object) -> tuple[int, float]:
    rows = 0
    start = time.perf_counter()
    for batch in shard.iter_torch_batches(batch_size=BATCH_SIZE):  # type: ignore[attr-defined]
        rows += len(batch["f0"])
    return rows, time.perf_counter() - start


def worker_loop(config: dict) -> None:
    import torch  # noqa: F401 -- imported before measuring, as a training script has it

    shard = train.get_dataset_shard("train")
    # The first epoch measures memory (a sampling thread would slow the timed epochs);
    # it includes the one-time growth of the allocator and of torch.
    with MemorySampler() as memory:
        epoch(shard)
    train.report({"arrow_peak": memory.arrow_peak, "rss_growth": memory.rss_peak})
    for _ in range(config["epochs"]):
        rows, seconds = epoch(shard)
        train.report({"rows": rows, "seconds": seconds})


class Collect(UserCallback):
    def __init__(self) -> None:
        self.steps: list[list[dict]] = []

    def after_report(self, run_context, metrics, checkpoint):  # type: ignore[no-untyped-def]
        self.steps.append(metrics)


def lockstep_run(paths: list[str], storage: str, epochs: int) -> list[list[dict]]:
    collect = Collect()
    dataset = ld.read_parquet(paths)
    trainer = DataParallelTrainer(
        worker_loop,
        train_loop_config={"epochs": epochs},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=storage, verbose=0, callbacks=[collect]),
        datasets={"train": dataset},
    )
    trainer.fit()
    # what each worker was given to read (the trainer splits the same way)
    for rank, part in enumerate(dataset.split(2, equal=True)):
        print(f"rank {rank} reads {len(part.input_files())} files, {part.count():,} rows")
    return collect.steps


def main() -> None:
    args = bench.options(__doc__, rows=2_000_000, files=8, epochs=3).parse_args()
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    with tempfile.TemporaryDirectory(prefix="lockstep-bench-") as tmp:
        data_dir = os.path.join(tmp, "data")
        os.mkdir(data_dir)
        paths = write_dataset(data_dir, args.rows, args.files)
        file_bytes = pq.read_table(paths[0]).nbytes
        baseline_once(paths)  # warm the page cache, as the workers' later epochs find it
        base = [baseline_once(paths) for _ in range(args.epochs)]
        steps = lockstep_run(paths, os.path.join(tmp, "runs"), args.epochs)
    base_rows = base[0][0]
    base_rate = base_rows / statistics.median(s for _, s in base)
    memory, timed = steps[0], steps[1:]
    # the workers run side by side: an epoch lasts as long as the slower one
    epoch_seconds = [max(rank["seconds"] for rank in step) for step in timed]
    rows = sum(rank["rows"] for rank in timed[0])
    ours_rate = rows / statistics.median(epoch_seconds)
    arrow_peak = max(rank["arrow_peak"] for rank in memory)
    rss_growth = max(rank["rss_growth"] for rank in memory)
    print(
        f"data: {rows:,} rows x {COLUMNS} float32 columns in {args.files} files "
        f"({file_bytes / 1e6:.1f} MB decoded per file)"
    )
    print(
        f"baseline (1 process, pyarrow -> torch), median of {args.epochs}: {base_rate:,.0f} rows/s"
    )
    print(
        f"lockstep (2 workers, iter_torch_batches), median epoch of {args.epochs}: "
        f"{ours_rate:,.0f} rows/s; epochs {[f'{s:.3f}s' for s in epoch_seconds]}"
    )
    print(f"rows per worker per epoch: {[rank['rows'] for rank in timed[0]]}")
    print(f"ratio lockstep / baseline rows/s: {ours_rate / base_rate:.2f}x (target >= 0.9x)")
    print(
        f"worker peak Arrow memory: {arrow_peak / 1e6:.1f} MB = "
        f"{arrow_peak / file_bytes:.2f}x one file's decoded size (target < 2x)"
    )
    print(
        f"worker peak RSS growth over a first epoch: {rss_growth / 1e6:.1f} MB = "
        f"{rss_growth / file_bytes:.2f}x one file's decoded size (includes one-time growth)"
    )


if __name__ == "__main__":
    main()
