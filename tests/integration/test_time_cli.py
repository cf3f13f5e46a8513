"""Where a run's time went, in ``lockstep runs show`` (a table, per rank where the ranks
differ; ``--json``) and ``lockstep runs plot`` (a stacked bar), and in the metrics Tune
results and the logger callbacks get."""

from __future__ import annotations

import json
import time

import pytest

# TensorBoard's reader imports TensorFlow, which sets process-wide variables once at import;
# imported here so that it happens before the leak check's snapshot.
import tensorflow  # noqa: F401

from lockstep import train
from lockstep._core.time_ledger import KEYS
from lockstep.cli._runs import run_command
from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig
from lockstep.train.callbacks import TBXLoggerCallback

pytestmark = pytest.mark.slow

TIME_KEYS = list(KEYS)  # the documented keys (tests/unit/_core/test_time_ledger.py)


def rank_one_is_slower(config):  # type: ignore[no-untyped-def]
    # both ranks begin together (under load one may start a tenth of a second later: then
    # its first step, not rank 1's, would be the slowest)
    train.collective.barrier()
    for i in range(6):
        time.sleep(0.1 + 0.1 * train.get_context().get_world_rank())
        train.report({"loss": 1 / (i + 1)})


@pytest.fixture(scope="module")
def run(tmp_path_factory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("runs")
    DataParallelTrainer(
        rank_one_is_slower,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            name="slow", storage_path=str(root), verbose=0, callbacks=[TBXLoggerCallback()]
        ),
    ).fit()
    return root


def test_show_has_the_time_table_per_rank_where_the_ranks_differ(run, capsys):  # type: ignore[no-untyped-def]
    assert run_command(["show", "slow", "--storage-path", str(run)]) == 0
    out = capsys.readouterr().out
    assert "where the time went: goodput " in out
    header = next(line for line in out.splitlines() if "seconds" in line and "share" in line)
    assert "rank 0" in header and "rank 1" in header  # rank 0 waited for rank 1
    barrier = next(line for line in out.splitlines() if "barrier wait" in line)
    cells = [c.strip() for c in barrier.strip("│┃ ").split("│")]
    run_s, rank0, rank1 = float(cells[1]), float(cells[3]), float(cells[4])
    assert rank0 == pytest.approx(0.6, abs=0.2) and rank1 < 0.1
    assert run_s == pytest.approx((rank0 + rank1) / 2, abs=0.01)
    assert "rank 1 was the slowest on 100% of steps" in out


def test_show_json_has_the_documented_keys(run, capsys):  # type: ignore[no-untyped-def]
    assert run_command(["show", "slow", "--storage-path", str(run), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert list(shown["time"]) == TIME_KEYS
    assert [r["rank"] for r in shown["time_per_rank"]] == [0, 1]
    assert all(list(r) == ["rank", *TIME_KEYS] for r in shown["time_per_rank"])
    time_ = shown["time"]
    parts = sum(v for k, v in time_.items() if k not in ("wall", "goodput"))
    assert parts == pytest.approx(time_["wall"], abs=1e-4)
    assert time_["goodput"] == pytest.approx(time_["training"] / time_["wall"], abs=1e-5)
    assert shown["findings"][0].startswith("rank 1 was the slowest on 100% of steps")
    assert shown["checkpoint_advice"] is None  # no checkpoint to measure
    assert shown["status"] == "finished" and shown["iterations"] == 6


def test_plot_draws_the_time_as_a_stacked_bar_beside_the_metrics(run, capsys):  # type: ignore[no-untyped-def]
    import matplotlib.image

    assert run_command(["plot", "slow", "loss", "--storage-path", str(run)]) == 0
    assert capsys.readouterr().out.split() == [str(run / "slow" / "metrics.png")]
    image = matplotlib.image.imread(str(run / "slow" / "metrics.png"))
    # two panels side by side: the loss, and where the time went
    assert image.shape[1] > 1.8 * image.shape[0]
    # the time's panel has its colours: training's green and barrier wait's orange
    colours = {
        tuple((image[..., :3].reshape(-1, 3)[i] * 255).round().astype(int))
        for i in range(0, image.shape[0] * image.shape[1], 7)
    }
    assert (44, 160, 44) in colours and (255, 127, 14) in colours


def test_logger_callbacks_get_the_time_as_metrics(run):  # type: ignore[no-untyped-def]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "slow"))
    events.Reload()
    goodput = events.Scalars("ray/tune/goodput")
    assert [s.step for s in goodput] == [1, 2, 3, 4, 5, 6]
    assert all(0 < s.value <= 1 for s in goodput)
    waited = events.Scalars("ray/tune/time_barrier_wait_s")
    assert waited[-1].value > waited[0].value > 0  # rank 0 waits for rank 1, more each step
    tags = set(events.Tags()["scalars"])
    assert {f"ray/tune/time_{k}_s" for k in TIME_KEYS if k != "goodput"} <= tags
