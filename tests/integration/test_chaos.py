"""The bounded chaos test: a deterministic 2-worker torch model (gloo, DDP) trained under
30-odd random faults of mixed kinds, worker faults and driver deaths, each run continued
until it completes. Every run completes, no committed checkpoint is lost, the final
weights (checkpoint and every rank's return value) are bitwise equal to an uninterrupted
run's, result.json and progress.csv hold rows 1..N each once, and no process, /dev/shm
file or .staging directory is left. ``benchmarks/chaos.py`` is the long version.
"""

import random

import pytest

from lockstep.testing import Fault, _chaos, assert_resume_equivalent, fired_faults, train_epochs
from lockstep.train import FailureConfig, RunConfig, ScalingConfig

EPOCHS = 10


@pytest.fixture
def torch_fork_server(fork_safe_driver):
    """A fork server of the test's own (``fork_safe_driver``), forked after torch was
    imported, so that every restarted worker has torch at once, as in a script that
    imports it first."""
    import torch  # noqa: F401


def assert_clean(chaos):
    tally = chaos.tally
    assert tally.problems == [], tally.table()
    assert tally.completed == tally.runs
    assert tally.lost_checkpoints == tally.not_equal == tally.leftovers == 0


@pytest.mark.slow
def test_random_worker_faults_and_driver_deaths_leave_no_trace(tmp_path, torch_fork_server):
    rng = random.Random(2024)
    chaos = _chaos.Chaos(str(tmp_path), epochs=EPOCHS)
    # 4 runs x 6 worker faults, in this process: raise, exit, signal, SIGKILL from another
    # thread (while the loop goes on), slow rank; and a SIGKILL of rank 0 from this process
    for n in range(4):
        faults = _chaos.plan_faults(rng, count=6, epochs=EPOCHS, kinds=_chaos.WORKER_KINDS)
        chaos.run_worker_faults(f"workers{n}", faults, outside_kills=[rng.randrange(1, 4)])
    # Driver deaths, with worker faults in the same runs: SIGKILL from outside mid-training,
    # the script run again and preempted (SIGTERM to the driver, sent by a worker), then
    # restored; SIGKILL mid-commit, then restored.
    chaos.run_driver_kills(
        "driver_killed_and_preempted",
        ["SIGKILL:3"],
        [
            Fault(kind="preempt", rank=1, at_epoch=6),
            *_chaos.plan_faults(rng, count=2, epochs=EPOCHS, kinds=_chaos.WORKER_KINDS),
        ],
        restore=True,
    )
    chaos.run_driver_kills(
        "driver_killed_mid_commit",
        ["point:checkpoint_moved:4"],
        _chaos.plan_faults(rng, count=2, epochs=EPOCHS, kinds=_chaos.WORKER_KINDS),
        restore=True,
    )
    assert_clean(chaos)
    injected = chaos.tally.injected
    assert sum(injected.values()) >= 30
    assert {"raise", "exit", "signal", "kill", "slow", "preempt"} <= set(injected)
    assert injected["worker SIGKILL from another process"] >= 1
    assert injected["driver SIGKILL"] == injected["driver SIGKILL at a point"] == 1
    # every failure was followed by a restarted attempt's report
    recovered = {k: len(v) for k, v in chaos.tally.recovery.items()}
    assert recovered == {k: n for k, n in injected.items() if k != "slow"}, chaos.tally.table()


@pytest.mark.slow
def test_hung_ranks_among_random_faults_are_restarted(tmp_path, torch_fork_server):
    rng = random.Random(7)
    chaos = _chaos.Chaos(str(tmp_path), epochs=EPOCHS)
    faults = [
        Fault(kind="hang", rank=1, at_epoch=2),
        *_chaos.plan_faults(rng, count=3, epochs=EPOCHS, kinds=("raise", "kill", "slow")),
        Fault(kind="hang", rank=0, at_epoch=7),
    ]
    chaos.run_worker_faults("hangs", faults, hang_timeout_s=1.0)
    assert_clean(chaos)
    assert chaos.tally.injected["hang"] == 2


@pytest.mark.slow
def test_a_preempted_driver_stops_restorably_and_resumes_bitwise_equal(tmp_path, torch_fork_server):
    chaos = _chaos.Chaos(str(tmp_path), epochs=EPOCHS)
    chaos.run_driver_kills(
        "preempted",
        ["SIGTERM:4"],  # from outside, as a scheduler sends it
        [Fault(kind="preempt", rank=0, at_epoch=7)],
        restore=True,
    )
    assert_clean(chaos)
    assert chaos.tally.injected["driver SIGTERM"] == chaos.tally.injected["preempt"] == 1


def ran_some_epochs(config) -> bool:
    """The same value however often the run restarted (train_epochs's is not)."""
    return train_epochs(config) > 0


def resume_equivalent_on_two_workers(tmp_path, faults, *, epochs, fn=ran_some_epochs, **options):
    """``assert_resume_equivalent`` of ``fn`` running ``epochs`` epochs on two workers."""
    return assert_resume_equivalent(
        fn,
        faults,
        train_loop_config={"epochs": epochs},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(tmp_path), verbose=0),
        **options,
    )


def test_assert_resume_equivalent_passes_a_recovering_loop(tmp_path):
    faults = [
        Fault(kind="raise", rank=1, at_epoch=1),
        Fault(kind="exit", rank=0, at_epoch=2, exit_code=5),
        Fault(kind="slow", rank=1, at_epoch=3, seconds=0.01),
    ]
    result = resume_equivalent_on_two_workers(tmp_path, faults, epochs=5)
    assert result.metrics["epoch"] == 4
    fired = [(f["kind"], f["rank"], f["epoch"]) for f in fired_faults(result.path)]
    assert fired == [("raise", 1, 1), ("exit", 0, 2), ("slow", 1, 3)]


def test_assert_resume_equivalent_names_what_differs(tmp_path):
    # train_epochs returns the number of epochs it ran: fewer after a restart
    with pytest.raises(AssertionError) as raised:
        resume_equivalent_on_two_workers(
            tmp_path, [Fault(kind="raise", rank=0, at_epoch=2)], epochs=4, fn=train_epochs
        )
    message = str(raised.value)
    assert "rank 0 returned 2 instead of 4" in message
    assert "rank 1 returned 2 instead of 4" in message
    assert "final checkpoint" not in message  # epoch.txt holds 3 in both


def test_assert_resume_equivalent_says_when_a_fault_never_fired(tmp_path):
    with pytest.raises(AssertionError, match="raise-rank3-epoch1 never fired"):
        resume_equivalent_on_two_workers(
            tmp_path,
            [Fault(kind="raise", rank=3, at_epoch=1)],
            epochs=2,
            fn=train_epochs,
            compare_return_values=False,
        )


def test_assert_resume_equivalent_needs_hang_detection_for_a_hang():
    with pytest.raises(ValueError, match="hang_timeout_s"):
        assert_resume_equivalent(
            train_epochs,
            [Fault(kind="hang", rank=0, at_epoch=1)],
            train_loop_config={"epochs": 2},
            run_config=RunConfig(verbose=0, failure_config=FailureConfig(max_failures=1)),
        )


def test_assert_resume_equivalent_restores_a_preempted_run(tmp_path):
    # SIGTERM to this process, the driver: the run stops restorably and is restored
    result = resume_equivalent_on_two_workers(
        tmp_path,
        [Fault(kind="preempt", rank=0, at_epoch=2), Fault(kind="raise", rank=1, at_epoch=3)],
        epochs=5,
    )
    assert result.metrics_dataframe["epoch"].iloc[-1] == 4
    assert [f["kind"] for f in fired_faults(result.path)] == ["preempt", "raise"]
