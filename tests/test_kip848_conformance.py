"""librdkafka consumers with `group.protocol=consumer` (KIP-848) against the lab's coordinator.

Each consumer polls in a thread of its own and records every assignment and revocation its
rebalance listener sees; the tests wait for observed effects, never for a fixed time.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid

import confluent_kafka
import pytest

from broker.admin import create_topic
from modern.client.connection import BrokerConnection, parse_address
from modern.common import errors
from modern.common.consumer_group_messages import ConsumerGroupDescribeRequest
from tests.modern_support import produce, wait_until
from tests.test_kip848_timing import lower_broker_timing
from tests.test_modern_conformance import Worker, committed_offsets, complete_and_disjoint, find_coordinator

pytestmark = [pytest.mark.broker, pytest.mark.conformance]

PARTITIONS = 6
SESSION_TIMEOUT_MS = 3_000


@pytest.fixture
def cluster(broker_cluster, monkeypatch):
    """One broker whose consumer groups time sessions out after 3 s and want a heartbeat every 300 ms (both
    below Kafka's minimums, lowered with them as an operator would)."""
    lower_broker_timing(monkeypatch, SESSION_TIMEOUT_MS, 300)
    return broker_cluster(1)


@pytest.fixture
def names():
    suffix = uuid.uuid4().hex[:8]
    return f"topic-{suffix}", f"group-{suffix}"


class History:
    """What each consumer's rebalance listener was told, in order."""

    def __init__(self) -> None:
        self.events: dict[str, list[tuple[str, frozenset[int]]]] = {}

    def since(self, marks: dict[str, int], name: str, kind: str) -> set[int]:
        return {p for k, ps in self.events[name][marks.get(name, 0):] if k == kind for p in ps}

    def marks(self) -> dict[str, int]:
        return {name: len(events) for name, events in self.events.items()}

    def snapshot(self) -> History:
        """A copy taken before the consumers close (closing revokes everything)."""
        copy = History()
        copy.events = {name: list(events) for name, events in self.events.items()}
        return copy


def consumer_worker(name: str, bootstrap: str, topic: str, group: str, history: History,
                    assignor: str = "uniform", instance_id: str | None = None) -> Worker:
    history.events[name] = []

    def make():
        settings = {
            "bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
            "group.protocol": "consumer", "group.remote.assignor": assignor,
            "auto.offset.reset": "earliest", "enable.auto.commit": True, "auto.commit.interval.ms": 200,
        }
        if instance_id is not None:
            settings["group.instance.id"] = instance_id
        consumer = confluent_kafka.Consumer(settings)

        def on_assign(c, partitions):
            history.events[name].append(("assigned", frozenset(p.partition for p in partitions)))

        def on_revoke(c, partitions):
            history.events[name].append(("revoked", frozenset(p.partition for p in partitions)))

        consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        return consumer

    def poll(consumer):
        message = consumer.poll(0.1)
        return [] if message is None or message.error() else [(message.partition(), message.offset())]

    def owned(consumer):
        return {p.partition for p in consumer.assignment()}

    return Worker(name, make, poll, owned, lambda c: c.close())


# A consumer in a process of its own, so the test can kill it without a leave heartbeat.
_KILLABLE = """
import sys, confluent_kafka
bootstrap, topic, group = sys.argv[1:4]
consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": "killable",
                                     "group.protocol": "consumer", "auto.offset.reset": "earliest"})
consumer.subscribe([topic])
while True:
    consumer.poll(0.1)
    print(sorted(p.partition for p in consumer.assignment()), flush=True)
"""


class KillableConsumer:
    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.owned: set[int] = set()
        self.process = subprocess.Popen([sys.executable, "-c", _KILLABLE, bootstrap, topic, group],
                                        stdout=subprocess.PIPE, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.owned = set(eval(line, {}))  # a list literal the child printed

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(30)
        self._reader.join(10)


def balanced(workers) -> bool:
    sizes = [len(w.owned) for w in workers]
    return complete_and_disjoint(workers) and max(sizes) - min(sizes) <= 1


def describe(bootstrap: str, group: str):
    connection = BrokerConnection(*parse_address(bootstrap.split(",")[0]), client_id="probe", timeout_s=5)
    try:
        answer = connection.request(ConsumerGroupDescribeRequest[0](group_ids=[group],
                                                                    include_authorized_operations=False))
    finally:
        connection.close()
    return answer.groups[0]


def test_one_to_five_members_get_a_complete_disjoint_assignment(cluster, names):
    topic, group = names
    create_topic(cluster.bootstrap, topic, PARTITIONS)
    history = History()
    workers: list[Worker] = []
    try:
        for size in range(1, 6):
            workers.append(consumer_worker(f"rd-{size}", cluster.bootstrap, topic, group, history))
            wait_until(lambda: balanced(workers) and all(w.error is None for w in workers),
                       f"{size} librdkafka consumers sharing {PARTITIONS} partitions")
        described = describe(cluster.bootstrap, group)
        assert described.error_code == 0
        assert described.group_state == "Stable" and described.assignor_name == "uniform"
        assert len(described.members) == 5
        assert described.group_epoch == described.assignment_epoch
        assert all(m.member_epoch == described.assignment_epoch for m in described.members)
    finally:
        for worker in workers:
            worker.stop()
    assert all(w.error is None for w in workers), [w.error for w in workers]


def test_the_range_assignor_named_by_the_client(cluster, names):
    topic, group = names
    create_topic(cluster.bootstrap, topic, PARTITIONS)
    history = History()
    workers = [consumer_worker(f"rd-{i}", cluster.bootstrap, topic, group, history, assignor="range")
               for i in range(2)]
    try:
        wait_until(lambda: balanced(workers) and all(len(w.owned) == 3 for w in workers),
                   "two consumers with three partitions each")
        described = describe(cluster.bootstrap, group)
        ranges = sorted(tuple(sorted(w.owned)) for w in workers)
    finally:
        for worker in workers:
            worker.stop()
    assert described.assignor_name == "range"
    assert ranges == [(0, 1, 2), (3, 4, 5)]


def test_a_static_member_comes_back_to_its_partitions(cluster, names):
    topic, group = names
    create_topic(cluster.bootstrap, topic, PARTITIONS)
    history = History()
    stays = consumer_worker("rd-stays", cluster.bootstrap, topic, group, history, instance_id="stays")
    away = consumer_worker("rd-away", cluster.bootstrap, topic, group, history, instance_id="away")
    workers = [stays, away]
    try:
        wait_until(lambda: balanced(workers) and all(len(w.owned) == 3 for w in workers),
                   "two static consumers with three partitions each")
        held = set(away.owned)
        marks = history.marks()
        away.stop()             # a static member's close leaves with epoch -2: its partitions wait for it
        assert len(describe(cluster.bootstrap, group).members) == 2
        back = consumer_worker("rd-back", cluster.bootstrap, topic, group, history, instance_id="away")
        workers = [stays, back]
        wait_until(lambda: back.owned == held, "the returning instance holding its old partitions")
        seen = history.snapshot()
    finally:
        for worker in workers:
            worker.stop()
    assert seen.since(marks, "rd-stays", "revoked") == set() and seen.since(marks, "rd-stays", "assigned") == set()


def test_a_leaving_member_moves_only_its_partitions(cluster, names):
    topic, group = names
    create_topic(cluster.bootstrap, topic, PARTITIONS)
    history = History()
    workers = [consumer_worker(f"rd-{i}", cluster.bootstrap, topic, group, history) for i in range(3)]
    try:
        wait_until(lambda: balanced(workers) and all(len(w.owned) == 2 for w in workers),
                   "three consumers with two partitions each")
        before = {w.name: set(w.owned) for w in workers}
        marks = history.marks()
        leaver = workers.pop()
        leaver.stop()                                     # close(): a leave heartbeat (epoch -1)
        wait_until(lambda: balanced(workers) and all(len(w.owned) == 3 for w in workers),
                   "two consumers with three partitions each")
        after = {w.name: set(w.owned) for w in workers}
        seen = history.snapshot()
    finally:
        for worker in workers:
            worker.stop()
    for name in after:
        assert before[name] <= after[name]
        assert seen.since(marks, name, "revoked") == set(), f"{name} was asked to revoke"
        assert seen.since(marks, name, "assigned") == after[name] - before[name]
    assert set().union(*(after[n] - before[n] for n in after)) == before[leaver.name]


def test_a_killed_members_partitions_move_after_its_session(cluster, names):
    topic, group = names
    create_topic(cluster.bootstrap, topic, PARTITIONS)
    history = History()
    survivor = consumer_worker("rd-survivor", cluster.bootstrap, topic, group, history)
    victim = KillableConsumer(cluster.bootstrap, topic, group)
    try:
        wait_until(lambda: len(survivor.owned) == 3 and len(victim.owned) == 3
                   and not survivor.owned & victim.owned, "two consumers with three partitions each")
        kept = set(survivor.owned)
        marks = history.marks()
        assert len(describe(cluster.bootstrap, group).members) == 2
        victim.kill()          # no leave heartbeat: only the session timeout tells the coordinator
        wait_until(lambda: survivor.owned == set(range(PARTITIONS)), "the survivor owning every partition")
        assert len(describe(cluster.bootstrap, group).members) == 1
        seen = history.snapshot()
    finally:
        survivor.stop()
        if victim.process.poll() is None:
            victim.kill()
    assert seen.since(marks, survivor.name, "revoked") == set()
    assert seen.since(marks, survivor.name, "assigned") == set(range(PARTITIONS)) - kept


@pytest.mark.slow
def test_the_group_and_its_commits_survive_a_coordinator_failover(broker_cluster, monkeypatch, names):
    lower_broker_timing(monkeypatch, 20_000, 300)
    topic, group = names
    cluster = broker_cluster(3)
    create_topic(cluster.bootstrap, topic, PARTITIONS)
    produce(cluster.bootstrap, topic, 60, partitions=PARTITIONS)
    history = History()
    workers = [consumer_worker(f"rd-{i}", cluster.bootstrap, topic, group, history) for i in range(2)]
    try:
        wait_until(lambda: balanced(workers) and len({r for w in workers for r in w.seen}) >= 60,
                   "two consumers sharing the partitions and every record consumed")
        old = find_coordinator(cluster.bootstrap, group)
        wait_until(lambda: committed_offsets(cluster.brokers[old].address, group, topic)
                   == {p: 10 for p in range(PARTITIONS)}, "every offset committed at 10")
        epoch_before = describe(cluster.brokers[old].address, group).group_epoch
        marks = history.marks()
        cluster.kill(old)
        cluster.wait_for_live([b.node_id for b in cluster.brokers if b.node_id != old])
        new = find_coordinator(cluster.live_bootstrap, group)
        assert new != old
        loaded = []
        wait_until(lambda: loaded.append(describe(cluster.brokers[new].address, group))
                   or loaded[-1].error_code != errors.COORDINATOR_LOAD_IN_PROGRESS.errno,
                   "the new coordinator to have read the partition back")
        described = loaded[-1]
        assert described.error_code == 0 and len(described.members) == 2     # replayed, not rebuilt
        assert described.group_epoch == epoch_before
        produce(cluster.live_bootstrap, topic, 30, partitions=PARTITIONS, start=60)
        wait_until(lambda: len({r for w in workers for r in w.seen}) >= 90, "the records produced after the kill")
        wait_until(lambda: committed_offsets(cluster.brokers[new].address, group, topic)
                   == {p: 15 for p in range(PARTITIONS)}, "commits through the new coordinator")
        seen = history.snapshot()
    finally:
        for worker in workers:
            worker.stop()
    for worker in workers:                       # the failover moved no partition
        assert seen.since(marks, worker.name, "revoked") == set()
