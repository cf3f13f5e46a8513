"""torchrun with a static rendezvous (``--node-rank``), whose run id is ``none``: a run not
named by the user is named after the torchrun agent, so torchrun's restart of the job
(``--max-restarts``) continues the same run from its latest checkpoint, as a requeued SLURM
job's does, instead of starting a new one."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.processes, pytest.mark.slow]

JOB = """
import json, os, sys, tempfile
from lockstep import train
from lockstep.train import Checkpoint, DataParallelTrainer, RunConfig, ScalingConfig

storage, marker = sys.argv[1], sys.argv[2]

def loop(config):
    start = 0
    checkpoint = train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            start = json.load(open(os.path.join(d, "e.json")))["epoch"] + 1
    for epoch in range(start, 4):
        rank = train.get_context().get_world_rank()
        if epoch == 2 and rank == 1 and not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError("fails once, at epoch 2")
        with tempfile.TemporaryDirectory() as d:
            json.dump({"epoch": epoch}, open(os.path.join(d, "e.json"), "w"))
            train.report({"epoch": epoch}, checkpoint=Checkpoint.from_directory(d))

result = DataParallelTrainer(
    loop, scaling_config=ScalingConfig(num_workers=2), run_config=RunConfig(storage_path=storage)
).fit()
print("RESULT", json.dumps({"path": result.path, "epoch": result.metrics["epoch"]}), flush=True)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.timeout(300)
def test_torchruns_restart_of_a_static_job_continues_its_run(tmp_path):
    script, storage, marker = tmp_path / "job.py", tmp_path / "runs", tmp_path / "failed-once"
    script.write_text(JOB)
    static = ["--node-rank", "0", "--master-addr", "127.0.0.1", "--master-port", str(free_port())]
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node",
         "2", *static, "--max-restarts", "1", str(script), str(storage), str(marker)],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert marker.exists()  # the first launch failed, and torchrun started the job again
    (run_dir,) = [p for p in storage.iterdir() if not p.name.startswith(".")]  # one run, both
    assert run_dir.name.startswith(f"lockstep_run-torchrun-{socket.gethostname()}-")
    rows = [json.loads(line) for line in (run_dir / "result.json").read_text().splitlines()]
    assert [row["epoch"] for row in rows] == [0, 1, 2, 3]  # epochs 0-1 once: from checkpoint 1
    assert json.loads((run_dir / "run_state.json").read_text())["status"] == "finished"
    results = [json.loads(line[7:]) for line in done.stdout.splitlines() if line[:7] == "RESULT "]
    assert results == [{"path": str(run_dir), "epoch": 3}]
