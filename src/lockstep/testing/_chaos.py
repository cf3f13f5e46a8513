"""Chaos runs: a deterministic 2-worker torch model trained under random faults (worker
faults and driver deaths), each run continued until it completes and compared bitwise
with an uninterrupted run. Used by the test suite's bounded chaos test and by
``benchmarks/chaos.py`` (the long version) and ``benchmarks/recovery.py``.

Every fault's time comes from :func:`fired_faults` (or from the harness, for a driver it
kills); every report carries the time it was made and the pid of rank 0, so that the
recovery time of a fault is the time from the fault to the first report of a new
attempt (a new pid).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

from lockstep import train
from lockstep._core.storage import StorageDir
from lockstep.testing._equivalence import compare_runs, compare_values, record_problems
from lockstep.testing._faults import Fault, fired_faults
from lockstep.train import FailureConfig, Result, RunConfig, ScalingConfig

NUM_WORKERS = 2
WORKER_KINDS = ("raise", "exit", "signal", "kill", "slow")
# Where a driver is killed: lockstep's named points (LOCKSTEP_FAULT_POINT: at start-up,
# a row durable and its checkpoint not, mid-commit, a step complete), or from outside
# (SIGKILL, or SIGTERM as a scheduler sends) after a given number of rows.
DRIVER_POINTS = ("run_opened", "row_written", "checkpoint_moved", "step_recorded")
DRIVER_SIGNALS = ("SIGKILL", "SIGTERM")
TAG = "LOCKSTEP_CHAOS_DRIVER"
# A driver exits 0, or was killed (SIGKILL, SIGTERM), or stopped on a preemption (130).
_EXPECTED_EXITS = (0, -signal.SIGKILL, -signal.SIGTERM, 130)


def model(config: dict[str, Any]) -> list[bytes]:
    """The deterministic training function: a small MLP under DDP over gloo, seeded,
    deterministic algorithms, each epoch's batch a function of (seed, epoch, rank), a
    checkpoint (model and optimizer) every epoch. Fires ``config["faults"]`` at the start
    of each epoch, before its collective. Returns the final weights' bytes."""
    import torch

    from lockstep.train.torch import prepare_model

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    rank = train.get_context().get_world_rank()
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    start = 0
    if checkpoint := train.get_checkpoint():
        with checkpoint.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"), weights_only=True)
        net.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = int(state["epoch"]) + 1
    ddp = prepare_model(net)
    for epoch in range(start, config["epochs"]):
        for fault in config.get("faults", ()):
            fault.fire_if_due(epoch)
        batch = torch.Generator().manual_seed(config.get("seed", 0) * 10_000 + epoch * 10 + rank)
        x = torch.randn(32, 8, generator=batch)
        loss = torch.nn.functional.mse_loss(ddp(x), x.sum(dim=1, keepdim=True).sin())
        optimizer.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        _report(config, epoch, loss.item(), net, optimizer)
    return [p.detach().numpy().tobytes() for p in net.parameters()]


def _report(config: dict[str, Any], epoch: int, loss: float, net: Any, optimizer: Any) -> None:
    import torch

    metrics = {"epoch": epoch, "loss": loss, "pid": os.getpid(), "t": time.time()}
    # Killed workers leave their temporary directories: in the harness's own scratch.
    with tempfile.TemporaryDirectory(dir=config.get("scratch")) as d:
        if train.get_context().get_world_rank() == 0:
            state = {"model": net.state_dict(), "optimizer": optimizer.state_dict()}
            torch.save({**state, "epoch": epoch}, os.path.join(d, "state.pt"))
        train.report(metrics, checkpoint=train.Checkpoint.from_directory(d))


def trainer(
    storage: str,
    name: str,
    config: dict[str, Any],
    *,
    max_failures: int = 0,
    hang_timeout_s: float | None = None,
) -> Any:
    """A TorchTrainer of :func:`model` with 2 workers."""
    from lockstep.train.torch import TorchTrainer

    failure = {"max_failures": max_failures}
    if hang_timeout_s is not None:
        failure["hang_timeout_s"] = hang_timeout_s  # type: ignore[assignment]
    return TorchTrainer(
        model,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=NUM_WORKERS),
        run_config=RunConfig(
            name=name,
            storage_path=storage,
            verbose=0,
            failure_config=FailureConfig(**failure),  # type: ignore[arg-type]
        ),
    )


def fit(trainer: Any) -> tuple[Result, list[Any]]:
    """The Result and every rank's return value."""
    controller = trainer._controller()
    return controller.run(), controller.return_values()


def plan_faults(
    rng: random.Random, *, count: int, epochs: int, kinds: Sequence[str]
) -> list[Fault]:
    """``count`` random faults of ``kinds`` at distinct (kind, rank, epoch), none at the last
    epoch and no kill at the last two (a delayed kill must land while the workers still
    train, also on a loaded machine)."""
    faults: dict[str, Fault] = {}
    while len(faults) < count:
        kind = rng.choice(list(kinds))
        options: dict[str, Any] = {}
        if kind == "kill":
            options["seconds"] = rng.uniform(0.0, 0.005)
        elif kind == "slow":
            options["seconds"] = 0.05
        elif kind == "exit":
            options["exit_code"] = rng.choice([1, 3, 137])
        fault = Fault.random(
            kind,
            num_workers=NUM_WORKERS,
            num_epochs=epochs - (2 if kind == "kill" else 1),
            seed=rng,
            **options,
        )
        faults.setdefault(fault.name, fault)
    return list(faults.values())


@dataclasses.dataclass
class Tally:
    """What the chaos runs saw: the table ``benchmarks/chaos.py`` prints."""

    runs: int = 0
    driver_kills: int = 0
    completed: int = 0
    lost_checkpoints: int = 0
    not_equal: int = 0
    leftovers: int = 0
    injected: Counter[str] = dataclasses.field(default_factory=Counter)
    recovery: dict[str, list[float]] = dataclasses.field(default_factory=lambda: defaultdict(list))
    problems: list[str] = dataclasses.field(default_factory=list)

    def table(self) -> str:
        rows = [
            ("runs", str(self.runs)),
            ("faults injected", str(sum(self.injected.values()))),
            *((f"  {kind}", str(n)) for kind, n in sorted(self.injected.items())),
            ("driver kills planned", str(self.driver_kills)),
            ("runs completed", f"{self.completed} / {self.runs}"),
            ("lost checkpoints", str(self.lost_checkpoints)),
            ("runs not bitwise equal", str(self.not_equal)),
            ("leftovers (processes, /dev/shm, .staging)", str(self.leftovers)),
            ("median recovery (fault to first report of the new attempt)", ""),
            *(
                (f"  {kind}", f"{statistics.median(ts):.3f} s  (n={len(ts)})")
                for kind, ts in sorted(self.recovery.items())
                if ts
            ),
        ]
        width = max(len(label) for label, _ in rows)
        return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)


class Chaos:
    """Runs :func:`model` under faults in ``storage`` and keeps a :class:`Tally`."""

    def __init__(self, storage: str, *, epochs: int, seed: int = 0) -> None:
        self.storage = storage
        self.epochs = epochs
        self.seed = seed
        self.scratch = os.path.join(storage, "scratch")
        os.makedirs(self.scratch, exist_ok=True)
        self.tally = Tally()
        self._before = _descendants()
        self.reference, self.reference_values = fit(trainer(storage, "reference", self.config()))
        self._drivers: list[int] = []

    def config(self, faults: Sequence[Fault] = ()) -> dict[str, Any]:
        return {
            "epochs": self.epochs,
            "seed": self.seed,
            "scratch": self.scratch,
            "faults": list(faults),
        }

    def run_worker_faults(
        self,
        name: str,
        faults: Sequence[Fault],
        hang_timeout_s: float | None = None,
        *,
        outside_kills: Sequence[int] = (),
    ) -> None:
        """One run in this process with ``faults``, restarted after each. For each of
        ``outside_kills``, this process SIGKILLs rank 0 once that many more rows are
        written: a kill from another process, wherever the worker is."""
        self.tally.runs += 1
        shm = _shm_files()
        killer = _OutsideKiller(os.path.join(self.storage, name), outside_kills, epochs=self.epochs)
        try:
            result, values = fit(
                trainer(
                    self.storage,
                    name,
                    self.config(faults),
                    max_failures=len(faults) + len(outside_kills),
                    hang_timeout_s=hang_timeout_s,
                )
            )
        except Exception as exc:  # the run did not complete: the table says so
            self.tally.problems.append(f"{name}: {type(exc).__name__}: {exc}")
            return
        finally:
            killer.stop()
        self._check(name, result, values, shm, kills=killer.killed)

    def run_driver_kills(
        self, name: str, kills: Sequence[str], faults: Sequence[Fault] = (), *, restore: bool
    ) -> None:
        """One run whose driver is a separate process, killed as each of ``kills`` says
        (``"point:run_opened"``, ``"point:row_written:3"`` = the third time this driver
        reaches that point, ``"SIGKILL:4"`` = once this driver added 4 rows,
        ``"SIGTERM:2"``), then continued until it completes: by running the driver again,
        which fits the same trainer (``restore=False``) or ``TorchTrainer.restore(path)``,
        while a preemption fault is left, then in this process."""
        self.tally.runs += 1
        shm = _shm_files()
        spec = {"storage": self.storage, "name": name, "config": self.config(faults)}
        killed_at: dict[str, float] = {}
        self.tally.driver_kills += len(kills)
        for n, kill in enumerate(kills):
            _, when = self._drive(spec, kill)
            if when is not None:
                killed_at[f"{kill.split(':')[0]}-{n}"] = when
        try:
            result, values = self._continue(spec, faults, restore=restore)
        except Exception as exc:  # the run did not complete: the table says so
            self.tally.problems.append(f"{name}: {type(exc).__name__}: {exc}")
            return
        self._check(name, result, values, shm, kills=killed_at)

    def _continue(
        self, spec: dict[str, Any], faults: Sequence[Fault], *, restore: bool
    ) -> tuple[Result, list[Any]]:
        """Complete the run: by driver processes while a preemption fault is left to fire
        (it would stop this process), then in this process (warm: its fork server)."""
        from lockstep.train.torch import TorchTrainer

        run_dir = os.path.join(spec["storage"], spec["name"])
        for _ in range(sum(f.kind == "preempt" for f in faults)):
            if not _pending_preemptions(faults, run_dir):
                break
            code, _ = self._drive({**spec, "restore": restore}, None)
            if code == 0:
                with open(os.path.join(spec["storage"], f"{spec['name']}.values"), "rb") as f:
                    return Result.from_path(run_dir), pickle.load(f)
        if restore and TorchTrainer.can_restore(run_dir):
            return fit(TorchTrainer.restore(run_dir))
        return fit(trainer(spec["storage"], spec["name"], spec["config"], max_failures=len(faults)))

    def _drive(self, spec: dict[str, Any], kill: str | None) -> tuple[int, float | None]:
        """Run the driver process once, killed as ``kill`` says: its exit code and the
        time of the kill."""
        tag = uuid.uuid4().hex
        env = {**os.environ, TAG: tag, "TMPDIR": self.scratch}
        how, _, arg = (kill or "").partition(":")
        if how == "point":
            env["LOCKSTEP_FAULT_POINT"] = arg
        spec = {**spec, "max_failures": len(spec["config"]["faults"])}
        driver = subprocess.Popen(
            [sys.executable, "-c", DRIVER, json.dumps(spec, default=_fault_json)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._drivers.append(driver.pid)
        killed = None
        if how in DRIVER_SIGNALS:
            run_dir = os.path.join(spec["storage"], spec["name"])
            killed = _kill_after_rows(driver, run_dir, int(arg), getattr(signal, how))
        _, err = driver.communicate()
        if how == "point" and driver.returncode == -signal.SIGKILL:
            killed = time.time()
        if driver.returncode not in _EXPECTED_EXITS:
            self.tally.problems.append(f"the driver exited with {driver.returncode}: {err[-3000:]}")
        self.tally.leftovers += _await_tagged_gone(tag)
        return driver.returncode, killed

    def _check(
        self,
        name: str,
        result: Result,
        values: list[Any],
        shm: set[str],
        *,
        kills: dict[str, float],
    ) -> None:
        self.tally.completed += 1
        problems = compare_runs(self.reference, result)
        problems += compare_values(self.reference_values, values)
        if problems:
            self.tally.not_equal += 1
        problems += record_problems(result.path)
        lost = lost_checkpoints(result)
        self.tally.lost_checkpoints += len(lost)
        problems += [f"checkpoint {c} was committed and is gone" for c in lost]
        leftovers = self._leftovers(result.path, shm)
        self.tally.leftovers += len(leftovers)
        problems += leftovers
        self.tally.problems += [f"{name}: {p}" for p in problems]
        self._recovery(result.path, kills)

    def _leftovers(self, run_dir: str, shm_before: set[str]) -> list[str]:
        found = []
        if os.path.exists(os.path.join(run_dir, ".staging")):
            found.append(".staging left in the run")
        found += [f"process {pid} left running" for pid in _stray_processes(self._before)]
        ours = {os.getpid(), *self._drivers}
        new = {n for n in _shm_files() - shm_before if any(f"-{pid}-" in n for pid in ours)}
        found += [f"/dev/shm/{n} left" for n in sorted(new)]
        return found

    def _recovery(self, run_dir: str, kills: dict[str, float]) -> None:
        events = [(f["kind"], float(f["time"])) for f in fired_faults(run_dir)]
        events += [
            (kind.split("-")[0].lower().replace("point", "driver point"), t)
            for kind, t in kills.items()
        ]
        rows = _rows(run_dir)
        for kind, at in events:
            self.tally.injected[_label(kind)] += 1
            if kind == "slow":
                continue
            seconds = recovery_time(rows, at)
            if seconds is not None:
                self.tally.recovery[_label(kind)].append(seconds)


class _OutsideKiller:
    """A thread of this process that SIGKILLs the run's rank 0 (the pid its latest row
    names) after each given number of new rows, unless the run is in its last two epochs
    (the kill must land while the workers still train)."""

    def __init__(self, run_dir: str, waits: Sequence[int], *, epochs: int) -> None:
        self._last = epochs - 2
        self.killed: dict[str, float] = {}
        self._result = os.path.join(run_dir, "result.json")
        self._waits = list(waits)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lockstep-chaos-killer")
        if self._waits:
            self._thread.start()

    def stop(self) -> None:
        self._done.set()
        if self._waits:
            self._thread.join()

    def _run(self) -> None:
        for n, wait in enumerate(self._waits):
            target = _count_lines(self._result) + wait
            while _count_lines(self._result) < target:
                if self._done.wait(0.005):
                    return
            row = _rows_of(self._result)[-1]
            pid = row["pid"]
            if (
                row["epoch"] < self._last and pid in _descendants()
            ):  # a worker of this run's, not a reused pid
                self.killed[f"outside-{n}"] = time.time()
                os.kill(pid, signal.SIGKILL)


def _rows_of(path: str) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


def _label(kind: str) -> str:
    return {
        "outside": "worker SIGKILL from another process",
        "sigkill": "driver SIGKILL",
        "sigterm": "driver SIGTERM",
        "driver point": "driver SIGKILL at a point",
    }.get(kind, kind)


def recovery_time(rows: list[dict[str, Any]], fault_time: float) -> float | None:
    """From ``fault_time`` to the first report after it made by a new rank-0 process."""
    before = {row["pid"] for row in rows if row["t"] <= fault_time}
    for row in rows:
        if row["t"] > fault_time and row["pid"] not in before:
            return float(row["t"]) - fault_time
    return None


def _pending_preemptions(faults: Sequence[Fault], run_dir: str) -> list[Fault]:
    fired = fired_faults(run_dir) if os.path.isdir(run_dir) else []
    done = {(f["kind"], f["rank"], f["epoch"]) for f in fired}
    return [f for f in faults if f.kind == "preempt" and (f.kind, f.rank, f.at_epoch) not in done]


def _rows(run_dir: str) -> list[dict[str, Any]]:
    text = StorageDir.from_uri(run_dir).read_text("result.json")
    return [json.loads(line) for line in text.splitlines() if line]


def lost_checkpoints(result: Result) -> list[str]:
    """Checkpoints a row names as committed that are not in the run (every one is kept)."""
    kept = {os.path.basename(c.path) for c, _ in result.best_checkpoints}
    named = {
        row["checkpoint_dir_name"] for row in _rows(result.path) if row.get("checkpoint_dir_name")
    }
    return sorted(
        n for n in named if n not in kept or not os.path.isdir(os.path.join(result.path, n))
    )


def _stray_processes(before: set[int], timeout: float = 5.0) -> list[int]:
    """This process's descendants but ``before`` and the fork server (warm by design),
    once the ones already told to stop had a moment to go."""
    import psutil

    from lockstep._internal.execution.worker_group import forkserver

    def alive(proc: Any) -> bool:
        try:
            return bool(proc.status() != psutil.STATUS_ZOMBIE)
        except psutil.Error:
            return False

    def stray() -> list[int]:
        server = forkserver.server_pid()
        children = psutil.Process().children(recursive=True)
        return [c.pid for c in children if c.pid not in before | {server} and alive(c)]

    deadline = time.monotonic() + timeout
    while (left := stray()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return left


def _descendants() -> set[int]:
    import psutil

    return {c.pid for c in psutil.Process().children(recursive=True)}


def _shm_files() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


def _kill_after_rows(
    driver: subprocess.Popen[str], run_dir: str, rows: int, signum: int
) -> float | None:
    """Send ``signum`` to ``driver`` once it has added ``rows`` rows to the run; when it
    was sent."""
    result = os.path.join(run_dir, "result.json")
    rows += _count_lines(result)
    while driver.poll() is None:
        if _count_lines(result) >= rows:
            driver.send_signal(signum)
            return time.time()
        time.sleep(0.005)
    return None


def _count_lines(path: str) -> int:
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except OSError:
        return 0


def _await_tagged_gone(tag: str, timeout: float = 30.0) -> int:
    """Wait until every process of the driver tagged ``tag`` is gone (the workers die with
    their driver a moment later); kill and count those still there after ``timeout``."""
    deadline = time.monotonic() + timeout
    while (left := list(_tagged(tag))) and time.monotonic() < deadline:
        time.sleep(0.02)
    for proc in left:
        proc.kill()
    return len(left)


def _tagged(tag: str) -> Iterator[Any]:
    import psutil

    for proc in psutil.process_iter():
        try:
            if proc.environ().get(TAG) == tag:
                yield proc
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass


def _fault_json(fault: Any) -> dict[str, Any]:
    assert isinstance(fault, Fault)
    return {"__fault__": dataclasses.asdict(fault)}


def drive(spec: dict[str, Any]) -> None:
    """The driver process's work: fit the run that ``spec`` describes (or restore it),
    and save every rank's return value beside it."""
    from lockstep.train.torch import TorchTrainer

    config = dict(spec["config"])
    config["faults"] = [Fault(**f["__fault__"]) for f in config["faults"]]
    run_dir = os.path.join(spec["storage"], spec["name"])
    if spec.get("restore") and TorchTrainer.can_restore(run_dir):
        chosen = TorchTrainer.restore(run_dir)
    else:
        chosen = trainer(spec["storage"], spec["name"], config, max_failures=spec["max_failures"])
    _, values = fit(chosen)
    with open(os.path.join(spec["storage"], f"{spec['name']}.values"), "wb") as f:
        pickle.dump(values, f)


DRIVER = (
    "import sys, json\nfrom lockstep.testing import _chaos\n_chaos.drive(json.loads(sys.argv[1]))\n"
)
