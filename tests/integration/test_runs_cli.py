"""``lockstep runs list/show/plot/compare`` on real runs, older runs and Tune experiments."""

from __future__ import annotations

import os
import re
import shutil

import pytest

from lockstep import train
from lockstep.cli import main
from lockstep.cli._runs import plot_figure, read_run
from lockstep.testing import Fault
from lockstep.train import DataParallelTrainer, FailureConfig, RunConfig, ScalingConfig
from lockstep.train.callbacks import CSVLoggerCallback, JsonLoggerCallback, Trial

pytestmark = pytest.mark.slow


def train_func(config):
    from lockstep.train import Checkpoint

    for i in range(config["steps"]):
        for fault in config.get("faults", []):
            fault.fire_if_due(i)
        if config.get("fail_at") == i:
            raise ValueError("diverged")
        checkpoint = None
        if i == 1:
            directory = os.path.join(
                config["scratch"], f"ckpt-{train.get_context().get_world_rank()}"
            )
            os.makedirs(directory, exist_ok=True)
            checkpoint = Checkpoint.from_directory(directory)
        metrics = {"epoch": i, "loss": config["scale"] / (i + 1), "accuracy": i / 10}
        train.report(metrics, checkpoint)


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    scratch = tmp_path_factory.mktemp("scratch")
    for name, config in {
        "small": {"steps": 3, "scale": 1.0},
        "large": {"steps": 4, "scale": 2.0},
        "broken": {"steps": 3, "scale": 1.0, "fail_at": 2},
        "flaky": {"steps": 3, "scale": 1.0, "faults": [Fault(kind="raise", rank=1, at_epoch=1)]},
        "single": {"steps": 1, "scale": 1.0},
    }.items():
        trainer = DataParallelTrainer(
            train_func,
            train_loop_config={**config, "scratch": str(scratch)},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(
                name=name,
                storage_path=str(root),
                verbose=0,
                failure_config=FailureConfig(max_failures=1 if name == "flaky" else 0),
            ),
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
    assert set(lines) == {
        *("broken", "flaky", "large", "old", "single", "small", "exp/trial_0", "exp/trial_1")
    }
    assert "finished" in lines["small"] and "errored" in lines["broken"]
    assert "unknown" in lines["old"]
    assert "loss=0.5" in lines["large"]  # best loss of 2.0 / (i + 1) over 4 steps
    assert " 4 " in lines["large"] and " 3 " in lines["small"]
    assert "loss=0.5" in lines["exp/trial_0"]
    # attempts, and what ended those that did not finish
    assert "│ 2 (1 failure) " in lines["flaky"] and "│ 1 (1 failure) " in lines["broken"]
    assert "│ 1 " in lines["small"] and "epoch=" not in out  # a counter is no best metric


def test_show_prints_configs_metrics_checkpoints_and_error(storage, capsys):
    code, out = run(capsys, "show", "broken", "--storage-path", str(storage))
    assert code == 0
    assert '"scale": 1.0' in out
    assert "last metrics: epoch=1, loss=0.5, accuracy=0.1" in out
    assert "checkpoint_000000" in out and "loss=0.5" in out
    assert "ValueError: diverged" in out


def test_show_tells_each_attempt_and_the_root_cause_of_its_failure(storage, capsys):
    code, out = run(capsys, "show", "flaky", "--storage-path", str(storage))
    assert code == 0
    assert "attempts: 2 (1 failure)" in out
    rows = {
        line.split()[1]: line for line in out.splitlines() if re.match(r"│ \d+ +│ \d+ +│", line)
    }
    assert re.search(r"│ 2 +│ [\d-]+ [\d:]+ │ 0 +│ failed: rank 1 \(pid \d+\) raised", rows["1"])
    assert "InjectedFailure: injected failure on rank 1 at epoch 1" in out
    assert re.search(r"│ 2 +│ [\d-]+ [\d:]+ │ 1 +│ finished", rows["2"])


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
    assert out.strip() == str(storage / "small" / "metrics.png")


def test_plot_leaves_out_counters_and_fits_one_iteration(storage):
    import matplotlib.pyplot as plt

    figure = plot_figure(read_run(str(storage / "single")))
    try:
        *axes, time_panel = [ax for ax in figure.axes if ax.get_visible()]
        assert [ax.get_title() for ax in axes] == ["loss", "accuracy"]  # not epoch
        assert time_panel.get_title().startswith("where the time went: goodput ")
        for ax in axes:
            assert ax.get_xlim() == (0.0, 2.0)  # iteration 1 with room, not 0.96..1.04
            assert all(float(t).is_integer() for t in ax.get_xticks())
    finally:
        plt.close(figure)


def test_plot_of_an_unknown_metric_or_run_names_what_exists(storage, capsys):
    code, out = run(capsys, "plot", "small", "nope", "--storage-path", str(storage))
    assert code == 1 and "it has epoch, loss, accuracy" in out
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


def test_compare_writes_its_plot_into_the_storage_path_not_where_it_runs(
    storage, capsys, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    code, out = run(capsys, "compare", "small", "large", "--storage-path", str(storage))
    assert code == 0
    written = storage / "compare-small-large.png"
    assert out.splitlines()[-1] == str(written)
    assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert list(tmp_path.iterdir()) == []
    header = next(line for line in out.splitlines() if "(last)" in line)
    assert "epoch" not in header  # counters are not compared
    written.unlink()  # the other tests list the runs of this storage


def test_help_names_the_storage_path_in_use_and_every_argument(capsys, monkeypatch):
    monkeypatch.setenv("LOCKSTEP_STORAGE_PATH", "/data/runs")  # only shown, never written
    with pytest.raises(SystemExit):
        main(["runs", "list", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "default: /data/runs (from $LOCKSTEP_STORAGE_PATH)" in text
    assert "--metric METRIC the metric to rank by" in text
    for command in ("show", "plot"):
        with pytest.raises(SystemExit):
            main(["runs", command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "--metric" not in text and "--mode" not in text  # one run: nothing to rank
        assert "run a run: its name under the storage path" in text
    with pytest.raises(SystemExit):
        main(["runs", "plot", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "metrics the metrics to plot; default: every numeric metric" in text
