import pytest

from lockstep import train


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: train.report({"x": 1}), "report()"),
        (train.get_checkpoint, "get_checkpoint()"),
        (train.get_context, "get_context()"),
        (lambda: train.get_dataset_shard("train"), "get_dataset_shard()"),
        (train.collective.barrier, "collective.barrier()"),
        (
            lambda: train.collective.broadcast_from_rank_zero(1),
            "collective.broadcast_from_rank_zero()",
        ),
    ],
)
def test_outside_a_run_says_how_to_use_it(call, name):
    with pytest.raises(RuntimeError) as info:
        call()
    message = str(info.value)
    assert message.startswith(f"lockstep.train.{name} can only be called inside a training")
    assert "HINT" in message
