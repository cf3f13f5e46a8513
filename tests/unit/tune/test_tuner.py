"""The Tuner over function trainables: grids, schedulers, search algorithms, errors, state."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import pytest

from lockstep import train, tune
from lockstep.train import Checkpoint, DataParallelTrainer, FailureConfig, ScalingConfig
from lockstep.tune.schedulers import ASHAScheduler, MedianStoppingRule
from lockstep.tune.search import ConcurrencyLimiter, Repeater
from lockstep.tune.search.optuna import OptunaSearch
from tests.helpers import MostTrialsAtOnce, add_lr_to_a_score, pbt_every_two_iterations


def run(tmp_path, trainable, space, name="exp", **tune_config):
    return tune.Tuner(
        trainable,
        param_space=space,
        tune_config=tune.TuneConfig(**tune_config),
        run_config=tune.RunConfig(name=name, storage_path=str(tmp_path), verbose=0),
    ).fit()


def quadratic(config):
    for step in range(3):
        tune.report({"loss": (config["x"] - 3) ** 2 + step, "x": config["x"]})


def test_a_grid_of_three_values_gives_three_trials_with_the_exact_reported_values(tmp_path):
    results = run(tmp_path, quadratic, {"x": tune.grid_search([1, 2, 3])})
    assert len(results) == 3 and results.num_terminated == 3
    assert [r.config for r in results] == [{"x": 1}, {"x": 2}, {"x": 3}]
    assert [r.metrics["loss"] for r in results] == [6, 3, 2]
    assert [r.metrics["training_iteration"] for r in results] == [3, 3, 3]
    assert list(results[0].metrics_dataframe["loss"]) == [4, 5, 6]
    best = results.get_best_result(metric="loss", mode="min", scope="all")
    assert best.config == {"x": 3}
    assert os.path.isdir(best.path)
    # each trial's params.json holds its config, as Ray Tune's do
    for result in results:
        with open(os.path.join(result.path, "params.json")) as f:
            assert json.load(f) == result.config


def test_scopes_of_the_best_result(tmp_path):
    def trend(config):
        for value in config["values"]:
            tune.report({"m": value})

    space = {"values": tune.grid_search([[1, 9, 1], [5, 5, 5]])}
    results = run(tmp_path, trend, space)

    def best(scope):
        return results.get_best_result("m", "max", scope=scope).config["values"]

    assert best("last") == [5, 5, 5]
    assert best("all") == [1, 9, 1]
    assert best("avg") == [5, 5, 5]
    assert best("last-5-avg") == [5, 5, 5]
    frame = results.get_dataframe()
    assert list(frame["m"]) == [1, 5] and "config/values" in frame.columns


def test_asha_stops_the_worse_half_at_its_first_rung(tmp_path):
    def constant(config):
        for _ in range(2):
            tune.report({"acc": config["acc"]})

    order = [0.9, 0.4, 0.8, 0.3, 0.7, 0.2, 0.6, 0.1]
    results = run(
        tmp_path,
        constant,
        {"acc": tune.grid_search(order)},
        metric="acc",
        mode="max",
        max_concurrent_trials=1,
        scheduler=ASHAScheduler(grace_period=1, reduction_factor=2, max_t=2),
    )
    iterations = {r.config["acc"]: r.metrics["training_iteration"] for r in results}
    assert iterations == {0.9: 2, 0.8: 2, 0.7: 2, 0.6: 2, 0.4: 1, 0.3: 1, 0.2: 1, 0.1: 1}


def test_median_stopping_rule_stops_a_trial_below_the_median(tmp_path):
    def constant(config):
        for _ in range(3):
            tune.report({"acc": config["acc"]})

    rule = MedianStoppingRule(
        time_attr="training_iteration", grace_period=1, min_samples_required=2
    )
    results = run(
        tmp_path,
        constant,
        {"acc": tune.grid_search([0.9, 0.8, 0.1])},
        metric="acc",
        mode="max",
        max_concurrent_trials=1,
        scheduler=rule,
    )
    assert [r.metrics["training_iteration"] for r in results] == [3, 3, 1]


def test_a_trial_the_median_rule_pauses_ends_once_nothing_else_is_left(tmp_path):
    rule = MedianStoppingRule(
        time_attr="training_iteration", grace_period=1, min_samples_required=2, hard_stop=False
    )
    results = run(
        tmp_path,
        resumable_constant,
        {"acc": tune.grid_search([0.9, 0.8, 0.1])},
        metric="acc",
        mode="max",
        max_concurrent_trials=1,
        scheduler=rule,
    )
    assert [r.metrics["training_iteration"] for r in results] == [4, 4, 1]
    assert results.num_terminated == 3


def wait_for(path: Path) -> None:
    """Until ``path`` exists; a minute at most, after which the test's assertions say what
    did not happen."""
    deadline = time.monotonic() + 60.0
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.005)


def pbt_trainable_in_turn(config):
    """``add_lr_to_a_score`` for 6 steps, with the two trials kept in turn however their
    threads run: the bad one (lr 0.1) reports its 2nd step only after the good one (lr 10)
    reported its 2nd, so that it is ranked against it; the good one reports its 4th only
    once the bad one went on from its checkpoint, so that the donor's checkpoint has steps
    left after it (from a donor's 6th and last, the exploited trial has none to train)."""
    markers = Path(config["markers"])
    exploited = tune.get_checkpoint() is not None
    if exploited:
        (markers / "exploited").touch()

    def report(metrics, checkpoint):
        if metrics["step"] == 2 and config["lr"] == 0.1 and not exploited:
            wait_for(markers / "good-reported-2")
        if metrics["step"] == 4 and config["lr"] == 10.0 and not exploited:
            wait_for(markers / "exploited")
        tune.report(metrics, checkpoint=checkpoint)
        if metrics["step"] == 2 and config["lr"] == 10.0 and not exploited:
            (markers / "good-reported-2").touch()

    add_lr_to_a_score(config, tune.get_checkpoint, report, steps=6)


def test_pbt_replaces_a_bad_trials_config_and_resumes_from_the_donors_checkpoint(tmp_path):
    pbt = pbt_every_two_iterations({"lr": [0.1, 1.0, 10.0]})
    markers = tmp_path / "markers"
    markers.mkdir()
    results = run(
        tmp_path,
        pbt_trainable_in_turn,
        {"lr": tune.grid_search([10.0, 0.1]), "markers": str(markers)},
        metric="score",
        mode="max",
        scheduler=pbt,
    )
    assert pbt.num_perturbations >= 1
    bad = results[1]
    frame = bad.metrics_dataframe
    assert frame["lr"].iloc[0] == 0.1
    assert bad.config["lr"] in (1.0, 10.0)  # the donor's 10.0, perturbed one step
    # after the exploit it went on from the donor's state (score 10 per step), which its
    # own lr of 0.1 could never reach
    jumped = frame[frame["lr"] != 0.1].iloc[0]
    assert jumped["score"] > 10.0 and jumped["step"] >= 2


def test_optuna_search_finds_the_minimum_of_a_quadratic(tmp_path):
    def objective(config):
        tune.report({"loss": (config["x"] - 2.0) ** 2 + (config["y"] + 1.0) ** 2})

    search = OptunaSearch(seed=0, points_to_evaluate=[{"x": 0.0, "y": 0.0}])
    results = run(
        tmp_path,
        objective,
        {"x": tune.uniform(-5, 5), "y": tune.uniform(-5, 5)},
        metric="loss",
        mode="min",
        search_alg=search,
        num_samples=60,
    )
    assert len(results) == 60
    assert results[0].config == {"x": 0.0, "y": 0.0}
    best = results.get_best_result()
    assert best.metrics["loss"] < 0.3
    assert abs(best.config["x"] - 2.0) < 0.6 and abs(best.config["y"] + 1.0) < 0.6
    import optuna

    study = optuna.load_study(study_name="lockstep", storage=f"sqlite:///{tmp_path}/exp/optuna.db")
    assert len(study.trials) == 60


@pytest.mark.parametrize("sampler", ["random", "cmaes", "grid"])
def test_optuna_samplers(tmp_path, sampler):
    import optuna

    samplers = {
        "random": optuna.samplers.RandomSampler(seed=0),
        "cmaes": optuna.samplers.CmaEsSampler(seed=0),
        "grid": optuna.samplers.GridSampler({"x": [-1.0, 0.0, 1.0]}),
    }

    def objective(config):
        tune.report({"loss": config["x"] ** 2})

    results = run(
        tmp_path,
        objective,
        {"x": tune.uniform(-2, 2)},
        metric="loss",
        mode="min",
        search_alg=OptunaSearch(sampler=samplers[sampler]),
        num_samples=3,
    )
    assert len(results) == 3
    if sampler == "grid":
        assert sorted(r.config["x"] for r in results) == [-1.0, 0.0, 1.0]


def test_an_erroring_trial_is_in_errors_and_the_others_finish(tmp_path):
    def objective(config):
        if config["x"] == 2:
            raise RuntimeError("boom at 2")
        tune.report({"x": config["x"]})

    results = run(tmp_path, objective, {"x": tune.grid_search([1, 2, 3])})
    assert results.num_errors == 1 and results.num_terminated == 2
    assert "boom at 2" in str(results.errors[0])
    assert [r.metrics.get("x") for r in results] == [1, None, 3]
    assert results[1].error is not None


def test_stop_dict_and_returned_dicts_and_search_spaces(tmp_path):
    def objective(config):
        for i in range(10):
            tune.report({"i": i, "b": config["nested"]["b"]})

    space = {
        "nested": {"b": tune.randint(1, 9), "c": 5},
        "u": tune.quniform(0, 10, 5),
        "l": tune.loguniform(1e-4, 1e-1),
        "q": tune.qloguniform(1, 100, 1),
        "n": tune.randn(0, 1),
        "qn": tune.qrandn(0, 10, 2),
        "qi": tune.qrandint(0, 10, 5),
        "li": tune.lograndint(1, 100),
        "qli": tune.qlograndint(10, 100, 10),
        "s": tune.sample_from(lambda spec: spec.config.nested.b * 2),
        "ch": tune.choice(["a", "b"]),
    }
    results = tune.Tuner(
        objective,
        param_space=space,
        tune_config=tune.TuneConfig(num_samples=4),
        run_config=tune.RunConfig(name="s", storage_path=str(tmp_path), verbose=0, stop={"i": 3}),
    ).fit()
    for r in results:
        c = r.config
        assert r.metrics["i"] == 3
        assert (
            1 <= c["nested"]["b"] < 9 and c["nested"]["c"] == 5 and c["s"] == 2 * c["nested"]["b"]
        )
        assert c["u"] in (0, 5, 10) and c["qi"] in (0, 5, 10) and c["qli"] % 10 == 0
        assert 1e-4 <= c["l"] <= 1e-1 and c["ch"] in ("a", "b") and c["qn"] % 2 == 0


def test_callbacks_see_every_trial_event(tmp_path):
    events = []

    class Recorder(tune.Callback):
        def on_trial_start(self, iteration, trials, trial, **info):
            events.append(("start", trial.config["x"]))

        def on_trial_result(self, iteration, trials, trial, result, **info):
            events.append(("result", trial.config["x"]))

        def on_trial_complete(self, iteration, trials, trial, **info):
            events.append(("complete", trial.config["x"]))

        def on_trial_error(self, iteration, trials, trial, **info):
            events.append(("error", trial.config["x"]))

        def on_experiment_end(self, trials, **info):
            events.append(("end", len(trials)))

    def objective(config):
        tune.report({"x": config["x"]})
        if config["x"] == 2:
            raise ValueError("no")

    tune.Tuner(
        objective,
        param_space={"x": tune.grid_search([1, 2])},
        tune_config=tune.TuneConfig(max_concurrent_trials=1),
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0, callbacks=[Recorder()]),
    ).fit()
    assert events == [
        ("start", 1),
        ("result", 1),
        ("complete", 1),
        ("start", 2),
        ("result", 2),
        ("error", 2),
        ("end", 2),
    ]


def test_limiter_repeater_with_parameters_and_context(tmp_path):
    def objective(config, offset=0):
        ctx = tune.get_context()
        tune.report({"v": config["x"] + offset, "id": ctx.get_trial_id()})

    search = Repeater(ConcurrencyLimiter(OptunaSearch(seed=1), max_concurrent=1), repeat=2)
    results = run(
        tmp_path,
        tune.with_parameters(objective, offset=100),
        {"x": tune.uniform(0, 1)},
        metric="v",
        mode="max",
        search_alg=search,
        num_samples=4,
    )
    configs = [r.config for r in results]
    assert [c["__trial_index__"] for c in configs] == [0, 1, 0, 1]
    assert configs[0]["x"] == configs[1]["x"] and all(r.metrics["v"] >= 100 for r in results)
    assert [r.metrics["id"] for r in results] == [r.metrics["trial_id"] for r in results]


def test_a_new_tuner_never_overwrites_a_finished_experiment(tmp_path):
    run(tmp_path, quadratic, {"x": 1})
    before = (tmp_path / "exp" / "experiment_state.pkl").read_bytes()
    with pytest.raises(ValueError, match=r"Tuner\.restore"):
        run(tmp_path, quadratic, {"x": 2})
    assert (tmp_path / "exp" / "experiment_state.pkl").read_bytes() == before
    restored = tune.Tuner.restore(str(tmp_path / "exp"), trainable=quadratic)
    assert [r.config for r in restored.get_results()] == [{"x": 1}]


def test_plain_lines_when_not_a_tty_and_silence_at_verbose_0(tmp_path, capfd):
    tune.Tuner(
        quadratic,
        param_space={"x": 1},
        run_config=tune.RunConfig(name="a", storage_path=str(tmp_path)),
    ).fit()
    err = capfd.readouterr().err
    assert "TERMINATED" in err and "done: 1 trials" in err
    run(tmp_path, quadratic, {"x": 1}, name="b")
    assert capfd.readouterr().err == ""


def resumable_constant(config):
    step = 0
    if checkpoint := tune.get_checkpoint():
        with checkpoint.as_directory() as d, open(os.path.join(d, "step")) as f:
            step = int(f.read())
    while step < 4:
        step += 1
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "step"), "w") as f:
                f.write(str(step))
            tune.report({"acc": config["acc"]}, checkpoint=Checkpoint.from_directory(d))


def test_hyperband_pauses_at_milestones_and_keeps_the_best_half(tmp_path):
    from lockstep.tune.schedulers import HyperBandScheduler

    # max_t=2, halving: the first bracket runs 2 trials to 2, the second halves 2 at 1.
    results = run(
        tmp_path,
        resumable_constant,
        {"acc": tune.grid_search([0.9, 0.1, 0.8, 0.2])},
        metric="acc",
        mode="max",
        max_concurrent_trials=1,
        scheduler=HyperBandScheduler(max_t=2, reduction_factor=2),
    )
    iterations = {r.config["acc"]: r.metrics["training_iteration"] for r in results}
    assert iterations == {0.9: 2, 0.1: 2, 0.8: 2, 0.2: 1}
    assert results.num_terminated == 4
    # 0.8 paused at 1 until 0.2 got there, then went on from its checkpoint
    assert list(results[2].metrics_dataframe["training_iteration"]) == [1, 2]


def test_time_budget_and_stopper_end_the_experiment(tmp_path):
    class AfterTwoResults(tune.Stopper):
        def __init__(self):
            self.seen = 0

        def __call__(self, trial_id, result):
            self.seen += 1
            return False

        def stop_all(self):
            return self.seen >= 2

    def endless(config):
        while True:
            tune.report({"x": 1})

    results = tune.Tuner(
        endless,
        param_space={"a": tune.grid_search([1, 2, 3])},
        tune_config=tune.TuneConfig(max_concurrent_trials=1),
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0, stop=AfterTwoResults()),
    ).fit()
    assert len(results) == 1 and results[0].metrics["training_iteration"] == 2


def test_config_errors_carry_a_hint():
    with pytest.raises(ValueError, match="HINT"):
        tune.TuneConfig(scheduler="asha")
    with pytest.raises(ValueError, match="HINT"):
        tune.RunConfig(stop=3)
    with pytest.raises(ValueError, match="grid_search cannot"):
        OptunaSearch().set_search_properties("m", "min", {"x": tune.grid_search([1])})


def test_function_trials_keep_num_to_keep_checkpoints_by_score(tmp_path):
    from lockstep.train import CheckpointConfig

    def scored(config):
        for loss in [5.0, 1.0, 3.0, 4.0]:
            with tempfile.TemporaryDirectory() as d:
                tune.report({"loss": loss}, checkpoint=Checkpoint.from_directory(d))

    keep = CheckpointConfig(
        num_to_keep=1, checkpoint_score_attribute="loss", checkpoint_score_order="min"
    )
    result = tune.Tuner(
        scored,
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0, checkpoint_config=keep),
    ).fit()[0]
    kept = sorted(p.name for p in (tmp_path / os.listdir(tmp_path)[0]).glob("*/checkpoint_*"))
    # the best (loss 1.0, the second) and the latest, which a restart resumes from
    assert kept == ["checkpoint_000001", "checkpoint_000003"]
    assert os.path.basename(result.checkpoint.path) == "checkpoint_000003"


def test_restore_resumes_errored_trials_when_asked(tmp_path):
    marker = tmp_path / "failed-once"

    def flaky(config):
        tune.report({"x": config["x"]})
        if config["x"] == 1 and not marker.exists():
            marker.touch()
            raise RuntimeError("first time")

    names = {}

    def name_it(trial):
        names[trial.trial_id] = f"t{trial.config['x']}"
        return names[trial.trial_id]

    run_config = tune.RunConfig(name="e", storage_path=str(tmp_path / "runs"), verbose=0)
    first = tune.Tuner(
        flaky,
        param_space={"x": tune.grid_search([0, 1])},
        tune_config=tune.TuneConfig(trial_dirname_creator=name_it),
        run_config=run_config,
    ).fit()
    assert first.num_errors == 1
    assert {"t0", "t1"} <= set(os.listdir(tmp_path / "runs" / "e"))
    path = str(tmp_path / "runs" / "e")
    kept = tune.Tuner.restore(path, trainable=flaky).get_results()
    assert kept.num_errors == 1 and "first time" in str(kept.errors[0])
    again = tune.Tuner.restore(path, trainable=flaky, resume_errored=True).fit()
    assert again.num_errors == 0 and again.num_terminated == 2


def test_run_configs_take_tune_callbacks_and_the_older_dict_form():
    from lockstep.train import RunConfig as TrainRunConfig

    callback = tune.Callback()
    assert TrainRunConfig(callbacks=[callback]).callbacks == (callback,)
    older = TrainRunConfig.coerce({"max_actor_restarts": 2, "name": "x"})
    assert older.failure_config.max_failures == 2 and older.name == "x"
    with pytest.raises(ValueError, match="HINT"):
        TrainRunConfig.coerce({"nope": 1})


def test_an_interrupted_optuna_experiment_resumes_and_its_study_holds_every_trial(tmp_path):
    import optuna

    runs = []

    class Interrupt(tune.Callback):
        def on_trial_complete(self, iteration, trials, trial, **info):
            if len(runs) == 3:
                raise KeyboardInterrupt

    def objective(config):
        runs.append(config["x"])
        tune.report({"loss": config["x"] ** 2})

    tuner = tune.Tuner(
        objective,
        param_space={"x": tune.uniform(-1, 1)},
        tune_config=tune.TuneConfig(
            metric="loss",
            mode="min",
            num_samples=8,
            max_concurrent_trials=1,
            search_alg=OptunaSearch(seed=0),
        ),
        run_config=tune.RunConfig(
            name="x", storage_path=str(tmp_path), verbose=0, callbacks=[Interrupt()]
        ),
    )
    with pytest.raises(KeyboardInterrupt):
        tuner.fit()
    first = list(runs)
    results = tune.Tuner.restore(str(tmp_path / "x"), trainable=objective).fit()
    assert len(results) == 8 and results.num_terminated == 8
    assert len(runs) == 8 and runs[:3] == first  # the 3 finished trials did not run again
    study = optuna.load_study(study_name="lockstep", storage=f"sqlite:///{tmp_path}/x/optuna.db")
    assert sorted(t.params["x"] for t in study.trials) == sorted(r.config["x"] for r in results)


def test_the_trial_table_renders_every_trial():
    from rich.console import Console

    from lockstep._core import storage
    from lockstep.tune._progress import TrialTable
    from lockstep.tune._trial import TuneTrial

    trial = TuneTrial(
        trial_id="abc_00000",
        config={"lr": 0.1},
        dirname="t",
        experiment_dir=storage.StorageDir.from_uri("/nonexistent"),
        experiment_tag="0_lr=0.1",
        resources={"CPU": 1},
    )
    trial.status, trial.last_result = "RUNNING", {"loss": 0.25, "training_iteration": 7}
    table = TrialTable(name="exp", path="/tmp/exp", metric="loss", verbose=1)
    table._trials = [trial]
    console = Console(record=True, width=120)
    console.print(table._table())
    text = console.export_text()
    assert "abc_00000" in text and "RUNNING" in text and "0_lr=0.1" in text
    assert "0.25" in text and "7" in text and "exp: 1 RUNNING" in text


def test_trials_are_admitted_by_the_cpus_they_ask_for(tmp_path):
    from lockstep.tune._resources import machine_resources

    concurrency = MostTrialsAtOnce()

    def objective(config):
        for _ in range(3):
            tune.report({"cpus": tune.get_context().get_trial_resources()["CPU"]})

    cpus = machine_resources()["CPU"]
    results = tune.Tuner(
        tune.with_resources(objective, {"cpu": cpus}),
        param_space={"x": tune.grid_search([1, 2, 3])},
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0, callbacks=[concurrency]),
    ).fit()
    assert concurrency.most == 1 and [r.metrics["cpus"] for r in results] == [cpus] * 3
    gpus = machine_resources()["GPU"]
    with pytest.raises(ValueError, match="HINT"):
        tune.Tuner(
            tune.with_resources(objective, {"gpu": gpus + 1}),
            run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0),
        ).fit()


def test_the_time_budget_stops_running_trials_and_starts_no_more(tmp_path):
    def endless(config):
        while True:
            tune.report({"x": config["x"]})

    results = run(
        tmp_path,
        endless,
        {"x": tune.grid_search([1, 2, 3])},
        max_concurrent_trials=1,
        time_budget_s=0.2,
    )
    assert len(results) == 1 and results.num_terminated == 1
    assert results[0].metrics["training_iteration"] >= 1


def test_a_trainer_trials_failure_config_is_applied_once(tmp_path):
    """The trial's run restarts as its FailureConfig says; the Tuner runs it no more."""
    attempts = tmp_path / "attempts"

    def always_fails(config):
        with open(attempts, "a") as f:
            f.write("attempt\n")
        train.report({"x": 1})
        raise RuntimeError("broken")

    trainer = DataParallelTrainer(always_fails, scaling_config=ScalingConfig(num_workers=0))
    results = tune.Tuner(
        trainer,
        run_config=tune.RunConfig(
            name="once",
            storage_path=str(tmp_path),
            verbose=0,
            failure_config=FailureConfig(max_failures=2),
        ),
    ).fit()
    assert attempts.read_text().count("attempt") == 3  # 1 + max_failures, not (1 + 2) ** 2
    assert results.num_errors == 1 and "broken" in str(results.errors[0])
    (result,) = results
    with open(os.path.join(result.path, "run_state.json")) as f:
        state = json.load(f)
    assert state["num_failures"] == 3 and state["status"] == "errored"
    with open(os.path.join(result.path, "error.txt")) as f:
        assert "broken" in f.read()


class FailAfterFinished(tune.Callback):
    """Ray's tests' StopperCallback: raises in on_step_begin once n trials finished."""

    def __init__(self, fail_after_finished):
        self.fail_after_finished = fail_after_finished

    def on_step_begin(self, iteration, trials, **info):
        finished = [t for t in trials if t.status == "TERMINATED"]
        if len(finished) == self.fail_after_finished:
            raise RuntimeError(f"Failing after {len(finished)} finished trials.")


def test_an_exception_in_on_step_begin_ends_fit_and_restore_runs_the_rest(tmp_path):
    log = tmp_path / "ran"

    def objective(config):
        with open(log, "a") as f:
            f.write(f"{config['x']}\n")
        tune.report({"score": config["x"]})

    run_config = tune.RunConfig(
        name="interrupted",
        storage_path=str(tmp_path),
        verbose=0,
        callbacks=[FailAfterFinished(1)],
    )
    tuner = tune.Tuner(
        objective,
        param_space={"x": tune.grid_search([1, 2, 3])},
        tune_config=tune.TuneConfig(max_concurrent_trials=1),
        run_config=run_config,
    )
    with pytest.raises(RuntimeError, match="Failing after 1 finished trials"):
        tuner.fit()
    assert log.read_text().split() == ["1"]
    results = tune.Tuner.restore(str(tmp_path / "interrupted"), trainable=objective).fit()
    assert sorted(r.metrics["score"] for r in results) == [1, 2, 3]
    assert sorted(log.read_text().split()) == ["1", "2", "3"]  # the finished one ran once


def test_tune_run_returns_the_analysis_and_raises_on_failed_trials(tmp_path):
    def objective(config):
        if config["x"] == 3:
            raise ValueError("three is bad")
        tune.report({"loss": (config["x"] - 2) ** 2})

    space = {"x": tune.grid_search([1, 2, 3])}
    with pytest.raises(tune.TuneError, match="Trials did not complete"):
        tune.run(objective, config=space, storage_path=str(tmp_path), name="a", verbose=0)
    analysis = tune.run(
        objective,
        config=space,
        metric="loss",
        mode="min",
        storage_path=str(tmp_path),
        name="b",
        verbose=0,
        raise_on_failed_trial=False,
    )
    assert analysis.best_config == {"x": 2} and analysis.best_result["loss"] == 0
    assert sorted(analysis.results_df["loss"].dropna()) == [0, 1]
    assert [t.status for t in analysis.trials].count("ERROR") == 1
    assert analysis.experiment_path.endswith("/b")


def test_tune_run_resumes_an_experiment_of_the_same_name(tmp_path):
    ran = []

    def objective(config):
        ran.append(config["x"])
        tune.report({"x": config["x"]})

    space = {"x": tune.grid_search([1, 2])}
    tune.run(objective, config=space, storage_path=str(tmp_path), name="again", verbose=0)
    analysis = tune.run(
        objective, config=space, storage_path=str(tmp_path), name="again", verbose=0, resume=True
    )
    assert sorted(ran) == [1, 2] and len(analysis.trials) == 2  # the finished ones ran once


def test_a_tuner_given_no_run_config_uses_the_trainers(tmp_path):
    def step(config):
        train.report({"lr": config["lr"]})

    trainer = DataParallelTrainer(
        step,
        train_loop_config={"lr": 0.0},
        scaling_config=ScalingConfig(num_workers=0),
        run_config=train.RunConfig(name="from_trainer", storage_path=str(tmp_path), verbose=0),
    )
    results = tune.Tuner(
        trainer, param_space={"train_loop_config": {"lr": tune.grid_search([0.1, 0.2])}}
    ).fit()
    assert results.experiment_path == str(tmp_path / "from_trainer")
    assert sorted(r.metrics["lr"] for r in results) == [0.1, 0.2]


def test_the_last_hyperband_bracket_is_halved_though_it_is_not_full(tmp_path):
    from lockstep.tune.schedulers import HyperBandScheduler

    # 10 trials, max_t=9: the last bracket gets 2; once the search has given its last
    # trial, HyperBand halves them rather than stopping both at their first milestone.
    results = run(
        tmp_path,
        resumable_constant,
        {"acc": tune.grid_search([i / 10 for i in range(10)])},
        metric="acc",
        mode="max",
        max_concurrent_trials=1,
        scheduler=HyperBandScheduler(max_t=9),
    )
    iterations = {r.config["acc"]: r.metrics["training_iteration"] for r in results}
    assert iterations[0.9] > iterations[0.8] > 1


def test_tune_run_takes_a_trainer_as_its_trainable(tmp_path):
    def step(config):
        train.report({"lr": config["lr"]})

    trainer = DataParallelTrainer(
        step, train_loop_config={"lr": 0.0}, scaling_config=ScalingConfig(num_workers=0)
    )
    analysis = tune.run(
        trainer.as_trainable(),
        config={"train_loop_config": {"lr": tune.grid_search([0.1, 0.3])}},
        metric="lr",
        mode="max",
        storage_path=str(tmp_path),
        verbose=0,
    )
    assert analysis.best_config == {"train_loop_config": {"lr": 0.3}}
