"""Tune trials that start processes: trainer trials with their own workers, resource
scheduling, stopping trainer trials, and restore after the driver is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import optuna
import pytest

import lockstep.data as ld
from lockstep import train, tune
from lockstep.data.preprocessors import MinMaxScaler, StandardScaler
from lockstep.train import DataParallelTrainer, FailureConfig, ScalingConfig
from tests.helpers import (
    MostTrialsAtOnce,
    add_lr_to_a_score,
    fit_acc_trials_one_at_a_time_under_asha,
    pbt_every_two_iterations,
    worker_processes,
)


def shard_stats(config):
    shard = train.get_dataset_shard("train")
    xs = [row["x"] for row in shard.iter_rows()]
    train.report(
        {
            "world_size": train.get_context().get_world_size(),
            "min_x": min(xs),  # rank 0 holds the first rows
            "lr": config["lr"],
        }
    )


def make_trainer(**kwargs):
    rows = [{"x": float(i)} for i in range(8)]
    return DataParallelTrainer(
        shard_stats,
        train_loop_config={"lr": 0.0},
        datasets={"train": ld.from_items(rows)},
        **kwargs,
    )


def test_trainer_trials_run_with_their_own_scaling_config_and_preprocessor(tmp_path):
    space = {
        "scaling_config": ScalingConfig(num_workers=1),
        "preprocessor": tune.grid_search([MinMaxScaler(["x"]), StandardScaler(["x"])]),
        "train_loop_config": {"lr": tune.grid_search([0.1, 0.2])},
    }
    # the older form: run_config as a dict, name= and the datasets given to fit()
    trainer = make_trainer(run_config=train.RunConfig(failure_config=FailureConfig(max_failures=2)))
    results = tune.Tuner(
        trainer,
        param_space={
            **space,
            "scaling_config": {"num_actors": tune.grid_search([1, 2]), "cpus_per_actor": 0.5},
        },
        run_config={"storage_path": str(tmp_path), "verbose": 0},
        name="older",
    ).fit()
    assert len(results.results) == 8 and results.num_errors == 0
    for result in results:
        config = result.config
        assert result.metrics["world_size"] == config["scaling_config"]["num_actors"]
        assert result.metrics["lr"] == config["train_loop_config"]["lr"]
        expected = 0.0 if isinstance(config["preprocessor"], MinMaxScaler) else -1.5275
        assert result.metrics["min_x"] == pytest.approx(expected, abs=1e-3)
        with open(os.path.join(result.path, "params.json")) as f:
            params = json.load(f)
        # the trainer's own failure config, as the Tuner's run config gave none
        assert params["run_config"]["failure_config"] == {
            "max_failures": 2,
            "fail_fast": False,
            "max_preemption_failures": -1,
            "preemption_deadline_s": 30.0,
            "hang_timeout_s": None,
            "assumed_mtbf_s": 86400.0,
        }
    assert worker_processes() == []


def test_asha_stops_trainer_trials_and_every_worker_is_released(tmp_path):
    def steps(config):
        for _ in range(4):
            train.report({"acc": config["acc"]})

    trainer = DataParallelTrainer(
        steps, train_loop_config={"acc": 0.0}, scaling_config=ScalingConfig(num_workers=2)
    )
    results = fit_acc_trials_one_at_a_time_under_asha(trainer, [0.9, 0.1], 4, tmp_path)
    assert [r.metrics["training_iteration"] for r in results] == [4, 1]
    assert results.num_terminated == 2
    assert worker_processes() == []


def torch_step(config):
    import torch

    from lockstep.train.torch import prepare_model

    model = prepare_model(torch.nn.Linear(2, 1))
    loss = model(torch.ones(4, 2)).sum() * config["lr"]
    loss.backward()
    train.report({"loss": float(loss)})


@pytest.mark.slow
def test_four_torch_trials_of_two_workers_share_two_cpus_none_starves(tmp_path):
    from lockstep.train.torch import TorchTrainer

    concurrency = MostTrialsAtOnce()

    trainer = TorchTrainer(
        torch_step,
        train_loop_config={"lr": 1.0},
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
    )
    results = tune.Tuner(
        trainer,
        param_space={"train_loop_config": {"lr": tune.grid_search([0.1, 0.2, 0.3, 0.4])}},
        tune_config=tune.TuneConfig(max_concurrent_trials=2),
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0, callbacks=[concurrency]),
    ).fit()
    assert results.num_terminated == 4 and results.num_errors == 0
    assert concurrency.most == 2
    assert worker_processes() == []


DRIVER = textwrap.dedent(
    """
    import os, sys, tempfile
    from lockstep import tune
    from lockstep.train import Checkpoint

    storage, log = sys.argv[1], sys.argv[2]

    def objective(config):
        start = 0
        if (checkpoint := tune.get_checkpoint()) is not None:
            with checkpoint.as_directory() as d:
                start = int(open(os.path.join(d, "step")).read()) + 1
        with open(log, "a") as f:
            f.write(f"{config['x']} {start}\\n")
        for step in range(start, 3):
            if config["x"] == 2 and step == 1 and not os.path.exists(log + ".killed"):
                open(log + ".killed", "w").close()
                os.kill(os.getpid(), 9)  # the driver dies mid-trial
            with tempfile.TemporaryDirectory() as d:
                open(os.path.join(d, "step"), "w").write(str(step))
                tune.report({"step": step, "x": config["x"]},
                            checkpoint=Checkpoint.from_directory(d))

    tune.Tuner(objective, param_space={"x": tune.grid_search([0, 1, 2, 3])},
               tune_config=tune.TuneConfig(max_concurrent_trials=1),
               run_config=tune.RunConfig(name="exp", storage_path=storage, verbose=0)).fit()
    """
)


def test_restore_after_killing_the_driver_finishes_only_the_unfinished_trials(tmp_path):
    log = tmp_path / "runs.log"
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(tmp_path), str(log)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    path = str(tmp_path / "exp")
    assert tune.Tuner.can_restore(path)
    saved = tune.Tuner.restore(path, trainable=None).get_results()
    finished_before = {r.config["x"] for r in saved if r.metrics.get("step") == 2}
    before = log.read_text().splitlines()

    # restore in this process: the trainable is read back from the experiment
    results = tune.Tuner.restore(path).fit()
    assert results.num_terminated == 4 and results.num_errors == 0
    assert sorted(r.metrics["step"] for r in results) == [2, 2, 2, 2]
    rerun = log.read_text().splitlines()[len(before) :]
    rerun_x = {int(line.split()[0]) for line in rerun}
    assert rerun_x.isdisjoint(finished_before)
    assert 2 in rerun_x and "2 1" in rerun  # the killed trial went on from its checkpoint


SEARCH_DRIVER = textwrap.dedent(
    """
    import os, sys
    from lockstep import tune
    from lockstep.tune.search.optuna import OptunaSearch

    storage = sys.argv[1]

    def objective(config):
        names = os.listdir(os.path.join(storage, "exp"))
        killed = os.path.join(storage, "killed")
        # four trials ended since the first snapshot: the driver dies (once)
        if sum(n.startswith("objective") for n in names) == 5 and not os.path.exists(killed):
            open(killed, "w").close()
            os.kill(os.getpid(), 9)
        tune.report({"loss": (config["x"] - 1) ** 2})

    tune.Tuner(objective, param_space={"x": tune.uniform(-3, 3)},
               tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=8,
                                           search_alg=OptunaSearch(seed=0),
                                           max_concurrent_trials=1),
               run_config=tune.RunConfig(name="exp", storage_path=storage, verbose=0)).fit()
    """
)


@pytest.mark.parametrize("where", ["process", "driver"])
def test_a_restored_search_knows_the_trials_that_ended_after_its_last_snapshot(tmp_path, where):
    env = {**os.environ, "LOCKSTEP_SEARCH_PROCESS": "1" if where == "process" else "0"}
    done = subprocess.run(
        [sys.executable, "-c", SEARCH_DRIVER, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    results = tune.Tuner.restore(str(tmp_path / "exp")).fit()
    assert len(results) == 8 and results.num_errors == 0
    storage = f"sqlite:///{tmp_path / 'exp' / 'optuna.db'}"
    study = optuna.load_study(study_name="lockstep", storage=storage)
    # every trial that ended before the kill is in the study, with its result
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 8
    assert sorted(t.value for t in study.trials) == sorted(r.metrics["loss"] for r in results)
    optuna.storages.RDBStorage(storage).engine.dispose()


def pbt_loop(config):
    add_lr_to_a_score(config, train.get_checkpoint, train.report)  # the Tuner's stop= ends it


def test_pbt_exploits_a_trainer_trial_from_the_donors_checkpoint(tmp_path):
    pbt = pbt_every_two_iterations({"train_loop_config": {"lr": [0.1, 1.0, 10.0]}})
    trainer = DataParallelTrainer(
        pbt_loop, train_loop_config={"lr": 0.1}, scaling_config=ScalingConfig(num_workers=1)
    )
    results = tune.Tuner(
        trainer,
        param_space={"train_loop_config": {"lr": tune.grid_search([10.0, 0.1])}},
        # One at a time, so that the good trial's results are all known when the bad one
        # reaches its first perturbation (side by side, the order of their reports varies);
        # each runs 6 iterations of its own, whatever checkpoint it continues from.
        tune_config=tune.TuneConfig(
            metric="score", mode="max", scheduler=pbt, max_concurrent_trials=1
        ),
        run_config=tune.RunConfig(
            storage_path=str(tmp_path), verbose=0, stop={"training_iteration": 6}
        ),
    ).fit()
    assert pbt.num_perturbations >= 1 and results.num_errors == 0
    bad = results[1]
    assert bad.config["train_loop_config"]["lr"] in (1.0, 10.0)
    frame = bad.metrics_dataframe
    exploited = frame[frame["lr"] != 0.1].iloc[0]
    assert exploited["score"] > 10.0  # went on from the donor's state
    assert worker_processes() == []
