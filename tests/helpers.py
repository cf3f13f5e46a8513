"""Small helpers shared by the tests."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator

import psutil
import pytest

from lockstep import train, tune
from lockstep._internal.execution.worker_group import forkserver
from lockstep.tune.schedulers import ASHAScheduler, PopulationBasedTraining
from tests.ray_cluster import free_port


def worker_processes() -> list[psutil.Process]:
    """This process's descendants but the fork server, which stays warm by design."""
    server = forkserver.server_pid()
    return [p for p in psutil.Process().children(recursive=True) if p.pid != server]


class EveryRank(train.UserCallback):
    """Keeps every rank's metrics of every step, in ``steps`` (a Result has rank 0's only)."""

    def __init__(self) -> None:
        self.steps: list[list[dict]] = []

    def after_report(self, run_context, metrics, checkpoint):
        self.steps.append(metrics)


def fit_on(trainer_cls, fn, run_config, num_workers=2, **kwargs):
    """The result of ``trainer_cls`` running ``fn`` on ``num_workers`` workers."""
    scaling = train.ScalingConfig(num_workers=num_workers)
    return trainer_cls(fn, scaling_config=scaling, run_config=run_config, **kwargs).fit()


def hang_of(trainer):  # type: ignore[no-untyped-def]
    """The failure of a fit that hung, as the error names it: rank 1's hang, always, in
    the tests of hang detection."""
    with pytest.raises(train.TrainingFailedError) as raised:
        trainer.fit()
    failure = raised.value.root_cause
    assert (failure.rank, failure.kind) == (1, "hang")
    return failure


def latest_checkpoint(run_dir: str) -> str | None:
    """The latest committed checkpoint's directory name in ``run_state.json``, or None while
    the run has none (or the file is being replaced)."""
    try:
        with open(os.path.join(run_dir, "run_state.json")) as f:
            return json.load(f)["latest"]
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def run_python(code: str) -> str:
    """What ``code`` prints, run in a fresh interpreter (nothing imported yet)."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout


def imported_after(statement: str) -> list[str]:
    """The modules a fresh interpreter has imported after running ``statement``."""
    return run_python(f"import sys\n{statement}\nprint(' '.join(sorted(sys.modules)))").split()


LOOPBACK = frozenset({"127.0.0.1", "::1"})


def listening_now(root: int | None = None) -> dict[tuple[str, int], int]:
    """The TCP sockets that process ``root`` (this one by default) and its descendants
    listen on: ``(ip, port)`` to pid."""
    top = psutil.Process(root)
    now: dict[tuple[str, int], int] = {}
    for process in [top, *top.children(recursive=True)]:
        try:
            connections = process.net_connections(kind="tcp")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue  # it ended between listing and looking
        for c in connections:
            if c.status == psutil.CONN_LISTEN:
                now[(c.laddr.ip, c.laddr.port)] = process.pid
    return now


def not_on_loopback(found: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """The part of ``found`` listening on an address other than 127.0.0.1 or ::1."""
    return {address: pid for address, pid in found.items() if address[0] not in LOOPBACK}


@contextlib.contextmanager
def sockets_listened_on() -> Iterator[dict[tuple[str, int], int]]:
    """Every TCP socket that this process and its descendants listened on while inside.

    A thread samples the process tree (:func:`listening_now`) until the block ends, into
    the dict yielded. A listener open for less than a sample's period may be missed: a
    test that needs one seen calls :func:`listening_now` itself (from a worker, say, with
    the driver's pid) at a moment it knows the listener is open.
    """
    seen: dict[tuple[str, int], int] = {}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            seen.update(listening_now())
            stop.wait(0.005)

    with running_alongside(sample, stop=stop.set):
        yield seen


def listening_addresses() -> set[str]:
    """``ip:port`` of every TCP socket this process and its descendants listen on."""
    me = psutil.Process()
    found = set()
    for proc in [me, *me.children(recursive=True)]:
        try:
            connections = proc.net_connections(kind="tcp")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for conn in connections:
            if conn.status == psutil.CONN_LISTEN:
                found.add(f"{conn.laddr.ip}:{conn.laddr.port}")
    return found


class MostTrialsAtOnce(tune.Callback):
    """The most trials that ran at the same time, in ``most``."""

    def __init__(self) -> None:
        self.running: set[str] = set()
        self.most = 0

    def on_trial_start(self, iteration, trials, trial, **info):
        self.running.add(trial.trial_id)
        self.most = max(self.most, len(self.running))

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.running.discard(trial.trial_id)


def fit_acc_trials_one_at_a_time_under_asha(trainer, accs, max_t, storage):
    """Tune ``trainer`` over ``train_loop_config["acc"]`` in ``accs``, one trial at a time,
    with ASHA (rungs every iteration, half kept) on the reported ``acc``."""
    return tune.Tuner(
        trainer,
        param_space={"train_loop_config": {"acc": tune.grid_search(accs)}},
        tune_config=tune.TuneConfig(
            metric="acc",
            mode="max",
            max_concurrent_trials=1,
            scheduler=ASHAScheduler(grace_period=1, reduction_factor=2, max_t=max_t),
        ),
        run_config=tune.RunConfig(storage_path=str(storage), verbose=0),
    ).fit()


def pbt_every_two_iterations(hyperparam_mutations) -> PopulationBasedTraining:
    """PBT perturbing every 2 iterations: the bottom half of the trials exploits the top
    half, a mutation steps to a neighbouring value (never resampled); seeded."""
    return PopulationBasedTraining(
        time_attr="training_iteration",
        perturbation_interval=2,
        quantile_fraction=0.5,
        resample_probability=0.0,
        hyperparam_mutations=hyperparam_mutations,
        seed=0,
    )


def add_lr_to_a_score(config, get_checkpoint, report, steps=None) -> None:
    """Each step adds ``config["lr"]`` to a score and reports it with a checkpoint of the step
    and the score, resuming from ``get_checkpoint()``; ``steps`` in all, or until stopped."""
    step, score = 0, 0.0
    if checkpoint := get_checkpoint():
        with checkpoint.as_directory() as d, open(os.path.join(d, "state")) as f:
            saved_step, saved_score = f.read().split()
            step, score = int(saved_step), float(saved_score)
    while steps is None or step < steps:
        step += 1
        score += config["lr"]
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state"), "w") as f:
                f.write(f"{step} {score}")
            report(
                {"score": score, "lr": config["lr"], "step": step},
                checkpoint=train.Checkpoint.from_directory(d),
            )


class S3Server:
    """A real S3 API (moto's server) on a local port, which a test may stop and start
    again (its objects are kept: they live in this process)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server = None

    def start(self) -> None:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None


@contextlib.contextmanager
def serving_s3(monkeypatch: pytest.MonkeyPatch, **env: str) -> Iterator[S3Server]:
    """An S3 server with an empty bucket ``lockstep-runs``, its endpoint and credentials in
    the environment (so worker processes reach it too), with ``env`` set as well."""
    import fsspec
    import requests

    server = S3Server()
    server.start()
    try:
        # moto keeps its buckets per process: start every test from none
        requests.post(f"{server.endpoint}/moto-api/reset", timeout=10)
        for key, value in {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": server.endpoint,
            **env,
        }.items():
            monkeypatch.setenv(key, value)
        fsspec.filesystem("s3").clear_instance_cache()
        fsspec.filesystem("s3", skip_instance_cache=True).mkdir("lockstep-runs")
        yield server
    finally:
        fsspec.filesystem("s3").clear_instance_cache()
        server.stop()


def epochs_as_torch(epochs: Iterator, count: int, batch_size: int) -> Iterator:
    """The next ``count`` epochs of rows ``{"x", "y"}``, each as Ray 1.x's ``to_torch``
    made it: float batches of features ``x`` and labels ``y`` (each epoch is read before
    the next is taken)."""
    import torch

    for _ in range(count):
        yield next(epochs).to_torch(
            label_column="y",
            feature_columns=["x"],
            label_column_dtype=torch.float,
            feature_column_dtypes=torch.float,
            batch_size=batch_size,
        )


@contextlib.contextmanager
def running_alongside(fn: Callable[[], None], *, stop: Callable[[], None] | None = None):
    """Runs ``fn`` on a thread while the ``with`` block runs. At the block's end: ``stop()``
    (to end what ``fn`` may still wait for), join the thread, raise what ``fn`` raised."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run, name="alongside")
    thread.start()
    try:
        yield
    finally:
        if stop is not None:
            stop()
        thread.join()
    if raised:
        raise raised[0]


def tiny_bert():
    """A one-layer BERT classifier over a vocabulary of 32, the same weights every time."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=32,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        num_labels=2,
    )
    return transformers.BertForSequenceClassification(config)
