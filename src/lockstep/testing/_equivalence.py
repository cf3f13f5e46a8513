"""assert_resume_equivalent: a run with faults ends in the same state as one without."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import pickle
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from lockstep._core.checkpoint import METADATA_FILE
from lockstep._core.errors import TrainingInterrupted
from lockstep._core.storage import StorageDir
from lockstep.testing._faults import Fault, fired_faults
from lockstep.train import DataParallelTrainer, FailureConfig, Result, RunConfig

# Faults that fail a worker (each costs one restart); "slow" fails nothing, "preempt"
# stops the run, which is then restored.
_FAILING = ("raise", "exit", "signal", "kill", "hang")


def assert_resume_equivalent(
    train_func: Callable[..., Any],
    faults: Sequence[Fault],
    *,
    trainer_cls: type[DataParallelTrainer] = DataParallelTrainer,
    train_loop_config: dict[str, Any] | None = None,
    run_config: RunConfig | None = None,
    compare_return_values: bool = True,
    **trainer_kwargs: Any,
) -> Result:
    """Check that ``train_func`` recovers from ``faults`` without a trace in its results.

    Runs ``train_func`` twice with ``trainer_cls`` (``TorchTrainer``, ...): once without
    faults, once with ``faults`` in ``train_loop_config["faults"]`` (the function fires them
    with :meth:`Fault.fire_if_due`, as :func:`train_epochs` does). The run with faults
    restarts its workers after each failure (``max_failures`` is raised to the number of
    failing faults) and is restored after each preemption, until it completes. Then:

    - the final checkpoints hold the same files with the same bytes (lockstep's own
      ``.metadata.json`` aside);
    - every rank returned the same value (compared by their pickled bytes, so tensors and
      arrays bitwise; else by ``==``), unless ``compare_return_values=False``;
    - the run's ``result.json`` and ``progress.csv`` hold ``training_iteration`` 1..N,
      each once;
    - every fault fired.

    The training function must be deterministic: seeded, with deterministic algorithms,
    and resuming from its checkpoint exactly (model, optimizer, data position, random
    state). A ``"hang"`` fault needs ``FailureConfig(hang_timeout_s=...)`` in
    ``run_config``.

    Args:
        train_func: The training function, taking ``config``.
        faults: The faults to inject in the second run.
        trainer_cls: The trainer to run it with.
        train_loop_config: The config, without ``"faults"``.
        run_config: Where the two runs go (``storage_path``; they are named
            ``reference`` and ``with_faults``) and their failure settings. Without a
            ``storage_path`` both go to a temporary directory, removed at the end.
        compare_return_values: Whether the ranks' return values must be equal.
        **trainer_kwargs: Further arguments of ``trainer_cls`` (``scaling_config``,
            ``datasets``, ...).

    Returns:
        The Result of the run with faults.

    Raises:
        AssertionError: What differs between the two runs, or why the run with faults did
            not complete.

    Example:
        >>> from lockstep.testing import Fault, assert_resume_equivalent, train_epochs
        >>> from lockstep.train import ScalingConfig
        >>> faults = [Fault(kind="raise", rank=1, at_epoch=1),
        ...           Fault(kind="exit", rank=0, at_epoch=3)]
        >>> result = assert_resume_equivalent(
        ...     lambda config: train_epochs(config) > 0, faults,
        ...     train_loop_config={"epochs": 5}, scaling_config=ScalingConfig(num_workers=2))
        >>> result.metrics["epoch"]
        4
    """
    faults = list(faults)
    config = dict(train_loop_config or {})
    if "faults" in config:
        raise ValueError(
            "train_loop_config already holds 'faults'. HINT: pass the faults as the second "
            "argument; the run without faults must run without them"
        )
    base = run_config or RunConfig(verbose=0)
    failure_config = _failure_config(base, faults)
    with _storage(base) as storage_path:
        base = replace(base, storage_path=storage_path)
        reference, reference_values = _fit(
            trainer_cls(
                train_func,
                train_loop_config=config,
                run_config=replace(base, name="reference"),
                **trainer_kwargs,
            )
        )
        faulty, values = _fit_with_faults(
            trainer_cls(
                train_func,
                train_loop_config={**config, "faults": faults},
                run_config=replace(base, name="with_faults", failure_config=failure_config),
                **trainer_kwargs,
            ),
            num_preemptions=sum(f.kind == "preempt" for f in faults),
        )
        problems = compare_runs(reference, faulty)
        if compare_return_values:
            problems += compare_values(reference_values, values)
        problems += record_problems(faulty.path)
        problems += _unfired(faults, faulty.path)
    if problems:
        raise AssertionError(
            "the run with faults did not end as the run without:\n- " + "\n- ".join(problems)
        )
    return faulty


@contextlib.contextmanager
def _storage(run_config: RunConfig) -> Iterator[str]:
    if run_config.storage_path is not None:
        yield str(run_config.storage_path)
        return
    with tempfile.TemporaryDirectory(prefix="lockstep-resume-") as storage_path:
        yield storage_path


def _failure_config(run_config: RunConfig, faults: Sequence[Fault]) -> FailureConfig:
    """The run's failure settings, allowing a restart per failing fault."""
    config = run_config.failure_config or FailureConfig()
    if any(f.times == -1 and f.kind in _FAILING for f in faults):
        raise ValueError(
            "a fault with times=-1 fails every attempt: the run could never complete. "
            "HINT: give it times=1 (or n)"
        )
    if any(f.kind == "hang" for f in faults) and getattr(config, "hang_timeout_s", None) is None:
        raise ValueError(
            "a 'hang' fault stops its rank for good; only hang detection ends it. HINT: "
            "run_config=RunConfig(failure_config=FailureConfig(hang_timeout_s=...))"
        )
    needed = sum(f.times for f in faults if f.kind in _FAILING)
    if config.max_failures != -1 and config.max_failures < needed:
        config = replace(config, max_failures=needed)
    return config


def _fit(trainer: DataParallelTrainer) -> tuple[Result, list[Any]]:
    """The Result and every rank's return value."""
    controller = trainer._controller()
    return controller.run(), controller.return_values()


def _fit_with_faults(
    trainer: DataParallelTrainer, *, num_preemptions: int
) -> tuple[Result, list[Any]]:
    """Fit; restore and fit again after each preemption."""
    for _ in range(num_preemptions):
        try:
            return _fit(trainer)
        except TrainingInterrupted as stopped:
            trainer = type(trainer).restore(stopped.path)
    return _fit(trainer)


def compare_runs(reference: Result, faulty: Result) -> list[str]:
    """How the final checkpoints of two runs differ (lockstep's metadata aside)."""
    if reference.checkpoint is None or faulty.checkpoint is None:
        if reference.checkpoint is faulty.checkpoint:
            return []
        which = "without" if reference.checkpoint is None else "with"
        return [f"the run {which} faults ended with no checkpoint"]
    expected = _files(reference.checkpoint.path)
    got = _files(faulty.checkpoint.path)
    problems = [f"final checkpoint lacks {name}" for name in sorted(expected.keys() - got)]
    problems += [f"final checkpoint has an extra {name}" for name in sorted(got.keys() - expected)]
    for name in sorted(expected.keys() & got.keys()):
        if expected[name] != got[name]:
            problems.append(
                f"final checkpoint's {name} differs: {_first_difference(expected[name], got[name])}"
            )
    return problems


def _files(path: str) -> dict[str, bytes]:
    folder = StorageDir.from_uri(path)
    return {
        rel: folder.read_bytes(rel)
        for rel in _walk(folder, "")
        if rel.rsplit("/", 1)[-1] != METADATA_FILE
    }


def _walk(folder: StorageDir, prefix: str) -> Iterator[str]:
    for name in sorted(folder.listdir()):
        rel = f"{prefix}{name}"
        child = folder.child(name)
        if child.fs.isdir(child.path):
            yield from (f"{rel}/{sub}" for sub in _walk(child, ""))
        else:
            yield rel


def _first_difference(expected: bytes, got: bytes) -> str:
    if len(expected) != len(got):
        return f"{len(got)} bytes instead of {len(expected)}"
    at = next(i for i, (a, b) in enumerate(zip(expected, got, strict=True)) if a != b)
    return f"same size ({len(got)} bytes), first difference at byte {at}"


def compare_values(expected: list[Any], got: list[Any]) -> list[str]:
    """How the ranks' return values of two runs differ."""
    if len(expected) != len(got):
        return [f"{len(got)} ranks returned, not {len(expected)}"]
    return [
        f"rank {rank} returned {_short(b)} instead of {_short(a)}"
        for rank, (a, b) in enumerate(zip(expected, got, strict=True))
        if not _same(a, b)
    ]


def _same(a: Any, b: Any) -> bool:
    try:
        if pickle.dumps(a) == pickle.dumps(b):
            return True
    except Exception:
        pass
    try:
        return (a == b) is True
    except Exception:
        return False


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def record_problems(run_dir: str) -> list[str]:
    """What is wrong with the run's record: ``result.json`` and ``progress.csv`` must hold
    ``training_iteration`` 1..N, each once, in the same order."""
    folder = StorageDir.from_uri(run_dir)
    lines = [json.loads(line) for line in folder.read_text("result.json").splitlines() if line]
    rows = list(csv.DictReader(io.StringIO(folder.read_text("progress.csv"))))
    iterations = [int(row["training_iteration"]) for row in lines]
    problems = []
    if iterations != list(range(1, len(lines) + 1)):
        problems.append(f"result.json holds training_iteration {iterations}, not 1..N each once")
    table = [int(row["training_iteration"]) for row in rows]
    if table != iterations:
        problems.append(f"progress.csv holds training_iteration {table}, result.json {iterations}")
    return problems


def _unfired(faults: Sequence[Fault], run_dir: str) -> list[str]:
    fired = {(f["kind"], f["rank"], f["epoch"]) for f in fired_faults(run_dir)}
    return [
        f"{fault.name} never fired: rank {fault.rank} never reached epoch {fault.at_epoch}"
        for fault in faults
        if (fault.kind, fault.rank, fault.at_epoch) not in fired
    ]
