"""The fetcher's buffer (`modern.client.fetch_buffer`), as Kafka 3.7's FetchBuffer, FetchCollector and
SubscriptionState order it: arrival order, a partition handed out in part first in line, a drained partition
to the end of the fetch order, buffered data of kept partitions kept across an assignment."""

from __future__ import annotations

from modern.client.fetch_buffer import FetchBuffer
from rebalance.types import Record, TopicPartition

P0, P1, P2 = (TopicPartition("t", p) for p in range(3))


def records(tp: TopicPartition, first: int, count: int) -> list[Record]:
    return [Record(tp.topic, tp.partition, offset, None, b"", 0) for offset in range(first, first + count)]


def test_data_goes_out_in_arrival_order_and_a_part_handed_out_stays_first():
    buffer = FetchBuffer()
    buffer.assign([P0, P1, P2])
    buffer.add(P2, records(P2, 0, 3))
    buffer.add(P0, records(P0, 0, 4))
    handed = buffer.hand_out(5)
    assert [(tp, len(batch)) for tp, batch in handed.items()] == [(P2, 3), (P0, 2)]
    buffer.add(P1, records(P1, 0, 1))
    assert [(tp, batch[0].offset) for tp, batch in buffer.hand_out(5).items()] == [(P0, 2), (P1, 0)]
    assert not buffer


def test_a_drained_partition_moves_to_the_end_of_the_fetch_order():
    buffer = FetchBuffer()
    buffer.assign([P2, P0, P1])
    assert buffer.in_fetch_order([P0, P1, P2]) == [P0, P1, P2]     # a new assignment: partition order
    buffer.add(P1, records(P1, 0, 2))
    buffer.add(P0, records(P0, 0, 9))
    buffer.hand_out(5)                                              # P1 drained, P0 not
    assert buffer.in_fetch_order([P0, P1, P2]) == [P0, P2, P1]
    buffer.move_to_end(P0)                                          # as after an error answer
    assert buffer.in_fetch_order([P1, P2, P0]) == [P2, P1, P0]


def test_an_assignment_keeps_the_data_of_kept_partitions_only():
    buffer = FetchBuffer()
    buffer.assign([P0, P1])
    buffer.add(P0, records(P0, 7, 2))
    buffer.add(P1, records(P1, 0, 2))
    buffer.assign([P0, P2])
    assert P0 in buffer and P1 not in buffer and buffer.next_offset(P0) == 7
    assert buffer.in_fetch_order([P0, P1, P2]) == [P0, P2]
