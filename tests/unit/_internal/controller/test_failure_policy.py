import pytest

from lockstep._core.config import FailureConfig
from lockstep._core.errors import WorkerFailure
from lockstep._internal.controller.failure_policy import FailureDecision, FailurePolicy

RESTART, RAISE = FailureDecision.RESTART, FailureDecision.RAISE


def failures(retryable=True):
    return {
        0: WorkerFailure(rank=0, pid=1, kind="exit", summary="x", time=0.0, retryable=retryable)
    }


@pytest.mark.parametrize(
    ("max_failures", "restarts", "decision"),
    [
        (0, 0, RAISE),
        (2, 0, RESTART),
        (2, 1, RESTART),
        (2, 2, RAISE),
        (-1, 1000, RESTART),
    ],
)
def test_budget(max_failures, restarts, decision):
    policy = FailurePolicy(FailureConfig(max_failures=max_failures))
    assert policy.decide(failures(), num_restarts=restarts) is decision


def test_misuse_raises_whatever_the_budget():
    policy = FailurePolicy(FailureConfig(max_failures=-1))
    assert policy.decide(failures(retryable=False), num_restarts=0) is RAISE
