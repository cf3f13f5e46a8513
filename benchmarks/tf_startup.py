"""Start-up of a TensorflowTrainer run: how soon a trivial 2-worker TensorFlow job is done.

The job: 2 workers each create a MultiWorkerMirroredStrategy (TensorFlow's gRPC servers and
collectives) and all-reduce one value. Measured in a fresh driver process that has already
imported TensorFlow, as a TensorFlow script has: the first fit() and the second fit() in
the same process. Baseline, in the same run: a plain launcher that starts 2 Python
processes with TF_CONFIG set, each importing TensorFlow and running the same job. Targets:
first fit <= 1.2x the launcher's wall time, second <= 0.5x.

    python benchmarks/tf_startup.py
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

JOB = """
def job():
    import tensorflow as tf
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    value = strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)
    return float(value)
"""

DRIVER = (
    """
import json, sys, tempfile, time
t0 = time.perf_counter()
import tensorflow
t1 = time.perf_counter()
from lockstep import train
from lockstep.train import RunConfig, ScalingConfig
from lockstep.train.tensorflow import TensorflowTrainer
t2 = time.perf_counter()
"""
    + JOB
    + """
def fit(storage):
    trainer = TensorflowTrainer(lambda: train.report({"sum": job()}),
                                scaling_config=ScalingConfig(num_workers=2),
                                run_config=RunConfig(storage_path=storage, verbose=0))
    start = time.perf_counter()
    assert trainer.fit().metrics["sum"] == 2.0
    return time.perf_counter() - start

with tempfile.TemporaryDirectory(prefix="bench-tf-") as storage:
    first = fit(storage)
    second = fit(storage)
json.dump({"import_tf": t1 - t0, "import_lockstep": t2 - t1, "first": first,
           "second": second}, sys.stdout)
"""
)

WORKER = JOB + "\nassert job() == 2.0\n"


def baseline() -> float:
    """2 fresh processes with TF_CONFIG set by hand, as the TensorFlow tutorial starts them."""
    socks = [socket.socket() for _ in range(2)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    workers = [f"127.0.0.1:{s.getsockname()[1]}" for s in socks]
    for s in socks:
        s.close()
    start = time.perf_counter()
    procs = []
    for index in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        env = {**os.environ, "TF_CONFIG": json.dumps(tf_config)}
        procs.append(
            subprocess.Popen([sys.executable, "-c", WORKER], env=env, stderr=subprocess.DEVNULL)
        )
    codes = [p.wait() for p in procs]
    assert codes == [0, 0], codes
    return time.perf_counter() - start


def main() -> None:
    out = subprocess.run([sys.executable, "-c", DRIVER], capture_output=True, text=True, check=True)
    ours = json.loads(out.stdout.strip().splitlines()[-1])
    base = baseline()
    print(
        f"driver: import tensorflow {ours['import_tf']:.2f} s, "
        f"import lockstep.train.tensorflow {ours['import_lockstep']:.2f} s"
    )
    print(f"first fit(): {ours['first']:.3f} s, second fit(): {ours['second']:.3f} s")
    print(f"baseline (2 processes: import tensorflow, TF_CONFIG, all-reduce): {base:.3f} s")
    print(
        f"ratio first fit / baseline: {ours['first'] / base:.2f}x (target <= 1.2x), "
        f"second fit / baseline: {ours['second'] / base:.2f}x (target <= 0.5x)"
    )
    # The strictest reading: the driver's own import of TensorFlow counted against us too.
    whole = ours["import_tf"] + ours["import_lockstep"] + ours["first"]
    print(f"ratio (driver's imports + first fit) / baseline: {whole / base:.2f}x")


if __name__ == "__main__":
    main()
