"""Asked-for resources are checked when the trainer is built, before any worker starts."""

import os
import warnings

import pytest

from lockstep.train import DataParallelTrainer, ScalingConfig


def usable_cpus() -> int:
    return len(os.sched_getaffinity(0))


def test_more_cpus_than_the_machine_has_is_one_warning_naming_both():
    have = usable_cpus()
    scaling = ScalingConfig(num_workers=have * 4, resources_per_worker={"CPU": 2})
    with pytest.warns(UserWarning) as caught:
        DataParallelTrainer(lambda: None, scaling_config=scaling)
    messages = [str(w.message) for w in caught if "CPUs" in str(w.message)]
    assert messages == [
        f"ScalingConfig asks for {have * 8} CPUs ({have * 4} workers x 2) but this machine "
        f"has {have}: the workers will share CPUs, and every step waits for the slowest. "
        'HINT: use fewer workers, or fewer CPUs each with resources_per_worker={"CPU": ...}'
    ]
    assert [w.filename for w in caught if "CPUs" in str(w.message)] == [__file__]


def test_what_the_machine_has_gives_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DataParallelTrainer(lambda: None, scaling_config=ScalingConfig(num_workers=1))


def test_use_gpu_without_any_gpu_is_an_error_that_says_so(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    with pytest.raises(ValueError, match=r"use_gpu=True but this machine has no GPU.*HINT"):
        DataParallelTrainer(lambda: None, scaling_config=ScalingConfig(use_gpu=True))
