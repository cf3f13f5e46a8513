"""``lockstep runs list/show/plot/compare`` on real runs, older runs and Tune experiments."""

from __future__ import annotations

import os
import shutil

import pytest

from lockstep import train
from lockstep.cli import main
from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig
from lockstep.train.callbacks import CSVLoggerCallback, JsonLoggerCallback, Trial

pytestmark = pytest.mark.slow


def train_func(config):
    from lockstep.train import Checkpoint

    for i in range(config["steps"]):
        if config.get("fail_at") == i:
            raise ValueError("diverged")
        checkpoint = None
        if i == 1:
            directory = os.path.join(
                config["scratch"], f"ckpt-{train.get_context().get_world_rank()}"
            )
            os.makedirs(directory, exist_ok=True)
            checkpoint = Checkpoint.from_directory(directory)
        train.report({"loss": config["scale"] / (i + 1), "accuracy": i / 10}, checkpoint)


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    scratch = tmp_path_factory.mktemp("scratch")
    for name, config in {
        "small": {"steps": 3, "scale": 1.0},
        "large": {"steps": 4, "scale": 2.0},
        "broken": {"steps": 3, "scale": 1.0, "fail_at": 2},
    }.items():
        trainer = DataParallelTrainer(
            train_func,
            train_loop_config={**config, "scratch": str(scratch)},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(name=name, storage_path=str(root), verbose=0),
        )
        try:
            trainer.fit()
        except train.TrainingFailedError:
            assert name == "broken"
    # A run of an earlier version: its result lines only.
    shutil.copytree(
        root / "small",
        root / "old",
        ignore=lambda d, names: [n for n in names if n != "result.json"],
    )
    # A Tune experiment: trials with the JSON and CSV loggers' files.
    loggers = [JsonLoggerCallback(), CSVLoggerCallback()]
    for t in range(2):
        trial = Trial(trial_id=f"t{t}", config={"lr": t}, path=str(root / "exp" / f"trial_{t}"))
        for logger in loggers:
            logger.on_trial_start(0, [trial], trial)
            for i in (1, 2):
                result = {"loss": (t + 1) / i, "training_iteration": i, "time_total_s": i * 1.0}
                logger.on_trial_result(i, [trial], trial, result)
            logger.on_trial_complete(2, [trial], trial)
    return root


def run(capsys, *argv):
    code = main(["runs", *argv])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_list_shows_every_run_with_status_iterations_and_best(storage, capsys):
    code, out = run(capsys, "list", "--storage-path", str(storage))
    assert code == 0
    lines = {line.split()[1]: line for line in out.splitlines() if line.startswith("│")}
    assert set(lines) == {"broken", "large", "old", "small", "exp/trial_0", "exp/trial_1"}
    assert "finished" in lines["small"] and "errored" in lines["broken"]
    assert "unknown" in lines["old"]
    assert "loss=0.5" in lines["large"]  # best loss of 2.0 / (i + 1) over 4 steps
    assert " 4 " in lines["large"] and " 3 " in lines["small"]
    assert "loss=0.5" in lines["exp/trial_0"]


def test_show_prints_configs_metrics_checkpoints_and_error(storage, capsys):
    code, out = run(capsys, "show", "broken", "--storage-path", str(storage))
    assert code == 0
    assert '"scale": 1.0' in out
    assert "last metrics: loss=0.5, accuracy=0.1" in out
    assert "checkpoint_000000" in out and "loss=0.5" in out
    assert "ValueError: diverged" in out


def test_show_reads_a_tune_trial_and_an_older_run(storage, capsys):
    code, out = run(capsys, "show", "exp/trial_1", "--storage-path", str(storage))
    assert code == 0 and '"lr": 1' in out and "last metrics: loss=1" in out
    code, out = run(capsys, "show", "old", "--storage-path", str(storage))
    assert code == 0 and "iterations: 3" in out


def test_plot_writes_a_png_and_prints_its_path(storage, capsys, tmp_path):
    output = tmp_path / "loss.png"
    code, out = run(
        capsys, "plot", "small", "loss", "--storage-path", str(storage), "--output", str(output)
    )
    assert code == 0
    assert out.strip() == str(output)
    assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and output.stat().st_size > 1000
    code, out = run(capsys, "plot", "small", "--storage-path", str(storage))
    assert code == 0 and os.path.getsize(storage / "small" / "metrics.png") > 1000


def test_plot_of_an_unknown_metric_or_run_names_what_exists(storage, capsys):
    code, out = run(capsys, "plot", "small", "nope", "--storage-path", str(storage))
    assert code == 1 and "it has loss, accuracy" in out
    code, out = run(capsys, "show", "missing", "--storage-path", str(storage))
    assert code == 1 and "no run 'missing'" in out and "small" in out


def test_compare_prints_one_table_and_writes_one_plot(storage, capsys, tmp_path):
    output = tmp_path / "compare.png"
    code, out = run(
        capsys,
        "compare",
        "small",
        "large",
        "exp/trial_0",
        "--metric",
        "loss",
        "--storage-path",
        str(storage),
        "--output",
        str(output),
    )
    assert code == 0
    rows = {line.split()[1]: line for line in out.splitlines() if line.startswith("│")}
    assert set(rows) == {"small", "large", "exp/trial_0"}
    assert "0.3333" in rows["small"] and "0.5" in rows["large"]
    assert output.stat().st_size > 1000
