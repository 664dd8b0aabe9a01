"""The other nodes' output reaches node 0 through Redis: every line once, in order, through a
lost reply and a Redis outage (the two-node job itself is in tests/pools/test_gang.py)."""
import pytest

from workers import gang_logs


@pytest.fixture
def redis_settings(live_settings):
    return live_settings


def lines_of(receiver, polls=5):
    got = []
    for _ in range(polls):
        for stream, items in receiver.poll(50):
            got += [(rank, stream, text) for rank, text in items]
    return got


def test_lines_arrive_in_order_with_their_ranks_and_streams(redis_settings):
    sender = gang_logs.Sender(7, 3, node_rank=1, first_rank=2)
    receiver = gang_logs.Receiver(7, 3, nnodes=2)
    sender.add("o", [(2, "epoch 0"), (3, "epoch 0")])
    # c10d's rendezvous may give this node the group's first ranks: its [rank0] lines stay rank 0
    sender.add("o", [(0, "rank 0/4 ready")])
    sender.add("o", [(3, f"line {i}") for i in range(450)])  # more than one stream entry
    assert sender.flush()
    got = lines_of(receiver)
    assert got[:3] == [(2, "o", "epoch 0"), (3, "o", "epoch 0"), (0, "o", "rank 0/4 ready")]
    assert [text for _, _, text in got[3:]] == [f"line {i}" for i in range(450)]
    assert not receiver.done
    sender.close()
    assert lines_of(receiver, polls=1) == [] and receiver.done


def test_a_resent_entry_is_not_taken_twice(redis_settings):
    sender = gang_logs.Sender(8, 1, node_rank=1, first_rank=1)
    receiver = gang_logs.Receiver(8, 1, nnodes=2)
    sender.add("o", [(1, "a"), (1, "b")])
    sender.flush()
    sender.sent = 0  # as if the reply to XADD was lost and the same lines were sent again
    sender.add("o", [(1, "a"), (1, "b"), (1, "c")])
    sender.flush()
    assert [text for _, _, text in lines_of(receiver)] == ["a", "b", "c"]


@pytest.mark.slow  # restarts the Redis server process
def test_lines_wait_while_redis_is_down_and_go_out_when_it_is_back(redis_settings, redis_server):
    sender = gang_logs.Sender(9, 1, node_rank=1, first_rank=1)
    receiver = gang_logs.Receiver(9, 1, nnodes=2)
    redis_server.stop()
    try:
        sender.add("o", [(1, "during the outage")])
        assert not sender.flush()
        assert receiver.poll(50) == []  # the reader survives it too
    finally:
        redis_server.start()
    sender.retry_at = 0  # skip the backoff
    assert sender.flush()
    assert lines_of(receiver) == [(1, "o", "during the outage")]


def test_a_full_buffer_counts_what_it_dropped_and_says_so(redis_settings, monkeypatch):
    monkeypatch.setattr(gang_logs, "PENDING_MAX", 3)
    sender = gang_logs.Sender(10, 1, node_rank=1, first_rank=1)
    receiver = gang_logs.Receiver(10, 1, nnodes=2)
    sender.add("o", [(1, str(i)) for i in range(5)])
    sender.flush()
    got = lines_of(receiver)
    assert [text for _, _, text in got[:3]] == ["0", "1", "2"]
    assert "2 lines not forwarded" in got[3][2] and got[3][1] == "s"


def test_a_place_taken_over_counts_from_zero_and_the_lost_workers_late_lines_are_dropped(redis_settings):
    lost = gang_logs.Sender(11, 1, node_rank=1, first_rank=1)
    receiver = gang_logs.Receiver(11, 1, nnodes=2)
    lost.add("o", [(1, "before the loss")])
    lost.flush()
    assert [text for _, _, text in lines_of(receiver)] == ["before the loss"]
    # another worker takes the place over (the place's restarts: 1); its lines start at index 0
    new = gang_logs.Sender(11, 1, node_rank=1, first_rank=1, holder=1)
    new.add("o", [(1, "taken over")])
    new.flush()
    lost.add("o", [(1, "late line of the lost worker")])  # it woke up
    lost.close()
    assert [text for _, _, text in lines_of(receiver)] == ["taken over"]
    assert not receiver.done  # the lost worker's end of log is not the place's
    new.close()
    lines_of(receiver, polls=1)
    assert receiver.done
