"""Two hosts under SLURM: lockstep's start and DDP throughput against plain torchrun on the
same hosts, and recovery after a worker killed on the remote host.

Two hosts are made of network namespaces on this machine (``scripts/hosts.sh``; root, and
SLURM from ``scripts/install-schedulers.sh``), one worker on each; every figure comes from
``benchmarks/two_hosts_job.py`` run by the launchers:

- start: from launching (``srun -N2``; the two torchrun agents) to the end of rank 0's
  first training step;
- throughput: samples/s of the timed steps (MLP 784-1024-1024-10, batch 256 per worker,
  gloo across the hosts), between barriers, after a warm-up;
- recovery: a SIGKILL of the worker on the second host to the first report of the new
  attempt (from the fault's and the reports' times).

Baseline, in the same run: ``torchrun --nnodes 2`` (static rendezvous) with a plain
torch.distributed + DDP script, the same model and steps. Targets: throughput >= 0.97x,
start <= 1.2x.

    python benchmarks/schedulers.py [--steps 40] [--repeats 3]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import bench

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the hosts and SLURM of the multi-node tests

from tests.cluster.hosts import Hosts  # noqa: E402
from tests.cluster.slurm import Slurm  # noqa: E402

from lockstep.testing import _chaos, fired_faults  # noqa: E402

JOB = str(Path(__file__).resolve().parent / "two_hosts_job.py")
SAMPLES_PER_STEP = 2 * 256  # two workers, batch 256 each


def torchrun(hosts: Hosts, out: Path, steps: int) -> dict:
    endpoint = ["--master-addr", hosts.address("node1"), "--master-port", "29571"]
    agent = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2"]
    agent += ["--nproc-per-node", "1", *endpoint]
    job = [JOB, "plain", str(out), str(steps)]
    started = time.time()
    procs = [
        hosts.popen(host, [*agent, "--node-rank", str(rank), *job])
        for rank, host in enumerate(["node1", "node2"])
    ]
    for proc in procs:
        assert proc.wait(timeout=600) == 0
    return figures(out / "plain.json", started, steps)


def srun(slurm: Slurm, out: Path, steps: int, storage: Path) -> dict:
    started = time.time()
    argv = [sys.executable, JOB, "lockstep", str(out), str(steps), str(storage)]
    slurm.srun(["-N2", "--ntasks-per-node=1", *argv], timeout=600)
    return figures(out / "lockstep.json", started, steps)


def figures(path: Path, started: float, steps: int) -> dict:
    seen = json.loads(path.read_text())
    path.unlink()
    return {
        "start_s": seen["first_step_t"] - started,
        "samples_per_s": SAMPLES_PER_STEP * steps / seen["elapsed"],
    }


def recovery(slurm: Slurm, out: Path, storage: Path) -> float:
    argv = [sys.executable, JOB, "recovery", str(out), "6", str(storage), "3"]
    slurm.srun(["-N2", "--ntasks-per-node=1", *argv], timeout=600)
    run_dir = json.loads((out / "recovery.json").read_text())["path"]
    (fault,) = fired_faults(run_dir)
    seconds = _chaos.recovery_time(_chaos._rows(run_dir), float(fault["time"]))
    assert seconds is not None, "no report after the fault"
    return seconds


def main() -> None:
    args = bench.options(__doc__, steps=40, repeats=3).parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="lsx-bench-") as tmp,
        Hosts(["node1", "node2"], prefix=f"lsxb{os.getpid()}", subnet="10.231.7") as hosts,
    ):
        slurm = Slurm(hosts, ["node1", "node2"])
        slurm.start()
        try:
            out, storage = Path(tmp) / "out", Path(tmp) / "runs"
            out.mkdir()
            plain = [torchrun(hosts, out, args.steps) for _ in range(args.repeats)]
            ours = [srun(slurm, out, args.steps, storage / f"r{i}") for i in range(args.repeats)]
            recoveries = [recovery(slurm, out, storage / f"k{i}") for i in range(args.repeats)]
        finally:
            slurm.stop()
    start = min(r["start_s"] for r in ours) / min(r["start_s"] for r in plain)
    best = max(r["samples_per_s"] for r in ours) / max(r["samples_per_s"] for r in plain)
    print(f"two hosts, one worker each ({args.repeats} runs of {args.steps} steps; best of)")
    print(f"  torchrun  start {min(r['start_s'] for r in plain):6.2f} s  "
          f"{max(r['samples_per_s'] for r in plain):8.0f} samples/s")  # fmt: skip
    print(f"  srun      start {min(r['start_s'] for r in ours):6.2f} s  "
          f"{max(r['samples_per_s'] for r in ours):8.0f} samples/s")  # fmt: skip
    print(f"  start ratio (srun / torchrun):      {start:.2f}x  (target <= 1.2x)")
    print(f"  throughput ratio (srun / torchrun): {best:.3f}x  (target >= 0.97x)")
    each = sorted(round(r, 2) for r in recoveries)
    median = statistics.median(recoveries)
    print(f"  recovery after the remote worker's SIGKILL: median {median:.2f} s, {each}")


if __name__ == "__main__":
    main()
