"""In-memory datasets reach local workers in shared memory that no end of the driver leaks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import psutil
import pytest

DRIVER = textwrap.dedent(
    """
    import os, threading
    import lockstep.data as ld
    from lockstep import train
    from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig

    def loop():
        rows = sum(len(b["x"]) for b in train.get_dataset_shard("train").iter_batches())
        print(f"ready {os.getpid()} {rows}", flush=True)
        threading.Event().wait()  # until the driver is gone

    data = ld.from_items([{"x": float(i)} for i in range(10_000)])
    DataParallelTrainer(
        loop,
        datasets={"train": data},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=os.environ["RUNS"], name="run", verbose=0),
    ).fit()
    """
)


def shm_tables() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith("lockstep-table")}


@pytest.mark.slow
def test_a_driver_killed_by_sigkill_mid_run_leaves_no_shared_memory(tmp_path):
    before = shm_tables()
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    env = {**os.environ, "RUNS": str(tmp_path / "runs")}
    driver = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env
    )
    workers = []
    try:
        assert driver.stdout is not None
        for line in driver.stdout:  # the workers' output, through the driver
            if "ready" in line:
                pid, rows = line.split("ready", 1)[1].split()[:2]
                workers.append(psutil.Process(int(pid)))
                assert int(rows) == 5000
            if len(workers) == 2:
                break
        for worker in workers:  # the shard's rows are mapped from a memfd, not a named file
            with open(f"/proc/{worker.pid}/maps") as maps:
                assert "memfd:lockstep-table" in maps.read()
        assert shm_tables() == before
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        _, alive = psutil.wait_procs(workers, timeout=60)
        assert not alive, "the workers outlived their driver"
        assert shm_tables() == before
    finally:
        if driver.poll() is None:
            driver.kill()
        driver.wait()
        for worker in workers:
            try:
                worker.kill()
            except psutil.NoSuchProcess:
                pass
        if driver.stdout is not None:
            driver.stdout.close()
