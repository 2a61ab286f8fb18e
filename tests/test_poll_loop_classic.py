"""The classic member's poll loop, as Kafka 3.7's `KafkaConsumer.poll` / `ConsumerCoordinator.poll`.

A member learns of a rebalance only in `poll()`: its heartbeat thread only notes the coordinator's
REBALANCE_IN_PROGRESS (`HeartbeatResponseHandler` -> `requestRejoin`); the JoinGroup, and an eager
member's revocation of everything (`onJoinPrepare`), come from the application's next poll
(`ensureActiveGroup`). The coordinator completes the join phase once every member has rejoined, up to
the rebalance timeout (`max.poll.interval.ms`), so one member busy with a long batch holds the whole group:
nobody gets a new assignment until it polls. An eager member that has rejoined owns nothing meanwhile; a
cooperative one keeps its partitions and keeps getting records.

Elsewhere: a member that exceeds `max.poll.interval.ms` leaves the group
(`tests/test_modern_member.py::test_max_poll_interval_makes_a_member_leave_and_lose_its_partitions`);
`max.poll.records` (500) bounds a batch (`tests/test_fetcher.py::test_at_most_max_poll_records_per_poll_and_none_lost`).

Real members against a real broker process; waits are for observed effects, and the one fixed span (the
busy member's batch) only makes room for what must not happen.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from kafka import KafkaProducer

from broker.admin import create_topic
from modern.classic.member import ModernMember
from modern.classic.membership_states import MembershipState
from rebalance.events import EventRecorder, read_events
from rebalance.member import MemberConfig, RebalanceListener
from rebalance.types import TopicPartition
from tests.modern_support import wait_until

pytestmark = pytest.mark.broker

PARTITIONS = 4
BUSY_S = 8.0          # how long the busy member handles its batch without calling poll


@pytest.fixture
def cluster(broker_cluster, monkeypatch):
    monkeypatch.setenv("REBALANCE_LAB_GROUP_INITIAL_REBALANCE_DELAY_MS", "200")
    return broker_cluster(1)


class ThreadNoting(RebalanceListener):
    """Notes on which thread each revocation reached the application."""

    def __init__(self) -> None:
        self.revoked_on: list[tuple[str, set[TopicPartition]]] = []

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        self.revoked_on.append((threading.current_thread().name, set(partitions)))


class Application:
    """One member polled on a thread of its own, as an application polls it; `pause` stands for a long
    batch being handled (no poll), `resume` for the next poll."""

    def __init__(self, member: ModernMember, name: str) -> None:
        self.member = member
        self.name = name
        self.errors: list[BaseException] = []
        self.polls = 0
        self._polling = threading.Event()
        self._idle = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"app-{name}", daemon=True)

    def start(self) -> Application:
        self.member.start()
        self._polling.set()
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._polling.is_set():
                self._idle.set()
                self._polling.wait(0.1)
                continue
            self._idle.clear()
            try:
                self.member.poll(0.05)
                self.polls += 1
            except BaseException as error:  # reported by stop()
                self.errors.append(error)
                return

    def pause(self) -> None:
        """Stop polling; returns once the poll under way has returned."""
        self._polling.clear()
        wait_until(self._idle.is_set, f"{self.name} to finish its poll")

    def resume(self) -> None:
        self._polling.set()

    def stop(self) -> None:
        self._stop.set()
        self._polling.set()
        self._thread.join(timeout=30)
        self.member.close()
        assert not self.errors, self.errors


class Producing:
    """Records keep arriving on every partition while the test runs."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
        self._topic = topic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        seq = 0
        while not self._stop.wait(0.02):
            value = json.dumps({"seq": seq, "ts_ms": int(time.time() * 1000)}).encode()
            self._producer.send(self._topic, value, partition=seq % PARTITIONS)
            seq += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._producer.close()


def joins_sent(member: ModernMember) -> int:
    return member.coordinator.requests.sent.get("JoinGroup", 0)


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_a_member_busy_with_a_batch_holds_the_whole_group_until_it_polls(cluster, tmp_path, strategy):
    """`busy` and `steady` share four partitions; `busy` stops polling (a long batch) and a newcomer
    joins. For the whole batch: busy's heartbeat thread notes the rebalance but sends no JoinGroup and
    revokes nothing; steady and the newcomer, polled all along, rejoin and wait; the newcomer gets
    nothing. Eager steady owns nothing meanwhile; cooperative steady keeps its two partitions and
    keeps getting records. Once busy polls again it rejoins (eager: revoking everything on its polling
    thread), and only then does anyone get the new assignment."""
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, PARTITIONS)
    path = tmp_path / "events.jsonl"
    recorder = EventRecorder(path, backend="classic")
    busy_listener = ThreadNoting()

    def member(name: str, listener: RebalanceListener | None = None) -> ModernMember:
        return ModernMember(MemberConfig(group=group, topics=(topic,), member_name=name, strategy=strategy,
                                         bootstrap=cluster.bootstrap, session_timeout_ms=6000,
                                         auto_commit_interval_ms=600_000,
                                         extra={"heartbeat.interval.ms": 300, "max.poll.interval.ms": 60_000}),
                            listener=listener, recorder=recorder)

    producing = Producing(cluster.bootstrap, topic)
    apps: list[Application] = []
    try:
        busy = Application(member("busy", busy_listener), "busy").start()
        apps.append(busy)
        steady = Application(member("steady"), "steady").start()
        apps.append(steady)
        wait_until(lambda: len(busy.member.assignment()) == 2 == len(steady.member.assignment())
                   and not busy.member.coordinator.rejoin_pending and not steady.member.coordinator.rejoin_pending,
                   "two partitions each, the group stable")
        busy_owned = busy.member.assignment()
        steady_owned = steady.member.assignment()

        busy.pause()
        busy_stopped_ns = time.monotonic_ns()
        revocations_before = len(busy_listener.revoked_on)
        busy_joins = joins_sent(busy.member)
        steady_joins = joins_sent(steady.member)
        newcomer = Application(member("newcomer"), "newcomer").start()
        apps.append(newcomer)
        # The rebalance is under way: both polled members have sent their JoinGroup, and busy's heartbeat
        # thread has heard of it.
        wait_until(lambda: joins_sent(steady.member) > steady_joins and joins_sent(newcomer.member) > 0,
                   "steady and the newcomer to rejoin")
        wait_until(lambda: busy.member.coordinator.rejoin_pending, "busy's heartbeat to hear of the rebalance")
        joined_ns = time.monotonic_ns()
        time.sleep(max(0.0, BUSY_S - (joined_ns - busy_stopped_ns) / 1e9))
        # End of the batch; nothing has moved yet.
        assert newcomer.member.assignment() == set(), "the newcomer got partitions while busy was not polling"
        assert joins_sent(busy.member) == busy_joins, "busy rejoined without a poll"
        assert busy.member.coordinator.membership.state is MembershipState.STABLE
        assert busy.member.assignment() == busy_owned and len(busy_listener.revoked_on) == revocations_before
        if strategy == "range":
            assert steady.member.assignment() == set()
        else:
            assert steady.member.assignment() == steady_owned
        resumed_ns = time.monotonic_ns()
        busy.resume()

        def settled() -> bool:
            owned = [app.member.assignment() for app in apps]
            return all(owned) and sum(map(len, owned)) == PARTITIONS and not any(
                app.member.coordinator.rejoin_pending for app in apps)

        wait_until(settled, "the three members to share the partitions")
    finally:
        producing.stop()
        try:
            for app in apps:
                app.stop()
        finally:
            recorder.close()

    events = list(read_events(path))

    def of(member_name: str, kind: str) -> list[dict]:
        """The member's events of that kind since busy stopped polling."""
        return [e for e in events if e["member"] == member_name and e["type"] == kind
                and e["ts_ns"] > busy_stopped_ns]

    # Nobody completed a rebalance while busy handled its batch.
    completed_during = [e for e in events if e["type"] == "rebalance_completed"
                        and busy_stopped_ns < e["ts_ns"] < resumed_ns]
    assert not completed_during, completed_during
    assert of("newcomer", "rebalance_completed")[0]["ts_ns"] > resumed_ns
    if strategy == "range":
        # Eager: busy revoked everything it owned in its first poll after the batch, on its polling thread.
        assert busy_listener.revoked_on[revocations_before] == ("app-busy", busy_owned)
        assert of("busy", "partitions_revoked")[0]["ts_ns"] > resumed_ns
        revoked_at = of("steady", "partitions_revoked")[0]["ts_ns"]
        assert revoked_at < resumed_ns
        assert not [e for e in of("steady", "records_consumed") if revoked_at < e["ts_ns"] < resumed_ns]
    else:
        # Cooperative: steady kept consuming its own partitions while its JoinGroup waited for busy.
        kept = [e for e in of("steady", "records_consumed") if joined_ns < e["ts_ns"] < resumed_ns]
        assert kept, "cooperative steady got no records while it waited in the join"
        assert {TopicPartition(e["topic"], e["partition"]) for e in kept} <= steady_owned
        assert not [e for e in of("steady", "partitions_revoked") if e["ts_ns"] < resumed_ns]
