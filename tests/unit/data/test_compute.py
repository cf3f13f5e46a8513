"""Ray's compute arguments of map/map_batches: checked as Ray checks them, no effect here."""

from __future__ import annotations

import os

import pytest

import lockstep.data as ld


class AddOffset:
    instances: list[int] = []

    def __init__(self, offset, *, scale=1):
        self.offset, self.scale = offset, scale
        AddOffset.instances.append(os.getpid())

    def __call__(self, batch):
        return {"id": batch["id"] * self.scale + self.offset}


def test_a_callable_class_in_an_actor_pool_is_built_once_per_process_with_its_arguments():
    AddOffset.instances.clear()
    ds = ld.range(6, override_num_blocks=3).map_batches(
        AddOffset,
        compute=ld.ActorPoolStrategy(size=4),
        fn_constructor_args=(10,),
        fn_constructor_kwargs={"scale": 2},
        batch_size=2,
        num_cpus=2,
        num_gpus=0,
        memory=1e9,
        concurrency=4,
        max_restarts=2,  # a Ray remote argument
    )
    assert [r["id"] for r in ds.take_all()] == [10, 12, 14, 16, 18, 20]
    assert AddOffset.instances == [os.getpid()]


@pytest.mark.parametrize("compute", ["tasks", ld.TaskPoolStrategy(size=2), None])
def test_functions_take_task_strategies(compute):
    ds = ld.range(3).map_batches(lambda b: b, compute=compute, concurrency=2, num_cpus=1)
    assert ds.count() == 3
    assert ld.range(3).map(lambda r: r, compute=compute, num_cpus=0.5).count() == 3
    assert ld.range(3).filter(lambda r: r["id"] > 0, concurrency=2).count() == 2
    assert ld.range(3).flat_map(lambda r: [r, r], num_gpus=0).count() == 6


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"compute": "actors"}, "not a callable class"),
        ({"compute": ld.ActorPoolStrategy(size=2)}, "not a callable class"),
        ({"compute": "gpus"}, "compute must be"),
        ({"concurrency": 0}, "expected to be set as an integer"),
        ({"concurrency": "spam"}, "expected to be set as an integer"),
        ({"concurrency": (1, 2)}, "``fn`` is not a callable class"),
        ({"concurrency": (1, 2, 3, 4)}, "expected to be set as a tuple"),
        ({"num_cpus": -1}, "num_cpus must be a non-negative number"),
    ],
)
def test_arguments_ray_refuses_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ld.range(3).map_batches(lambda b: b, **kwargs)


def test_a_callable_class_takes_a_min_max_pool_with_min_at_most_max():
    class Same:
        def __call__(self, batch):
            return batch

    assert ld.range(3).map_batches(Same, concurrency=(1, 2)).count() == 3
    assert ld.range(3).map_batches(Same, concurrency=(1, 3, 2)).count() == 3
    with pytest.raises(ValueError, match="min_size must be <= max_size"):
        ld.range(3).map_batches(Same, concurrency=(3, 2))


def test_actor_pool_strategy_checks_its_sizes():
    assert ld.ActorPoolStrategy(min_size=1, max_size=3).max_size == 3
    with pytest.raises(ValueError, match="size must be a positive int"):
        ld.ActorPoolStrategy(size=0)
    with pytest.raises(ValueError, match="not both"):
        ld.ActorPoolStrategy(size=2, max_size=3)
    with pytest.raises(ValueError, match="min_size 3 > max_size 2"):
        ld.ActorPoolStrategy(min_size=3, max_size=2)
