"""The fork server: fast, but forking must never leak the driver's state into workers."""

import importlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from lockstep import train
from lockstep._internal.execution.worker_group import forkserver
from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig
from lockstep.train.backend import Backend, BackendConfig
from tests.helpers import EveryRank, run_python

# These tests start fork servers of their own (see the fixture).
pytestmark = pytest.mark.usefixtures("fork_safe_driver")


def random_draws():
    train.report({"random": random.random(), "numpy": float(np.random.rand())})


def fit(fn, storage, **run):
    return DataParallelTrainer(
        fn,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(storage), verbose=0, **run),
    ).fit()


def test_workers_are_forked_and_the_server_stays_warm(tmp_path):
    fit(lambda: None, tmp_path)
    first = forkserver.server_pid()
    fit(lambda: None, tmp_path)
    assert first is not None and forkserver.server_pid() == first


def test_every_worker_gets_its_own_random_state(tmp_path):
    ranks = EveryRank()
    fit(random_draws, tmp_path, callbacks=[ranks])
    fit(random_draws, tmp_path, callbacks=[ranks])
    draws = [m[key] for step in ranks.steps for m in step for key in ("random", "numpy")]
    assert len(set(draws)) == len(draws) == 8


def test_a_worker_never_runs_the_drivers_exit_handlers(tmp_path):
    # a forked copy of this TemporaryDirectory must not clean it up when a worker exits
    with tempfile.TemporaryDirectory(prefix="lockstep-test-", dir=tmp_path) as mine:
        for _ in range(2):
            fit(lambda: train.report({"x": 1}), tmp_path)
        assert os.path.isdir(mine)


def test_the_server_releases_the_drivers_sockets():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    server = forkserver.ForkServer(native_threads_at_fork=False)
    try:
        listener.close()
        again = socket.socket()
        again.bind(("127.0.0.1", port))  # free: the server holds no copy of it
        again.close()
    finally:
        server.close()
    assert not server.alive()


def test_several_threads_only_from_a_server_forked_without_native_threads(monkeypatch, caplog):
    monkeypatch.setattr(forkserver, "_said", set())
    assert forkserver.get(num_threads=1) is not None
    server = forkserver.get(num_threads=1)
    monkeypatch.setattr(server, "threads_ok", False)
    assert forkserver.get(num_threads=4) is None
    assert forkserver.get(num_threads=2) is None
    assert forkserver.get(num_threads=1) is server
    said = [r.getMessage() for r in caplog.records if "fresh processes" in r.getMessage()]
    assert said == [
        "lockstep: workers of several threads start as fresh processes, not forks: an OpenMP "
        "pool ran in this process when the fork server was forked (a forked worker would hang "
        "in its first parallel region)"
    ]


def test_threads_that_survive_a_fork_are_not_taken_for_an_openmp_pool():
    """numpy's and scipy's OpenBLAS and pyarrow's jemalloc start threads as they load, and
    their libraries start them again in a fork; torch's OpenMP pool, once a parallel region
    ran, would hang a forked worker's first one."""
    out = run_python(
        "import os, numpy, pyarrow, scipy.linalg, torch\n"
        "from lockstep._internal.execution.worker_group import forkserver\n"
        "count = lambda: len(os.listdir('/proc/self/task'))\n"
        "loaded, before = forkserver.native_threads(), count()\n"
        "torch.set_num_threads(2)\n"
        "torch.randn(256, 256) @ torch.randn(256, 256)\n"
        "print(before, loaded, count(), forkserver.native_threads())"
    )
    before, loaded, after, ran = out.split()
    assert int(before) >= 3  # the main thread, jemalloc's, OpenBLAS's (two cores or more)
    assert loaded == "False"
    assert int(after) > int(before)  # the OpenMP pool
    assert ran == "True"


def test_a_server_started_from_a_thread_outlives_the_thread(tmp_path):
    import threading

    assert forkserver.server_pid() is None  # (the fixture set the session's aside)
    thread = threading.Thread(target=fit, args=(lambda: None, tmp_path))
    thread.start()
    thread.join()
    started = forkserver.server_pid()
    # the kernel's parent-death signal would have killed it when the thread ended
    fit(lambda: train.report({"x": 1}), tmp_path)
    assert started is not None and forkserver.server_pid() == started


IMPORTS_SEEN = """
import json, os, sys, tempfile
import numpy
from lockstep import train
from lockstep.testing import fit_all_ranks
from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig

# (pid, module): every import not already done, in any process; kept on a module, as the
# function that reads it goes to the workers by value, with a copy of its globals
sys.imports_seen = []


class Recorder:
    def find_spec(self, name, path=None, target=None):
        sys.imports_seen.append((os.getpid(), name))
        return None  # the other finders find it


sys.meta_path.insert(0, Recorder())


def seen(config):
    numpy.random.rand()  # the workers' random state is reseeded: numpy.random is used
    return os.getpid(), [name for pid, name in sys.imports_seen if pid == os.getpid()]


with tempfile.TemporaryDirectory() as storage:
    trainer = DataParallelTrainer(
        seen,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=storage, verbose=0),
    )
    print(json.dumps(fit_all_ranks(trainer)))
"""


def test_a_forked_worker_imports_nothing_on_its_way_to_the_function(tmp_path):
    """What every worker would import (its own code, numpy's random module) is imported
    once, in the fork server: imported by each of 128 workers it cost more than the run."""
    script = tmp_path / "imports.py"
    script.write_text(IMPORTS_SEEN)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=True
    )
    per_worker = json.loads(done.stdout.splitlines()[-1])
    assert len({pid for pid, _ in per_worker}) == 2  # two forked workers, not the driver
    assert [names for _, names in per_worker] == [[], []]


TORCH_IMPORTS = """
import json, os, sys, tempfile
import torch
from lockstep import train
from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig
from lockstep.train.torch import TorchTrainer, prepare_model

sys.imports_seen = []


class Recorder:
    def find_spec(self, name, path=None, target=None):
        sys.imports_seen.append((os.getpid(), name))
        return None


sys.meta_path.insert(0, Recorder())


def loop():
    had = "torch._dynamo" in sys.modules
    model = prepare_model(torch.nn.Linear(2, 1))
    model(torch.ones(1, 2)).sum().backward()
    mine = [name for pid, name in sys.imports_seen if pid == os.getpid()]
    train.report({"had": had, "imported": [name for name in mine if "_dynamo" in name]})


def plain():
    train.report({"had": "torch._dynamo" in sys.modules})


with tempfile.TemporaryDirectory() as storage:
    run = dict(scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=storage, verbose=0))
    first = DataParallelTrainer(plain, **run).fit()
    result = TorchTrainer(loop, **run).fit()
print(json.dumps({"plain": first.metrics["had"], "worker": result.metrics,
    "driver": "torch._dynamo" in sys.modules}))
"""


def test_torch_workers_get_torch_dynamo_from_the_server_and_the_driver_never_imports_it(
    tmp_path,
):
    """A DistributedDataParallel imports torch._dynamo (1 s here): the fork server imports
    it once, for the workers of a torch backend (not before: other workers go without);
    the driver, which never builds one, does without it (its exit collects every object
    it holds: 0.3 s longer with it)."""
    script = tmp_path / "torch_imports.py"
    script.write_text(TORCH_IMPORTS)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=True
    )
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["driver"] is False
    assert seen["plain"] is False
    assert seen["worker"]["had"] is True
    assert seen["worker"]["imported"] == []


def test_a_preload_sent_to_a_dead_server_leaves_it_to_the_next_fit_to_start_another(tmp_path):
    """start_early asks the server it just found alive to import its workers' modules; a
    server that died in between fails nothing there: the fit that follows starts a new
    one."""
    fit(lambda: None, tmp_path)
    server = forkserver._server
    os.kill(server.pid, signal.SIGKILL)
    os.waitpid(server.pid, 0)
    server.preload(("json",))
    fit(lambda: None, tmp_path)
    assert forkserver.server_pid() not in (None, server.pid)


class BrokenImportBackend(Backend):
    worker_imports = ("lockstep_preload_pkg.boom",)


class BrokenImportConfig(BackendConfig):
    backend_cls = BrokenImportBackend


def test_a_worker_import_that_fails_in_the_server_is_left_to_the_workers(tmp_path, monkeypatch):
    """A module of the backend's worker imports that raises (not only ImportError) when the
    server imports it leaves the server forking: the workers, which do not import it here,
    run; the same server serves the next fit."""
    package = tmp_path / "lockstep_preload_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "boom.py").write_text("raise RuntimeError('broken on purpose')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    # the package is the driver's (so the server tries the module), until the test ends
    monkeypatch.setitem(sys.modules, package.name, importlib.import_module(package.name))

    def run():
        return DataParallelTrainer(
            lambda: train.report({"ok": 1}),
            backend_config=BrokenImportConfig(),
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(storage_path=str(tmp_path / "runs"), verbose=0),
        ).fit()

    assert run().metrics["ok"] == 1
    first = forkserver.server_pid()
    assert run().metrics["ok"] == 1
    assert first is not None and forkserver.server_pid() == first


def test_a_workers_stack_and_phase_files_are_unnamed_memory(tmp_path):
    """The files a worker shares with the driver through /proc (its stack dumps, its phase
    page) are memfds: no inode of the temporary directory's file system (an ext4 inode
    cost each forked worker 0.4 ms of its start) and nothing there to leave behind."""

    def open_files():
        links = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                links.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                pass  # listdir's own descriptor, closed by now
        train.report({"links": links})

    ranks = EveryRank()
    fit(open_files, tmp_path, callbacks=[ranks])
    for metrics in ranks.steps[0]:
        links = metrics["links"]
        assert "/memfd:lockstep-stacks (deleted)" in links
        assert "/memfd:lockstep-phase (deleted)" in links
        assert not [link for link in links if link.startswith(tempfile.gettempdir())]


def test_a_worker_runs_its_own_multiprocessing_finalizers_at_exit_never_the_drivers(tmp_path):
    """A loky pool (joblib's) in a forked worker names its semaphores in /dev/shm and
    multiprocessing's finalizers unlink them as the worker exits, as in a fresh worker;
    the driver's finalizers and children are the driver's alone (multiprocessing's exit
    handler stops the daemonic children it knows of)."""
    import multiprocessing
    import multiprocessing.util
    import time

    child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(300,), daemon=True)
    child.start()

    finalized = tmp_path / "finalized"

    class Owner:
        pass

    owner = Owner()
    multiprocessing.util.Finalize(owner, finalized.write_text, (str(os.getpid()),), exitpriority=0)
    before = {n for n in os.listdir("/dev/shm") if n.startswith("sem.")}

    def pooled():
        from joblib import Parallel, delayed

        squares = Parallel(n_jobs=2, backend="loky")(delayed(pow)(i, 2) for i in range(4))
        train.report({"squares": squares})

    ranks = EveryRank()
    fit(pooled, tmp_path / "runs", callbacks=[ranks])
    assert [m["squares"] for m in ranks.steps[0]] == [[0, 1, 4, 9]] * 2
    assert {n for n in os.listdir("/dev/shm") if n.startswith("sem.")} - before == set()
    assert not finalized.exists()  # no worker ran it
    assert child.is_alive()
    del owner
    assert finalized.read_text() == str(os.getpid())
    child.kill()
    child.join()


def test_a_worker_removes_its_own_temporary_directories_at_exit_never_the_drivers(tmp_path):
    """A TemporaryDirectory still open when a forked worker exits (its ``with`` block never
    entered: a stop landed between its creation and the block, say) is removed by
    weakref's exit handler, as in a fresh worker; the driver's, made before the fork server
    started, stays the driver's."""
    drivers = tempfile.TemporaryDirectory(dir=tmp_path)
    names = tmp_path / "names"

    def keeps_one():
        import builtins

        kept = tempfile.TemporaryDirectory(dir=tmp_path)
        builtins.lockstep_test_kept = kept  # alive until the worker exits
        with open(names, "a") as f:
            f.write(f"{os.getppid()} {kept.name}\n")

    fit(keeps_one, tmp_path / "runs")  # starts this test's fork server, after `drivers`
    lines = [line.split() for line in names.read_text().splitlines()]
    assert len(lines) == 2 and all(int(ppid) != os.getpid() for ppid, _ in lines)  # forked
    assert [os.path.exists(name) for _, name in lines] == [False, False]
    assert os.path.isdir(drivers.name)
    drivers.cleanup()


def test_a_worker_has_the_drivers_environment_of_now_not_the_servers(tmp_path, monkeypatch):
    """The server keeps the environment it was forked with; each worker takes the
    driver's as it is when the worker starts: what was removed since is gone."""
    monkeypatch.setenv("LOCKSTEP_TEST_REMOVED", "1")
    monkeypatch.setenv("LOCKSTEP_TEST_CHANGED", "before")
    fit(lambda: None, tmp_path)  # the server is forked now, with both
    monkeypatch.delenv("LOCKSTEP_TEST_REMOVED")
    monkeypatch.setenv("LOCKSTEP_TEST_CHANGED", "after")
    monkeypatch.setenv("LOCKSTEP_TEST_ADDED", "new")
    names = ("LOCKSTEP_TEST_REMOVED", "LOCKSTEP_TEST_CHANGED", "LOCKSTEP_TEST_ADDED")

    def environment():
        train.report({"env": [os.environ.get(name) for name in names]})

    ranks = EveryRank()
    fit(environment, tmp_path, callbacks=[ranks])
    assert [m["env"] for m in ranks.steps[0]] == [[None, "after", "new"]] * 2
