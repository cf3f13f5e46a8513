from lockstep._internal.execution.messages import CollectiveRequest
from lockstep._internal.execution.worker_group.relay import CollectiveRelay


def req(rank, seq, op, payload=None):
    return CollectiveRequest(rank, seq, op, payload)


def test_broadcast_answers_everyone_with_rank0s_value():
    relay = CollectiveRelay(3)
    assert relay.on_request(req(1, 0, "broadcast")) is None
    assert relay.on_request(req(0, 0, "broadcast", "port=29500")) is None
    ranks, reply = relay.on_request(req(2, 0, "broadcast"))
    assert ranks == [0, 1, 2] and reply.value == "port=29500" and reply.error is None


def test_gather_in_rank_order_and_barrier():
    relay = CollectiveRelay(2)
    relay.on_request(req(1, 0, "gather", "b"))
    assert relay.on_request(req(0, 0, "gather", "a"))[1].value == ["a", "b"]
    relay.on_request(req(0, 1, "barrier"))
    assert relay.on_request(req(1, 1, "barrier"))[1].value is None


def test_different_operations_at_the_same_point():
    relay = CollectiveRelay(2)
    relay.on_request(req(0, 0, "barrier"))
    ranks, reply = relay.on_request(req(1, 0, "broadcast"))
    assert sorted(ranks) == [0, 1]
    assert "rank 0 barrier(), rank 1 broadcast_from_rank_zero()" in reply.error


def test_a_worker_that_returned_cannot_join():
    relay = CollectiveRelay(2)
    relay.on_request(req(0, 0, "barrier"))
    ranks, reply = relay.on_finished(1)
    assert ranks == [0]
    assert reply.error.startswith("rank 1 returned from the training function while rank 0 waits")
    relay = CollectiveRelay(2)
    assert relay.on_finished(0) is None
    ranks, reply = relay.on_request(req(1, 0, "barrier"))
    assert ranks == [1] and "rank 0 returned" in reply.error
