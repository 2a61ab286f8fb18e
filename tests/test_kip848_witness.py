"""The broker's witness count for KIP-848: a ConsumerGroupHeartbeat counts as a group request only
when it is not steady, and the broker's count matches what a member derives from its own requests
and answers with the same rule (rebalance.heartbeat_kinds)."""

from __future__ import annotations

import uuid

import pytest

from broker.counters import group_requests, read_counters
from modern.client.connection import parse_address
from modern.common.consumer_group_messages import ConsumerGroupHeartbeatRequest
from rebalance import heartbeat_kinds
from rebalance.topic_ids import topic_id
from tests.test_kip848_coordinator import TOPIC, conn, embedded, group_id, heartbeat  # noqa: F401 - fixtures

pytestmark = pytest.mark.broker


class Tally:
    """One member's side: its requests, the answers, and the word each heartbeat gets."""

    def __init__(self, connection, group):
        self.conn, self.group_id = connection, group
        self.member_id, self.epoch, self.owned = str(uuid.uuid4()), 0, frozenset()
        self.words: list[str] = []

    def beat(self, *, report_owned: bool = False):
        owned = [ConsumerGroupHeartbeatRequest[1].TopicPartitions(topic_id=topic_id(TOPIC), partitions=sorted(
            self.owned))] if report_owned else None
        sent_epoch = self.epoch
        answer = heartbeat(self.conn, self.group_id, self.member_id, sent_epoch, owned=owned)
        assert answer.error_code == 0, answer
        given = None if answer.assignment is None else frozenset(
            p for t in answer.assignment.topic_partitions for p in t.partitions)
        self.words.append(heartbeat_kinds.detail(member_epoch=sent_epoch, owned_reported=owned is not None,
                                            assignment=given, held=self.owned))
        self.epoch = answer.member_epoch
        if given is not None:
            self.owned = given          # it lets go and takes at once; the next beat reports it
        return self.words[-1]


def changing(embedded) -> int:  # noqa: F811 - the fixture's value
    by_api = read_counters(*parse_address(embedded.bootstrap))
    return by_api.get(heartbeat_kinds.CHANGING_COUNTER, 0)


def test_steady_heartbeats_are_not_counted_and_changes_are(embedded, conn, group_id):  # noqa: F811
    a, b = Tally(conn, group_id), Tally(conn, group_id)
    assert a.beat() == heartbeat_kinds.JOIN and a.owned == frozenset(range(4))
    start = changing(embedded)
    assert [a.beat() for _ in range(3)] == [heartbeat_kinds.STEADY] * 3
    assert changing(embedded) == start, "steady heartbeats are background"

    assert b.beat() == heartbeat_kinds.JOIN
    assert a.beat() == heartbeat_kinds.ASSIGNMENT and len(a.owned) == 2     # told to give two up
    assert a.beat(report_owned=True) == heartbeat_kinds.ACK                   # it says it did
    b.beat()
    for _ in range(3):
        a.beat()
        b.beat()
    assert len(b.owned) == 2 and not a.owned & b.owned
    assert [a.beat(), b.beat()] == [heartbeat_kinds.STEADY] * 2
    words = a.words[1:] + b.words   # everything after the first join
    assert changing(embedded) - start == sum(word != heartbeat_kinds.STEADY for word in words)
    assert changing(embedded) - start >= 4

    by_api = read_counters(*parse_address(embedded.bootstrap))
    assert group_requests(by_api) >= by_api[heartbeat_kinds.CHANGING_COUNTER]
    assert by_api[heartbeat_kinds.API] > by_api[heartbeat_kinds.CHANGING_COUNTER], "every heartbeat counts under its API"
