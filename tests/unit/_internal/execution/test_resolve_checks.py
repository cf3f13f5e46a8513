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


def test_an_elastic_run_is_sized_by_this_machines_cpus():
    from lockstep._internal.execution.resolve import check_elastic_fits, local_capacity

    have = usable_cpus()
    half_cpu = ScalingConfig(num_workers=(1, 64), resources_per_worker={"CPU": 0.5})
    assert check_elastic_fits(half_cpu) == min(64, have * 2)
    assert check_elastic_fits(ScalingConfig(num_workers=(1, 1))) == 1  # capped at max
    # a Ray custom resource does not limit local workers
    custom = ScalingConfig(num_workers=(1, 64), resources_per_worker={"CPU": 1, "slot": 1})
    assert check_elastic_fits(custom) == min(64, have)
    assert local_capacity(custom)[0]["CPU"] == have


def test_an_elastic_run_warns_of_no_oversubscription():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DataParallelTrainer(lambda: None, scaling_config=ScalingConfig(num_workers=(1, 512)))


def test_an_elastic_run_without_the_gpus_for_its_min_is_an_error(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    with pytest.raises(ValueError, match=r"use_gpu=True but this machine has no GPU.*HINT"):
        DataParallelTrainer(
            lambda: None, scaling_config=ScalingConfig(num_workers=(1, 4), use_gpu=True)
        )
