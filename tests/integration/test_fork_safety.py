"""Workers are forked only where the driver's native libraries survive a fork.

Each test is a fresh driver (a script in its own interpreter: this one's libraries and
fork server are whatever earlier tests left) that starts one library, then fits twice with
workers that use it. The fork server is forked before the run opens its storage; a library
already running when it is first needed makes the workers start fresh, and one line says
why, once. CUDA's case runs in ``test_gpu.py``; its detection is in the unit tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

FRESH_START = "lockstep: workers start as fresh processes, not forks of this one: "

PRELUDE = """
import json, os, sys, tempfile
from lockstep import train
from lockstep._internal.execution.worker_group import fork_safety, forkserver
from lockstep.train import Checkpoint, DataParallelTrainer, RunConfig, ScalingConfig

STORAGE = sys.argv[1]


def fit(fn, storage=STORAGE, **run):
    return DataParallelTrainer(
        fn,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=storage, verbose=0, **run),
    ).fit()


def done(results, **more):
    print(json.dumps({
        "metrics": [r.metrics for r in results],
        "server": forkserver.server_pid(),
        "driver": os.getpid(),
        **more,
    }))
"""

S3 = """
import pyarrow.fs as pafs

ENDPOINT = os.environ["AWS_ENDPOINT_URL"].removeprefix("http://")


def s3():
    return pafs.S3FileSystem(
        endpoint_override=ENDPOINT, scheme="http", region="us-east-1", allow_delayed_open=True
    )


def uses_s3():
    with s3().open_input_stream("lockstep-runs/hello.txt") as f:
        read = f.read().decode()
    with tempfile.TemporaryDirectory() as d:
        open(os.path.join(d, "rank"), "w").write(str(train.get_context().get_world_rank()))
        checkpoint = Checkpoint.from_directory(d)
        train.report({"parent": os.getppid(), "read": read}, checkpoint=checkpoint)
"""


def run_driver(tmp_path, *parts: str) -> tuple[dict, str]:
    """What the driver script of ``parts`` printed last (JSON), and its stderr."""
    script = tmp_path / "driver.py"
    script.write_text("\n".join(textwrap.dedent(part) for part in (PRELUDE, *parts)))
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


def said_once(stderr: str, reason: str) -> bool:
    lines = [line for line in stderr.splitlines() if line.startswith(FRESH_START)]
    return len(lines) == 1 and reason in lines[0]


def put_hello():
    import fsspec

    fsspec.filesystem("s3", skip_instance_cache=True).pipe("lockstep-runs/hello.txt", b"hello")


def test_a_driver_running_the_aws_crt_starts_workers_fresh_and_they_use_s3(tmp_path, s3_endpoint):
    # the crash this prevents: forked workers died with SIGSEGV ("CRT Generate Random
    # Bytes Failed") at their first S3 request, restart after restart
    put_hello()
    out, stderr = run_driver(
        tmp_path,
        S3,
        """
        fs = s3()  # the AWS CRT starts here, before any fit()
        results = [fit(uses_s3, "lockstep-runs/runs", storage_filesystem=fs) for _ in range(2)]
        with results[1].checkpoint.as_directory() as d:
            rank = open(os.path.join(d, "rank")).read()
        done(results, rank=rank)
        """,
    )
    assert out["metrics"] == [{"parent": out["driver"], "read": "hello"}] * 2
    assert out["server"] is None and out["rank"] == "0"
    assert said_once(stderr, "the AWS CRT runs in this process (pyarrow's S3 filesystem")


def test_the_fork_server_is_forked_before_the_run_opens_its_s3_storage(tmp_path, s3_endpoint):
    # pyarrow's options in the URI: opening the storage starts the AWS CRT in the driver
    put_hello()
    out, stderr = run_driver(
        tmp_path,
        S3,
        """
        uri = f"s3://lockstep-runs/q?endpoint_override={ENDPOINT}&scheme=http&region=us-east-1"
        results = [fit(uses_s3, uri + "&allow_delayed_open=true") for _ in range(2)]
        done(results, crt=fork_safety.fork_unsafe_reason())
        """,
    )
    assert out["server"] is not None
    assert out["metrics"] == [{"parent": out["server"], "read": "hello"}] * 2  # forked
    assert out["crt"].startswith("the AWS CRT runs in this process")  # started after the server
    assert FRESH_START not in stderr


def test_a_forked_worker_reads_the_drivers_handle_on_dev_urandom(tmp_path):
    # a library may open /dev/urandom once and keep reading it (the AWS CRT does): the fork
    # server lets go of the driver's descriptors, but not of that one
    out, _ = run_driver(
        tmp_path,
        """
        fd = os.open("/dev/urandom", os.O_RDONLY)

        def reads_it():
            train.report({"parent": os.getppid(), "bytes": len(os.read(fd, 16))})

        done([fit(reads_it)])
        """,
    )
    assert out["server"] is not None
    assert out["metrics"] == [{"parent": out["server"], "bytes": 16}]


GRPC = """
from concurrent import futures

import grpc


def echo_server():
    handler = grpc.method_handlers_generic_handler(
        "t.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(lambda request, _: request)}
    )
    server = grpc.server(futures.ThreadPoolExecutor(1))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, grpc.insecure_channel(f"127.0.0.1:{port}")


def echo(channel, payload):
    return channel.unary_unary("/t.Echo/Echo")(payload, timeout=60)


def uses_grpc():
    server, channel = echo_server()
    with channel:
        train.report({"parent": os.getppid(), "echo": echo(channel, b"worker").decode()})
    server.stop(0)
"""


def test_a_driver_running_grpc_starts_workers_fresh_and_they_use_grpc(tmp_path):
    # gRPC's threads run while a channel or server is open (they end a moment after the
    # last one closes): here the driver's stay open through both fits
    out, stderr = run_driver(
        tmp_path,
        GRPC,
        """
        server, channel = echo_server()
        assert echo(channel, b"driver") == b"driver"
        results = [fit(uses_grpc) for _ in range(2)]
        channel.close()
        server.stop(0)
        done(results)
        """,
    )
    assert out["metrics"] == [{"parent": out["driver"], "echo": "worker"}] * 2
    assert out["server"] is None
    assert said_once(stderr, "gRPC runs in this process")


@pytest.mark.slow
def test_a_driver_that_ran_tensorflow_starts_workers_fresh_and_they_use_it(tmp_path):
    out, stderr = run_driver(
        tmp_path,
        """
        import tensorflow as tf

        assert float(tf.constant(1.0) + 1) == 2.0  # TensorFlow's runtime starts here

        def uses_tensorflow():
            total = float(tf.reduce_sum(tf.ones(3)))
            train.report({"parent": os.getppid(), "sum": total})

        done([fit(uses_tensorflow) for _ in range(2)])
        """,
    )
    assert out["metrics"] == [{"parent": out["driver"], "sum": 3.0}] * 2
    assert out["server"] is None
    assert said_once(stderr, "TensorFlow's runtime runs in this process")


def test_a_driver_that_trained_lightgbm_forks_workers_that_load_models(tmp_path):
    """A LightGBM model trained in the driver leaves GNU OpenMP's pool running there; a
    forked worker loading a model then waited forever for the pool's threads. Forked
    workers run LightGBM on their own thread count."""
    out, _ = run_driver(
        tmp_path,
        """
        import lightgbm, numpy

        rng = numpy.random.default_rng(0)
        features, labels = rng.normal(size=(200, 4)), rng.integers(0, 2, 200)
        model = lightgbm.LGBMClassifier(n_estimators=3, verbose=-1).fit(features, labels)
        saved = os.path.join(tempfile.mkdtemp(), "model.txt")
        model.booster_.save_model(saved)


        def loads_the_model():
            booster = lightgbm.Booster(model_file=saved)  # a parallel region
            train.report({"trees": booster.num_trees(), "parent": os.getppid()})


        done([fit(loads_the_model, name=f"run{i}") for i in range(2)])
        """,
    )
    assert out["metrics"] == [{"trees": 3, "parent": out["server"]}] * 2
