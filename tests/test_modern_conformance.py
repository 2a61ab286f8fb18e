"""Real Kafka clients (kafka-python, librdkafka) as members of groups our coordinator runs.

Each consumer lives in a thread of its own (as in an application) and reports what it owns
and consumes; the test waits for observed effects, never for a fixed time.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

import pytest
from kafka import KafkaConsumer
from kafka.protocol.consumer import HeartbeatRequest, OffsetFetchRequest
from kafka.protocol.metadata import FindCoordinatorRequest

from broker.admin import create_topic
from modern.classic.member import ModernMember
from modern.client.connection import BrokerConnection, parse_address
from modern.common import errors
from rebalance.events import EventRecorder, read_events
from rebalance.member import MemberConfig, RebalanceListener
from rebalance.types import TopicPartition
from tests.modern_support import WAIT_S, wait_until
from tests.modern_support import produce as produce_records

pytestmark = [pytest.mark.broker, pytest.mark.conformance]

PARTITIONS = 6


@pytest.fixture
def cluster_factory(broker_cluster, monkeypatch):
    """Brokers whose coordinator uses a short initial rebalance delay (inherited through the environment)."""
    monkeypatch.setenv("REBALANCE_LAB_GROUP_INITIAL_REBALANCE_DELAY_MS", "300")
    return broker_cluster


@pytest.fixture
def names(request):
    suffix = uuid.uuid4().hex[:8]
    return f"topic-{suffix}", f"group-{suffix}"


def produce(bootstrap: str, topic: str, count: int, start: int = 0) -> None:
    produce_records(bootstrap, topic, count, partitions=PARTITIONS, start=start)


class Worker:
    """Runs one consumer's poll loop in its own thread; the consumer is only touched there."""

    def __init__(self, name: str, make: Callable[[], object], poll: Callable[[object], list],
                 owned: Callable[[object], set], close: Callable[[object], None]) -> None:
        self.name = name
        self.seen: list[tuple[int, int]] = []          # (partition, offset)
        self.owned: set[int] = set()
        self.error: BaseException | None = None
        self._make, self._poll, self._owned, self._close = make, poll, owned, close
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            consumer = self._make()
            try:
                while not self._stop.is_set():
                    self.seen.extend(self._poll(consumer))
                    self.owned = set(self._owned(consumer))
            finally:
                self._close(consumer)
                self.owned = set()
        except BaseException as error:  # surfaced by stop()
            self.error = error

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(WAIT_S)
        assert not self._thread.is_alive(), f"{self.name} did not stop"
        if self.error is not None:
            raise self.error


def kafka_python_worker(name: str, bootstrap: str, topic: str, group: str, **options) -> Worker:
    def make():
        return KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, client_id=name,
                             auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=6000,
                             heartbeat_interval_ms=500, **options)

    def poll(consumer):
        batches = consumer.poll(100)
        if batches:
            consumer.commit()
        return [(r.partition, r.offset) for batch in batches.values() for r in batch]

    return Worker(name, make, poll, lambda c: {tp.partition for tp in c.assignment()}, lambda c: c.close())


def modern_worker(name: str, bootstrap: str, topic: str, group: str, recorder=None, strategy="range") -> Worker:
    def make():
        member = ModernMember(MemberConfig(group=group, topics=(topic,), strategy=strategy, member_name=name,
                                           bootstrap=bootstrap, auto_commit_interval_ms=200,
                                           extra={"heartbeat.interval.ms": 500}), recorder=recorder)
        member.start()
        return member

    def poll(member):
        return [(r.partition, r.offset) for r in member.poll(0.1)]

    return Worker(name, make, poll, lambda m: {tp.partition for tp in m.assignment()}, lambda m: m.close())


def assert_complete_and_disjoint(workers: list[Worker]) -> None:
    owned = [w.owned for w in workers]
    assert sorted(p for o in owned for p in o) == list(range(PARTITIONS)), owned


def complete_and_disjoint(workers: list[Worker]) -> bool:
    return sorted(p for w in workers for p in w.owned) == list(range(PARTITIONS))


# ---------------------------------------------------------------- (a) kafka-python only


def test_kafka_python_consumers_share_rebalance_and_resume(cluster_factory, names):
    topic, group = names
    cluster = cluster_factory(1)
    create_topic(cluster.bootstrap, topic, PARTITIONS)
    produce(cluster.bootstrap, topic, 60)
    workers = [kafka_python_worker(f"kp-{i}", cluster.bootstrap, topic, group) for i in range(3)]
    try:
        wait_until(lambda: complete_and_disjoint(workers) and all(len(w.owned) == 2 for w in workers),
                   "three consumers with two partitions each")
        assert_complete_and_disjoint(workers)
        wait_until(lambda: sum(len(w.seen) for w in workers) >= 60, "all 60 records consumed")
        workers[0].stop()
        wait_until(lambda: complete_and_disjoint(workers[1:]), "the two survivors to take every partition")
        assert_complete_and_disjoint(workers[1:])
    finally:
        for worker in workers:
            worker.stop()
    first_round = [rec for w in workers for rec in w.seen]
    assert len(set(first_round)) == 60
    # A new consumer in the same group resumes from the committed offsets: only new records.
    produce(cluster.bootstrap, topic, 30, start=60)
    late = kafka_python_worker("kp-late", cluster.bootstrap, topic, group)
    try:
        wait_until(lambda: len(late.seen) >= 30, "the 30 new records")
    finally:
        late.stop()
    assert len(late.seen) == 30 and not set(late.seen) & set(first_round)


# ---------------------------------------------------------------- (b) our client with kafka-python


def test_our_members_and_kafka_python_in_one_group(cluster_factory, names, tmp_path):
    topic, group = names
    cluster = cluster_factory(1)
    create_topic(cluster.bootstrap, topic, PARTITIONS)
    produce(cluster.bootstrap, topic, 60)
    recorder = EventRecorder(tmp_path / "events.jsonl", backend="classic")
    workers = [
        modern_worker("ours-0", cluster.bootstrap, topic, group, recorder),
        kafka_python_worker("kp-0", cluster.bootstrap, topic, group),
        modern_worker("ours-1", cluster.bootstrap, topic, group, recorder),
    ]
    try:
        wait_until(lambda: complete_and_disjoint(workers) and all(len(w.owned) == 2 for w in workers),
                   "a range assignment of two partitions each over both kinds of client")
        wait_until(lambda: len({rec for w in workers for rec in w.seen}) >= 60, "all records consumed")
        workers[0].stop()
        wait_until(lambda: complete_and_disjoint(workers[1:]) and all(len(w.owned) == 3 for w in workers[1:]),
                   "kafka-python and our member to split the partitions")
    finally:
        for worker in workers:
            worker.stop()
        recorder.close()
    events = list(read_events(tmp_path / "events.jsonl"))
    ops = {e["op"] for e in events if e["type"] == "coordination_request"}
    assert {"FindCoordinator", "JoinGroup", "SyncGroup", "Heartbeat", "OffsetCommit", "LeaveGroup"} <= ops
    assert any(e["type"] == "rebalance_completed" and e["member"] == "ours-1" for e in events)
    consumed = [e for e in events if e["type"] == "records_consumed"]
    assert consumed and all(len(e["produce_ts_ms"]) == e["count"] and None not in e["produce_ts_ms"]
                            for e in consumed)


# ---------------------------------------------------------------- (c) librdkafka, cooperative


def test_confluent_kafka_cooperative_sticky_rebalances_incrementally(cluster_factory, names):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic, group = names
    cluster = cluster_factory(1)
    create_topic(cluster.bootstrap, topic, PARTITIONS)
    history: dict[str, list[tuple[str, set[int]]]] = {}

    def make_worker(name: str) -> Worker:
        history[name] = []

        def make():
            consumer = confluent_kafka.Consumer({
                "bootstrap.servers": cluster.bootstrap, "group.id": group, "client.id": name,
                "partition.assignment.strategy": "cooperative-sticky", "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest", "enable.auto.commit": True,
            })

            def on_assign(c, partitions):
                history[name].append(("assigned", {p.partition for p in partitions}))

            def on_revoke(c, partitions):
                history[name].append(("revoked", {p.partition for p in partitions}))

            consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
            return consumer

        def poll(consumer):
            message = consumer.poll(0.1)
            return [] if message is None or message.error() else [(message.partition(), message.offset())]

        return Worker(name, make, poll, lambda c: {p.partition for p in c.assignment()}, lambda c: c.close())

    workers = [make_worker("rd-0"), make_worker("rd-1")]
    try:
        wait_until(lambda: complete_and_disjoint(workers) and all(len(w.owned) == 3 for w in workers),
                   "two librdkafka consumers with three partitions each")
        before = {w.name: set(w.owned) for w in workers}
        marks = {name: len(events) for name, events in history.items()}
        workers.append(make_worker("rd-2"))
        wait_until(lambda: complete_and_disjoint(workers) and all(len(w.owned) == 2 for w in workers),
                   "three consumers with two partitions each")
        after = {w.name: set(w.owned) for w in workers}
        rebalance_history = {name: list(events[marks.get(name, 0):]) for name, events in history.items()}
    finally:  # (closing revokes everything: not part of the rebalance under test)
        for worker in workers:
            worker.stop()
    moved_to_new = after["rd-2"]
    for name in ("rd-0", "rd-1"):
        revoked = set().union(*(ps for kind, ps in rebalance_history[name] if kind == "revoked"))
        kept = before[name] & after[name]
        assert not revoked & kept, f"{name} was asked to revoke partitions it kept: {revoked & kept}"
        assert revoked == before[name] - after[name]      # only what moved
        assert revoked <= moved_to_new
    assert {p for kind, ps in rebalance_history["rd-2"] if kind == "assigned" for p in ps} == moved_to_new


# ---------------------------------------------------------------- (e) coordinator failover


def find_coordinator(bootstrap: str, group: str) -> int:
    for address in bootstrap.split(","):
        connection = BrokerConnection(*parse_address(address), client_id="probe", timeout_s=2)
        try:
            answer = connection.request(FindCoordinatorRequest[3](key=group, key_type=0))
            if answer.error_code == 0:
                return answer.node_id
        except OSError:
            continue
        finally:
            connection.close()
    raise AssertionError("no broker answered FindCoordinator")


def committed_offsets(address: str, group: str, topic: str) -> dict[int, int]:
    connection = BrokerConnection(*parse_address(address), client_id="probe", timeout_s=5)
    try:
        answer = connection.request(OffsetFetchRequest[7](group_id=group, topics=[
            OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=list(range(PARTITIONS)))],
            require_stable=False))
    finally:
        connection.close()
    assert answer.error_code == 0, answer
    return {p.partition_index: p.committed_offset for t in answer.topics for p in t.partitions}


@pytest.mark.slow
def test_coordinator_failover_keeps_the_group_and_its_offsets(cluster_factory, names, tmp_path, monkeypatch):
    topic, group = names
    coordinator_events = tmp_path / "coordinator.jsonl"
    monkeypatch.setenv("REBALANCE_LAB_COORDINATOR_EVENTS", str(coordinator_events))
    cluster = cluster_factory(3)
    create_topic(cluster.bootstrap, topic, PARTITIONS)
    produce(cluster.bootstrap, topic, 60)
    recorder = EventRecorder(tmp_path / "events.jsonl", backend="classic")
    workers = [modern_worker(f"ours-{i}", cluster.bootstrap, topic, group, recorder) for i in range(2)]
    try:
        wait_until(lambda: complete_and_disjoint(workers), "a complete assignment")
        wait_until(lambda: len({rec for w in workers for rec in w.seen}) >= 60, "all records consumed")
        old = find_coordinator(cluster.bootstrap, group)
        other = next(b for b in cluster.brokers if b.node_id != old)
        assert not_coordinator_answer(other.address, group)      # only the partition's leader coordinates
        wait_until(lambda: committed_offsets(cluster.brokers[old].address, group, topic)
                   == {p: 10 for p in range(PARTITIONS)}, "every offset committed at 10")
        cluster.kill(old)
        survivors = [b.node_id for b in cluster.brokers if b.node_id != old]
        cluster.wait_for_live(survivors)
        new = find_coordinator(cluster.live_bootstrap, group)
        assert new != old
        # The new coordinator replayed __consumer_offsets: the offsets are there.
        wait_until(lambda: _offsets_or_none(cluster.brokers[new].address, group, topic)
                   == {p: 10 for p in range(PARTITIONS)}, "the new coordinator to serve the committed offsets")
        kill_mark = time.monotonic_ns()
        produce(cluster.live_bootstrap, topic, 30, start=60)
        wait_until(lambda: len({rec for w in workers for rec in w.seen}) >= 90, "the records produced after the kill")
        wait_until(lambda: committed_offsets(cluster.brokers[new].address, group, topic)
                   == {p: 15 for p in range(PARTITIONS)}, "commits through the new coordinator")
    finally:
        for worker in workers:
            worker.stop()
        recorder.close()
    records = [rec for w in workers for rec in w.seen]
    assert len(set(records)) == 90
    events = list(read_events(tmp_path / "events.jsonl"))
    after = [e for e in events if e["ts_ns"] > kill_mark]
    assert any(e["type"] == "coordination_request" and e["op"] == "FindCoordinator" for e in events)
    assert any(e["type"] == "offsets_committed" for e in after)
    server = [e for e in read_events(coordinator_events) if e.get("group") == group]
    loaded = [e for e in server if e["event"] == "loaded" and e["node"] == new]
    assert loaded and loaded[0]["state"] == "Stable" and loaded[0]["members"] == 2 and loaded[0]["offsets"] == 6
    assert any(e["event"] == "state" and e["to_state"] == "Stable" and e["node"] == old for e in server)


def not_coordinator_answer(address: str, group: str) -> bool:
    connection = BrokerConnection(*parse_address(address), client_id="probe", timeout_s=5)
    try:
        answer = connection.request(HeartbeatRequest[3](group_id=group, generation_id=1, member_id="m",
                                                        group_instance_id=None))
    finally:
        connection.close()
    return errors.for_code(answer.error_code) is errors.NOT_COORDINATOR


def _offsets_or_none(address: str, group: str, topic: str) -> dict[int, int] | None:
    try:
        return committed_offsets(address, group, topic)
    except (AssertionError, OSError):
        return None  # still loading, or not yet the coordinator in its own view


def test_listener_sees_assignment_through_the_member(cluster_factory, names):
    topic, group = names
    cluster = cluster_factory(1)
    create_topic(cluster.bootstrap, topic, PARTITIONS)

    class Recording(RebalanceListener):
        def __init__(self) -> None:
            self.calls: list[tuple[str, set[TopicPartition]]] = []

        def on_partitions_assigned(self, partitions):
            self.calls.append(("assigned", partitions))

        def on_partitions_revoked(self, partitions):
            self.calls.append(("revoked", partitions))

    listener = Recording()
    member = ModernMember(MemberConfig(group=group, topics=(topic,), member_name="solo", bootstrap=cluster.bootstrap),
                          listener=listener)
    member.start()
    try:
        wait_until(lambda: member.poll(0.05) is not None and len(member.assignment()) == PARTITIONS, "an assignment")
    finally:
        member.close()
    assert listener.calls[0] == ("assigned", {TopicPartition(topic, p) for p in range(PARTITIONS)})
    assert listener.calls[-1][0] == "revoked"
    metrics = member.metrics()
    assert metrics["rebalance-total"] == 1 and metrics["failed-rebalance-total"] == 0
    assert metrics["join-time-max"] >= 300 * 0.9  # the coordinator's initial delay is part of the join


def test_our_cooperative_members_revoke_only_what_moves_in_two_rounds(cluster_factory, names, tmp_path):
    topic, group = names
    cluster = cluster_factory(1)
    create_topic(cluster.bootstrap, topic, PARTITIONS)
    path = tmp_path / "events.jsonl"
    recorder = EventRecorder(path, backend="classic")
    workers = [modern_worker(f"coop-{i}", cluster.bootstrap, topic, group, recorder, "cooperative-sticky")
               for i in range(2)]
    try:
        wait_until(lambda: complete_and_disjoint(workers) and all(len(w.owned) == 3 for w in workers),
                   "two cooperative members with three partitions each")
        before = {w.name: set(w.owned) for w in workers}
        mark = time.monotonic_ns()
        workers.append(modern_worker("coop-2", cluster.bootstrap, topic, group, recorder, "cooperative-sticky"))
        wait_until(lambda: complete_and_disjoint(workers) and all(len(w.owned) == 2 for w in workers),
                   "three members with two partitions each")
        after = {w.name: set(w.owned) for w in workers}
        events = [e for e in read_events(path) if e["ts_ns"] > mark]
    finally:
        for worker in workers:
            worker.stop()
        recorder.close()
    for name in ("coop-0", "coop-1"):
        revoked = {TopicPartition.parse(p).partition for e in events
                   if e["type"] == "partitions_revoked" and e["member"] == name for p in e["partitions"]}
        assert revoked == before[name] - after[name]                     # only what moved
        assert not any(e["type"] == "partitions_lost" for e in events)
    newcomer = [e for e in events if e["type"] == "rebalance_completed" and e["member"] == "coop-2"]
    # Round one gives the newcomer nothing that still had an owner; round two hands it over.
    assert len({e["generation"] for e in newcomer}) >= 2 and newcomer[0]["assigned"] == []
    assert {TopicPartition.parse(p).partition for p in newcomer[-1]["assigned"]} == after["coop-2"]
