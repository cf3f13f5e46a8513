import random
import subprocess
import sys

import pytest

from lockstep.testing import Fault
from lockstep.testing._faults import KINDS


@pytest.mark.parametrize(
    ("fields", "hint"),
    [
        ({"kind": "crash"}, "use one of raise, exit, signal, kill, hang, slow, preempt"),
        ({"kind": "raise", "rank": -1}, "rank=0"),
        ({"kind": "raise", "at_epoch": 1.5}, "at_epoch=0"),
        ({"kind": "raise", "times": -2}, "times=0"),
        ({"kind": "slow"}, "seconds a slow rank sleeps"),
        ({"kind": "kill", "seconds": -1.0}, "a kill's delay"),
    ],
)
def test_a_bad_fault_is_refused_with_the_fix(fields, hint):
    with pytest.raises(ValueError, match="HINT") as raised:
        Fault(**fields)
    assert hint in str(raised.value)


def test_random_faults_are_drawn_from_the_seed():
    def draw(seed):
        rng = random.Random(seed)
        return [
            Fault.random(KINDS, num_workers=4, num_epochs=10, seed=rng, times=2, seconds=0.1)
            for _ in range(50)
        ]

    faults = draw(3)
    assert faults == draw(3) and faults != draw(4)
    assert {f.kind for f in faults} == set(KINDS)
    assert {f.rank for f in faults} == {0, 1, 2, 3}
    assert {f.at_epoch for f in faults} <= set(range(10))
    assert {f.times for f in faults} == {2}


def test_a_random_fault_keeps_the_rank_it_is_given():
    faults = [Fault.random("kill", num_workers=4, num_epochs=3, seed=s, rank=2) for s in range(20)]
    assert {(f.kind, f.rank) for f in faults} == {("kill", 2)}


def test_a_faults_count_is_kept_under_its_kind_rank_and_epoch():
    assert Fault(kind="exit", rank=1, at_epoch=4, exit_code=3).name == "exit-rank1-epoch4"


# A driver (a fresh Python) starts a worker either itself or from a fork of its own (as
# lockstep's fork server is); the worker prints what it takes for its driver.
DRIVER = """
import os, subprocess, sys
code = "from lockstep.testing._faults import _driver_pid; print(_driver_pid())"
worker = [sys.executable, "-c", code]
print(os.getpid(), flush=True)
if sys.argv[1] == "fork":
    if os.fork() == 0:
        subprocess.run(worker)
        os._exit(0)
    os.wait()
else:
    subprocess.run(worker)
"""


@pytest.mark.processes
@pytest.mark.parametrize("how", ["itself", "fork"])
def test_the_driver_of_a_process_is_its_parent_unless_the_parent_is_a_fork_of_its_own(how):
    out = subprocess.run(
        [sys.executable, "-c", DRIVER, how], capture_output=True, text=True, timeout=60
    )
    driver, seen = out.stdout.split()
    assert seen == driver, out.stderr
