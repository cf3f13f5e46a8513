"""OptunaSearch: Ray Tune's Optuna searcher, on Optuna's ask/tell interface.

The study lives in memory while the experiment runs (Optuna's SQL storage costs tens of
milliseconds per trial); the Tuner writes its finished trials into ``optuna.db`` in the
experiment directory when the experiment ends (or is interrupted), so the study can be
opened with ``optuna.load_study`` afterwards.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from lockstep.tune._search_space import Domain, is_grid
from lockstep.tune._variants import set_path, walk
from lockstep.tune.search._searcher import Searcher

SEP = "/"
STUDY_NAME = "lockstep"


class OptunaSearch(Searcher):
    """Suggests configs with an Optuna sampler (TPE by default) through ``ask``/``tell``.

    Args:
        space: The search space: Tune domains or Optuna distributions by name (nested
            dicts allowed). Default: the Tuner's ``param_space``.
        metric: The metric to optimise (default: ``TuneConfig.metric``).
        mode: ``"min"`` or ``"max"`` (default: ``TuneConfig.mode``).
        points_to_evaluate: Configs to try first (``study.enqueue_trial``).
        sampler: An Optuna sampler: ``TPESampler``, ``RandomSampler``, ``CmaEsSampler``,
            ``GridSampler``, ... Default: ``TPESampler(seed=seed)``.
        seed: Seed of the default sampler.
        evaluated_rewards: Scores of ``points_to_evaluate`` already known; they are added
            to the study as finished trials instead of being run.

    Example:
        >>> from lockstep import tune
        >>> search = OptunaSearch(metric="loss", mode="min", seed=0)
        >>> search.set_search_properties(None, None, {"x": tune.uniform(-1, 1), "k": 3})
        True
        >>> config = search.suggest("t0")
        >>> -1 <= config["x"] <= 1, config["k"]
        (True, 3)
        >>> search.on_trial_complete("t0", {"loss": config["x"] ** 2})
    """

    # Optuna's sampler costs as much CPU per trial as a trivial trial: while an experiment
    # runs, the study is kept in a process of its own (see search/_process.py).
    runs_apart = True

    def __init__(
        self,
        space: Mapping[str, Any] | None = None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: Sequence[Mapping[str, Any]] | None = None,
        sampler: Any = None,
        seed: int | None = None,
        evaluated_rewards: Sequence[float] | None = None,
    ) -> None:
        super().__init__(metric, mode)
        self._space = dict(space) if space is not None else None
        self._points = [dict(p) for p in points_to_evaluate or []]
        self._sampler = sampler
        self._seed = seed
        self._rewards = list(evaluated_rewards) if evaluated_rewards is not None else None
        if self._rewards is not None and len(self._rewards) != len(self._points):
            raise ValueError(
                "evaluated_rewards must have one score per point of points_to_evaluate. "
                "HINT: pass as many rewards as points"
            )
        self._distributions: dict[str, Any] = {}
        self._constants: dict[str, Any] = {}
        self._study: Any = None
        # Asked trials by the Tuner's key: their numbers (kept across a restore, so that a
        # trial run again is told to the same Optuna trial), and the live objects.
        self._live: dict[str, int] = {}
        self._objects: dict[str, Any] = {}
        self._exhausted = False
        if self._space is not None:
            _flatten_space(self._space)  # a space Optuna cannot take fails here, at once

    def set_search_properties(
        self, metric: str | None, mode: str | None, config: dict[str, Any], **spec: Any
    ) -> bool:
        super().set_search_properties(metric, mode, config)
        if self._study is None:
            self._setup(self._space if self._space is not None else config)
        return True

    @property
    def study(self) -> Any:
        """The ``optuna.Study`` (None until the metric, the mode and the space are known:
        the Tuner gives them, or the first ``suggest``)."""
        return self._study

    def _setup(self, space: Mapping[str, Any]) -> None:
        """The study, which optimises in the direction of ``mode``: so created only once
        the Tuner has given its mode."""
        import optuna

        if self._metric is None or self._mode is None:
            raise ValueError(
                f"OptunaSearch needs a metric and a mode, got metric={self._metric!r}, "
                f"mode={self._mode!r}. HINT: pass metric= and mode= to OptunaSearch or to "
                "TuneConfig"
            )
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._distributions, self._constants = _flatten_space(space)
        sampler = self._sampler or optuna.samplers.TPESampler(seed=self._seed)
        direction: Any = "maximize" if self._mode == "max" else "minimize"
        self._study = optuna.create_study(
            study_name=STUDY_NAME, direction=direction, sampler=sampler
        )
        for index, point in enumerate(self._points):
            flat = {SEP.join(p): v for p, v in walk(point)}
            if self._rewards is None:
                self._study.enqueue_trial(flat)
            else:
                self._study.add_trial(
                    optuna.trial.create_trial(
                        params=flat,
                        distributions={k: self._distributions[k] for k in flat},
                        value=self._rewards[index],
                    )
                )

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if self._study is None and self._space is not None:
            self._setup(self._space)
        if self._study is None:
            raise RuntimeError(
                "OptunaSearch has no search space. HINT: pass param_space to the Tuner or "
                "space= to OptunaSearch"
            )
        trial = self._objects.get(trial_id)  # asked again for the same trial: the same
        if trial is None:
            trial = self._study.ask(fixed_distributions=self._distributions)
            self._live[trial_id] = trial.number
            self._objects[trial_id] = trial
        config: dict[str, Any] = {}
        for path, value in walk(self._constants):
            set_path(config, path, value)
        for name, value in trial.params.items():
            set_path(config, tuple(name.split(SEP)), value)
        return config

    def restore_trial(self, trial_id: str, config: dict[str, Any]) -> None:
        """Ask again for a trial asked after the saved state, with its params."""
        params = {
            SEP.join(path): value
            for path, value in walk(config)
            if SEP.join(path) in self._distributions
        }
        self._study.enqueue_trial(params)
        trial = self._study.ask(fixed_distributions=self._distributions)
        self._live[trial_id] = trial.number
        self._objects[trial_id] = trial

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        trial = self._objects.get(trial_id)
        value = _score(result, self._metric)
        step = result.get("training_iteration")
        if trial is not None and value is not None and isinstance(step, int):
            trial.report(value, step)

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        import optuna

        trial = self._live.pop(trial_id, None)
        self._objects.pop(trial_id, None)
        if trial is None:
            return
        reported = result is not None and self._metric is not None and self._metric in result
        value = _score(result, self._metric)
        try:
            if value is not None:
                self._study.tell(trial, value)
            elif reported or error:  # an error, or a metric that is not a number (NaN)
                self._study.tell(trial, state=optuna.trial.TrialState.FAIL)
            else:  # ended without the metric: stopped before it reported one
                self._study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        except RuntimeError as exc:
            # GridSampler stops the study when its grid is done, which Optuna allows only
            # inside optimize(); the trial is recorded by then.
            if "Study.stop" not in str(exc):
                raise
            self._exhausted = True

    def is_finished(self) -> bool:
        return self._exhausted

    def save_to_sqlite(self, path: str) -> None:
        """Write the study's finished trials into the SQLite file ``path``, replacing it
        whole (``optuna.load_study(study_name="lockstep", storage=f"sqlite:///{path}")``).

        The file is built next to ``path`` and renamed over it once whole, so that a
        driver killed meanwhile leaves the previous copy: no journal and no flush per
        transaction are needed (the Tuner syncs the filesystem before its snapshot).
        """
        if self._study is None:
            return
        finished = [t for t in self._study.get_trials(deepcopy=False) if t.state.is_finished()]
        template, study_id = _study_database(self._study.direction)
        tmp = f"{path}.tmp-{os.getpid()}"
        try:
            with open(tmp, "wb") as f:
                f.write(template)
            _add_trials(tmp, study_id, finished)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_objects"] = {}
        return state


_TEMPLATES: dict[Any, tuple[bytes, int]] = {}


def _study_database(direction: Any) -> tuple[bytes, Any]:
    """An SQLite file with Optuna's tables and the study ``"lockstep"`` optimising in
    ``direction``, and the study's id; made once per process and direction.

    Creating the tables and the study costs Optuna about half a second; copying the file
    costs nothing.
    """
    if direction not in _TEMPLATES:
        import tempfile

        import optuna

        with tempfile.TemporaryDirectory(prefix="lockstep-optuna-") as tmp:
            path = os.path.join(tmp, "study.db")
            storage = optuna.storages.RDBStorage(f"sqlite:///{path}")
            try:
                study = optuna.create_study(
                    storage=storage, study_name=STUDY_NAME, direction=direction
                )
                study_id = study._study_id
            finally:
                storage.engine.dispose()
            with open(path, "rb") as f:
                _TEMPLATES[direction] = (f.read(), study_id)
    return _TEMPLATES[direction]


def _add_trials(path: str, study_id: int, trials: list[Any]) -> None:
    """Insert ``trials`` into the study of the SQLite file ``path``, a copy that nobody
    reads until it is whole: without a journal, and without a flush per transaction."""
    try:
        with _SQLITE.lock:
            _SQLITE.path = path
            _bulk_add(_SQLITE.engine(), study_id, trials)
    except Exception:
        import optuna  # Optuna's own path, one transaction per trial

        storage = optuna.storages.RDBStorage(
            f"sqlite:///{path}", skip_table_creation=True, skip_compatibility_check=True
        )
        try:
            study = optuna.load_study(study_name=STUDY_NAME, storage=storage)
            study.add_trials(trials)
        finally:
            storage.engine.dispose()


class _SqliteFiles:
    """One SQLAlchemy engine for every copy of a study, each connection to the file of the
    copy being written (``path``): SQLAlchemy caches its compiled statements per engine,
    so that the second copy costs half the first."""

    def __init__(self) -> None:
        import threading

        self.lock = threading.Lock()
        self.path = ""
        self._engine: Any = None

    def engine(self) -> Any:
        if self._engine is None:
            import sqlalchemy
            from sqlalchemy.pool import NullPool

            self._engine = sqlalchemy.create_engine(
                "sqlite://", creator=self._connect, poolclass=NullPool
            )
        return self._engine

    def _connect(self) -> Any:
        import sqlite3

        conn = sqlite3.connect(self.path, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=OFF")
        conn.execute("PRAGMA synchronous=OFF")
        return conn


_SQLITE = _SqliteFiles()


def _bulk_add(engine: Any, study_id: int, trials: list[Any]) -> None:
    """Insert finished trials in one transaction, three statements in all, into Optuna's
    tables (through its SQL models, so that column names follow its version).

    ``Study.add_trials`` commits once per trial, about 40 ms each on a small machine.
    """
    from optuna.distributions import distribution_to_json
    from optuna.storages._rdb import models
    from sqlalchemy import func, insert, select

    trial_rows, param_rows, value_rows = [], [], []
    with engine.begin() as conn:
        first_id = (conn.execute(select(func.max(models.TrialModel.trial_id))).scalar() or 0) + 1
        number = conn.execute(
            select(func.count()).where(models.TrialModel.study_id == study_id)
        ).scalar()
        for offset, trial in enumerate(trials):
            trial_id = first_id + offset
            trial_rows.append(
                {
                    "trial_id": trial_id,
                    "number": number + offset,
                    "study_id": study_id,
                    "state": trial.state,
                    "datetime_start": trial.datetime_start,
                    "datetime_complete": trial.datetime_complete,
                }
            )
            for name, value in trial.params.items():
                distribution = trial.distributions[name]
                param_rows.append(
                    {
                        "trial_id": trial_id,
                        "param_name": name,
                        "param_value": distribution.to_internal_repr(value),
                        "distribution_json": distribution_to_json(distribution),
                    }
                )
            for objective, value in enumerate(trial.values or []):
                stored, kind = models.TrialValueModel.value_to_stored_repr(value)
                value_rows.append(
                    {
                        "trial_id": trial_id,
                        "objective": objective,
                        "value": stored,
                        "value_type": kind,
                    }
                )
        for model, rows in (
            (models.TrialModel, trial_rows),
            (models.TrialParamModel, param_rows),
            (models.TrialValueModel, value_rows),
        ):
            if rows:
                conn.execute(insert(model), rows)


def _score(result: Mapping[str, Any] | None, metric: str | None) -> float | None:
    if result is None or metric is None or metric not in result:
        return None
    value = result[metric]
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return None
    return float(value)


def _flatten_space(space: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Optuna distributions by ``"a/b"`` name, and the constants as a nested dict."""
    import optuna

    distributions: dict[str, Any] = {}
    constants: dict[str, Any] = {}
    for path, value in walk(space):
        name = SEP.join(path)
        if is_grid(value):
            raise ValueError(
                f"{name}: grid_search cannot be used with OptunaSearch. HINT: use "
                "tune.choice([...]), or OptunaSearch(sampler=optuna.samplers.GridSampler(...))"
            )
        if isinstance(value, Domain):
            distributions[name] = value.to_optuna()
        elif isinstance(value, optuna.distributions.BaseDistribution):
            distributions[name] = value
        else:
            set_path(constants, path, value)
    return distributions, constants
