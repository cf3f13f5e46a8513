"""prepare_data_loader's sampler: the indices of a pass, and what a restart continues with."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DistributedSampler

from lockstep.train.torch._resume import ResumableSampler, pass_indices
from tests.unit.data.strategies import SETTINGS

LENGTH = 24


def samplers(world, saved=None, shuffle=True):
    return [
        ResumableSampler(
            range(LENGTH), num_replicas=world, rank=r, shuffle=shuffle, seed=5, saved=saved
        )
        for r in range(world)
    ]


def run(sampler, epoch, num_batches, batch_size=2):
    """A pass that hands out ``num_batches`` batches (all: None); their indices."""
    sampler.set_epoch(epoch)
    indices = list(sampler)
    taken = indices if num_batches is None else indices[: num_batches * batch_size]
    for _ in range(0, len(taken), batch_size):
        sampler.handed(batch_size)
    sampler.ended = num_batches is None
    return taken


def test_a_pass_is_the_distributed_samplers():
    sampler = DistributedSampler(range(LENGTH), num_replicas=3, rank=1, shuffle=True, seed=5)
    sampler.set_epoch(4)
    position = {"epoch": 4, "world": 3, "rank": 1, "len": LENGTH, "seed": 5, "shuffle": True,
                "drop_last": False}  # fmt: skip
    assert pass_indices(position) == list(sampler)


@settings(**SETTINGS)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(0, 3), st.booleans())
def test_a_restart_hands_out_the_rest_of_the_epoch_once(before, after, num_batches, shuffle):
    first = samplers(before, shuffle=shuffle)
    seen = [i for s in first for i in run(s, 2, num_batches)]
    saved = [s.position() for s in first]
    second = samplers(after, saved, shuffle=shuffle)
    assert [len(s) for s in second] == [len(list(s)) for s in samplers(after, saved, shuffle)]
    rest = [run(s, 2, None) for s in second]
    everything = sorted(seen + [i for part in rest for i in part])
    padded = sorted(i for s in samplers(before, shuffle=shuffle) for i in run(s, 2, None))
    assert everything == padded  # DistributedSampler pads the epoch to a multiple of ranks
    # the epoch after is the new world's usual one
    expected = [run(s, 3, None) for s in samplers(after, shuffle=shuffle)]
    assert [run(s, 3, None) for s in second] == expected


def test_with_as_many_workers_each_rank_continues_its_own_order():
    first = samplers(2)
    for s in first:
        run(s, 1, 2)
    whole = [run(s, 1, None) for s in samplers(2)]
    second = samplers(2, [s.position() for s in first])
    assert [run(s, 1, None) for s in second] == [w[4:] for w in whole]


def test_an_ended_epoch_is_not_continued():
    first = samplers(2)
    for s in first:
        run(s, 0, None)
    second = samplers(2, [s.position() for s in first])
    assert [run(s, 1, None) for s in second] == [run(s, 1, None) for s in samplers(2)]


def test_a_position_of_another_dataset_is_warned_about_and_dropped():
    first = samplers(2)
    for s in first:
        run(s, 0, 1)
    saved = [{**s.position(), "len": 99} for s in first]
    with pytest.warns(UserWarning, match="len changed"):
        (sampler,) = samplers(1, saved)
    assert len(list(sampler)) == LENGTH


def test_one_worker_replacing_a_random_sampler_draws_a_new_order_each_pass():
    (sampler,) = [
        ResumableSampler(
            range(LENGTH), num_replicas=1, rank=0, shuffle=True, seed=0, auto_epoch=True
        )
    ]
    assert list(sampler) != list(sampler)
