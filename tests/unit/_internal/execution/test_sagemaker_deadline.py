"""Under SageMaker, a preemption deadline longer than SageMaker waits between its SIGTERM
and its SIGKILL (120 s) is refused before anything starts, in every instance."""

from __future__ import annotations

import pytest

from lockstep.train import DataParallelTrainer, FailureConfig, RunConfig, ScalingConfig


def train_func():  # never runs
    raise AssertionError("the run started")


@pytest.mark.parametrize("host", ["algo-1", "algo-2"])
def test_a_deadline_sagemaker_does_not_give_is_refused_before_the_run(tmp_path, monkeypatch, host):
    monkeypatch.setenv("SAGEMAKER_BASE_DIR", str(tmp_path / "opt-ml"))
    monkeypatch.setenv("SM_HOSTS", '["algo-1", "algo-2"]')
    monkeypatch.setenv("SM_CURRENT_HOST", host)
    monkeypatch.setenv("LOCKSTEP_NODE_ADDRESS", "10.0.0.1")  # (the hosts are made up)
    trainer = DataParallelTrainer(
        train_func,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            storage_path=str(tmp_path / "runs"),
            failure_config=FailureConfig(preemption_deadline_s=300),
        ),
    )
    with pytest.raises(ValueError) as raised:
        trainer.fit()
    assert str(raised.value) == (
        "FailureConfig(preemption_deadline_s=300) is longer than SageMaker waits after "
        "stopping a job (120 s from its SIGTERM to its SIGKILL): the preempted run's "
        "checkpoint could be cut off before it is committed. HINT: preemption_deadline_s=100 "
        "or less (the default is 30)"
    )
    assert not (tmp_path / "runs").exists()  # nothing written, nothing started
