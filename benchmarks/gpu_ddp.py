"""DDP on one GPU: lockstep's TorchTrainer against the same loop in a plain torch.distributed
process.

A small transformer (token embedding, 6 encoder layers of width 512 with 8 heads, a
vocabulary head of 8192) trained with AdamW under bf16 autocast, batch 64 of 512 tokens,
wrapped in DistributedDataParallel in a process group of one rank (NCCL); 10 warm-up steps,
then ``--steps`` timed steps, timed in the training process between CUDA synchronizations.
Baseline, in the same run and on the same GPU: the same loop in a process started with
``subprocess``, with ``torch.distributed`` and no framework. Also the time from the call
(``fit()``, or starting the process) to the first report (lockstep's, after the first step)
or the first step done (the baseline's). The two alternate ``--repeats`` times; medians.
Target: lockstep's samples/s at least 0.97x the baseline's.

    python benchmarks/gpu_ddp.py [--steps 100] [--repeats 2] [--json FILE]
    python benchmarks/gpu_ddp.py --dry   # the same steps on the CPU (gloo), tiny: a check
                                         # that it runs, its figures mean nothing
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import bench
import torch
from torch import nn

WARMUP = 10


@dataclass(frozen=True)
class Shape:
    width: int
    heads: int
    layers: int
    vocab: int
    batch: int
    tokens: int


GPU_SHAPE = Shape(width=512, heads=8, layers=6, vocab=8192, batch=64, tokens=512)
DRY_SHAPE = Shape(width=32, heads=2, layers=1, vocab=64, batch=4, tokens=16)


def transformer(shape: Shape) -> nn.Module:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(
        shape.width, shape.heads, 4 * shape.width, dropout=0.0, batch_first=True
    )
    return nn.Sequential(
        nn.Embedding(shape.vocab, shape.width),
        nn.TransformerEncoder(layer, shape.layers, enable_nested_tensor=False),
        nn.Linear(shape.width, shape.vocab),
    )


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_steps(
    device: torch.device, shape: Shape, steps: int, first_step_done: Callable[[], None]
) -> float:
    """Seconds for ``steps`` DDP steps after the warm-up; ``first_step_done`` is called once
    the first step has finished (lockstep reports then, the baseline prints)."""
    from torch.nn.parallel import DistributedDataParallel

    model = transformer(shape).to(device)
    model = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    generator = torch.Generator().manual_seed(1)
    data = torch.randint(0, shape.vocab, (shape.batch, shape.tokens + 1), generator=generator)
    x, y = data[:, :-1].to(device), data[:, 1:].to(device)
    start = time.perf_counter()
    for i in range(WARMUP + steps):
        if i == WARMUP:
            synchronize(device)
            start = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = model(x)
        loss = nn.functional.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if i == 0:
            synchronize(device)
            first_step_done()
    synchronize(device)
    return time.perf_counter() - start


def card(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (dry run)"


# --- lockstep --------------------------------------------------------------------------------


def lockstep_worker(config: dict[str, Any]) -> None:
    from lockstep import train
    from lockstep.train.torch import get_device

    device = get_device()
    shape = Shape(**config["shape"])
    elapsed = train_steps(device, shape, config["steps"], lambda: train.report({"step": 0}))
    train.report({"elapsed": elapsed, "card": card(device)})


def ours(shape: Shape, steps: int, dry: bool, storage: str) -> tuple[float, float, str]:
    """Timed seconds, seconds from fit() to the first report, the card's name."""
    from lockstep import train
    from lockstep.train import RunConfig, ScalingConfig
    from lockstep.train.torch import TorchTrainer

    first: list[float] = []

    class FirstReport(train.UserCallback):
        def after_report(self, run_context: Any, metrics: Any, checkpoint: Any) -> None:
            first.append(time.perf_counter())

    start = time.perf_counter()
    result = TorchTrainer(
        lockstep_worker,
        train_loop_config={"shape": shape.__dict__, "steps": steps},
        scaling_config=ScalingConfig(num_workers=1, use_gpu=not dry),
        run_config=RunConfig(storage_path=storage, verbose=0, callbacks=[FirstReport()]),
    ).fit()
    return result.metrics["elapsed"], first[0] - start, result.metrics["card"]


# --- plain torch.distributed -----------------------------------------------------------------


def baseline_worker(shape: Shape, steps: int, dry: bool) -> None:
    """The baseline's process: one rank of NCCL (gloo when dry), the same loop."""
    import torch.distributed as dist

    device = torch.device("cpu") if dry else torch.device("cuda", 0)
    if not dry:
        torch.cuda.set_device(device)
    dist.init_process_group("gloo" if dry else "nccl", rank=0, world_size=1)
    elapsed = train_steps(device, shape, steps, lambda: print("first", flush=True))
    dist.destroy_process_group()
    print(json.dumps({"elapsed": elapsed, "card": card(device)}), flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def baseline(shape: Shape, steps: int, dry: bool) -> tuple[float, float, str]:
    """Timed seconds, seconds from starting the process to its first step, the card."""
    env = {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "OMP_NUM_THREADS": "1",  # as lockstep gives a worker of one CPU
    }
    if not dry:  # the GPU lockstep's worker gets
        from lockstep._core import accelerators

        env["CUDA_VISIBLE_DEVICES"] = accelerators.visible_gpus()[0]
    command = [sys.executable, __file__, "--baseline-worker", json.dumps(shape.__dict__)]
    command += [str(steps), "1" if dry else "0"]
    start = time.perf_counter()
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env) as proc:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        first_at = time.perf_counter()
        last = proc.stdout.read().splitlines()[-1]
    if proc.returncode != 0 or first.strip() != "first":
        raise RuntimeError(f"the baseline process failed (exit code {proc.returncode})")
    out = json.loads(last)
    return out["elapsed"], first_at - start, out["card"]


# --- the comparison --------------------------------------------------------------------------


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--baseline-worker":
        baseline_worker(Shape(**json.loads(sys.argv[2])), int(sys.argv[3]), sys.argv[4] == "1")
        return
    parser = bench.options(__doc__, steps=100, repeats=2)
    parser.add_argument("--dry", action="store_true", help="tiny, on the CPU: a check only")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    shape, steps = (DRY_SHAPE, min(args.steps, 3)) if args.dry else (GPU_SHAPE, args.steps)
    runs: dict[str, list[tuple[float, float, str]]] = {"lockstep": [], "baseline": []}
    with tempfile.TemporaryDirectory(prefix="lockstep-bench-") as storage:
        for _ in range(args.repeats):  # alternate, so both see the same machine state
            runs["lockstep"].append(ours(shape, steps, args.dry, storage))
            runs["baseline"].append(baseline(shape, steps, args.dry))
    figures = summary(runs, shape.batch * steps)
    print(f"card: {figures['card']}")
    print(
        f"lockstep TorchTrainer: {figures['lockstep_samples_s']:,.0f} samples/s, first report "
        f"after {figures['lockstep_first_report_s']:.2f} s (median of {args.repeats})"
    )
    print(
        f"plain torch.distributed + DDP: {figures['baseline_samples_s']:,.0f} samples/s, first "
        f"step after {figures['baseline_first_step_s']:.2f} s"
    )
    print(f"ratio lockstep / baseline: {figures['ratio']:.3f}x (target >= 0.97x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**figures, "dry": args.dry, "steps": steps, "repeats": args.repeats}, f)


def summary(runs: dict[str, list[tuple[float, float, str]]], samples: int) -> dict[str, Any]:
    def median(side: str, field: int) -> float:
        return statistics.median(run[field] for run in runs[side])  # type: ignore[misc]

    ours_rate = samples / median("lockstep", 0)
    base_rate = samples / median("baseline", 0)
    return {
        "card": runs["lockstep"][0][2],
        "lockstep_samples_s": ours_rate,
        "baseline_samples_s": base_rate,
        "ratio": ours_rate / base_rate,
        "lockstep_first_report_s": median("lockstep", 1),
        "baseline_first_step_s": median("baseline", 1),
    }


if __name__ == "__main__":
    main()
