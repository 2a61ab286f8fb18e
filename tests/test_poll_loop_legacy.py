"""The 0.8 member's poll loop, as 0.8.2.2's `ZookeeperConsumerConnector` and `ConsumerIterator`.

The application takes one record at a time (`ConsumerIterator.next()`, which moves the consumed offset
past it). The rebalance runs on the watcher executor and never waits for the application
(`syncedRebalance`): it stops the fetchers, clears their queues and the iterator's current chunk
(`closeFetchersForQueues`, `clearFetcherQueues`), commits the offset after the last record handed out,
releases the owner znodes and claims anew, while the application may still be handling a record of a
partition it no longer owns. Against a real ZooKeeper and the lab's broker
registered in it the 0.8 way.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable

import pytest
from kafka import KafkaProducer
from kazoo.client import KazooClient

from broker.admin import create_topic
from broker.embedded import EmbeddedBroker
from broker.server import BrokerConfig
from legacy_zk.member import LegacyMember
from rebalance.events import EventRecorder, read_events
from rebalance.member import MemberConfig
from rebalance.types import Record, TopicPartition
from tests import test_legacy_zk as legacy

pytestmark = [pytest.mark.zk, pytest.mark.broker]

TOPIC = "t"
PARTITIONS = 6
PER_PARTITION = 100     # 600 records: more than one fetch brings (kafka-python's max.poll.records, 500)
WAIT_S = 60.0


# The same fixtures as the other legacy tests: a chroot of the shared ZooKeeper, a client inside it.
zk_connect, kz = legacy.zk_connect, legacy.kz


@pytest.fixture
def bootstrap(zk_connect, kz):
    """The lab's broker, registered in ZooKeeper as a 0.8 broker, with a topic of six partitions."""
    with EmbeddedBroker(BrokerConfig(port=0, zk=zk_connect)) as embedded:
        create_topic(embedded.bootstrap, TOPIC, PARTITIONS)
        wait_until(lambda: kz.exists(f"/brokers/topics/{TOPIC}") and kz.get_children("/brokers/ids"),
                   "the broker's 0.8 registration")
        yield embedded.bootstrap


def wait_until(condition: Callable[[], object], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def produce(bootstrap: str) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    for seq in range(PARTITIONS * PER_PARTITION):
        producer.send(TOPIC, json.dumps({"seq": seq, "ts_ms": int(time.time() * 1000)}).encode(),
                      partition=seq % PARTITIONS)
    producer.flush(30)
    producer.close()


def owners(kz: KazooClient, group: str) -> dict[int, str]:
    path = f"/consumers/{group}/owners/{TOPIC}"
    return {int(p): kz.get(f"{path}/{p}")[0].decode() for p in kz.get_children(path)} if kz.exists(path) else {}


def committed(kz: KazooClient, group: str) -> dict[int, int]:
    path = f"/consumers/{group}/offsets/{TOPIC}"
    return {int(p): int(kz.get(f"{path}/{p}")[0]) for p in kz.get_children(path)} if kz.exists(path) else {}


def drain(member: LegacyMember, until: Callable[[list[Record]], bool]) -> list[Record]:
    """Poll until `until(records so far)`; then poll once more for a while, to catch anything extra."""
    records: list[Record] = []
    deadline = time.monotonic() + WAIT_S
    while not until(records):
        if time.monotonic() > deadline:
            raise AssertionError(f"{member.member_id} got {len(records)} records, wanted more")
        records += member.poll(0.2)
    return records + member.poll(1.0)


def test_a_rebalance_does_not_wait_for_the_application_and_commits_what_was_handed_out(zk_connect, kz, bootstrap,
                                                                                       tmp_path):
    """Member a owns all six partitions; each poll hands out one record, until one of a partition a is
    about to lose, while more of them wait in its fetcher (fetched, not handed out) or on the broker.
    The application then handles that record without polling. A newcomer joins: a's watcher thread
    commits the offset after the last record handed out, releases every owner znode and claims
    partitions 0-2, all before a polls again. a's next polls return nothing of partitions 3-5; b starts
    them exactly where a stopped: no record lost, none twice."""
    group = f"g-{uuid.uuid4().hex[:6]}"
    recorder = EventRecorder(tmp_path / "events.jsonl", backend="legacy")

    def member(name: str) -> LegacyMember:
        return LegacyMember(MemberConfig(group=group, topics=(TOPIC,), member_name=name, zk_connect=zk_connect,
                                         session_timeout_ms=6000, auto_commit_interval_ms=600_000,
                                         auto_offset_reset="earliest",
                                         extra={"rebalance.backoff.ms": 200, "zookeeper.sync.time.ms": 200,
                                                "consumer.id": name}),   # ids, and range's shares, in name order
                            recorder=recorder)

    a, b = member("a"), member("b")
    everything = {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)}
    lost = {TopicPartition(TOPIC, p) for p in (3, 4, 5)}
    try:
        a.start()
        wait_until(lambda: a.idle and len(a.assignment()) == PARTITIONS, "a to own every partition")
        produce(bootstrap)
        batch: list[Record] = []
        deadline = time.monotonic() + WAIT_S
        while not (batch and TopicPartition(TOPIC, batch[-1].partition) in lost):
            assert time.monotonic() < deadline, "a handed out no record of partitions 3-5"
            polled = a.poll(1.0)
            assert len(polled) <= 1, f"one poll handed out {len(polled)} records"
            batch += polled
        handed = {(r.partition, r.offset) for r in batch}
        last_handed = {p: max(o for q, o in handed if q == p) for p, _ in handed}
        handling = batch[-1]
        assert handling.offset < PER_PARTITION - 1, "nothing of the partition being handled left to drop"

        # a handles its batch: no poll from here until the rebalance is over.
        b.start()
        wait_until(lambda: a.idle and b.idle and owners(kz, group) == {
            **{p: f"{a.member_id}-0" for p in (0, 1, 2)}, **{p: f"{b.member_id}-0" for p in (3, 4, 5)}},
            "a to give partitions 3-5 up to b while it is not polling")
        assert a.assignment() == {TopicPartition(TOPIC, p) for p in (0, 1, 2)}
        assert committed(kz, group) == {p: last_handed.get(p, -1) + 1 for p in range(PARTITIONS)}
        assert committed(kz, group)[handling.partition] == handling.offset + 1

        after = drain(a, lambda records: len(records) >= sum(PER_PARTITION - 1 - last_handed.get(p, -1)
                                                             for p in (0, 1, 2)))
        assert not [r for r in after if TopicPartition(r.topic, r.partition) in lost], \
            "a handed out records of a partition it gave up"
        taken_over = drain(b, lambda records: len(records) >= sum(PER_PARTITION - 1 - last_handed.get(p, -1)
                                                                  for p in (3, 4, 5)))
        consumed = [(r.partition, r.offset) for r in batch + after + taken_over]
        assert len(consumed) == len(set(consumed)), "a record was handed out twice"
        assert set(consumed) == everything
    finally:
        a.close()
        b.close()
        recorder.close()
    events = list(read_events(tmp_path / "events.jsonl"))
    released = next(e for e in events if e["type"] == "partitions_revoked" and e["member"] == a.member_id)
    commit = next(e for e in events if e["type"] == "offsets_committed" and e["member"] == a.member_id)
    assert commit["ts_ns"] <= released["ts_ns"], "the commit came after the release"
