"""The classic client's commits and heartbeats behave as Kafka's consumer does.

Each test runs real members against real broker processes and reads the members' own events
afterwards; waits are for observed effects, never for a fixed time.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid

import pytest
from kafka import KafkaProducer
from kafka.protocol.consumer import LeaveGroupRequest

from broker.admin import create_topic
from experiments.faults.proxy import ProxyHub, Toxic
from experiments.folders.run_folder import RunFolder
from experiments.scenario import LinkFault
from modern.classic.member import ModernMember, settings_from
from modern.client.connection import BrokerConnection, ConnectionFailed, parse_address
from modern.client.fetched import CommitFailedError
from modern.common import errors
from rebalance.assignors import CooperativeStickyAssignor, RangeAssignor
from rebalance.events import EventRecorder, read_events
from rebalance.member import MemberConfig
from rebalance.types import TopicPartition
from tests.modern_support import produce as produce_records
from tests.modern_support import wait_until

pytestmark = pytest.mark.broker

PARTITIONS = 4
WAIT_S = 90


class SlowCooperativeSticky(CooperativeStickyAssignor):
    """cooperative-sticky whose leader takes a second to assign: its SyncGroup is held that long."""

    def assign(self, *args, **kwargs):
        time.sleep(1.0)
        return super().assign(*args, **kwargs)


class VerySlowRange(RangeAssignor):
    """range whose leader takes longer than a session timeout (6 s) to assign."""

    def assign(self, *args, **kwargs):
        time.sleep(8.0)
        return super().assign(*args, **kwargs)


@pytest.fixture
def cluster(broker_cluster, monkeypatch, tmp_path):
    monkeypatch.setenv("REBALANCE_LAB_GROUP_INITIAL_REBALANCE_DELAY_MS", "200")
    return broker_cluster(1, advertise_map=RunFolder(tmp_path).advertised)


@pytest.fixture
def names():
    suffix = uuid.uuid4().hex[:8]
    return f"topic-{suffix}", f"group-{suffix}"


def produce(bootstrap: str, topic: str, count: int) -> None:
    produce_records(bootstrap, topic, count, partitions=PARTITIONS)


class Poller:
    """A member polled on a thread of its own, as an application polls it."""

    def __init__(self, member: ModernMember) -> None:
        self.member = member
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Poller:
        self.member.start()
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.member.poll(0.05)
            except BaseException as error:  # the test reports it
                self.errors.append(error)
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.member.close()
        assert not self.errors, self.errors


class Members:
    """The members a test starts, each polled on its own thread; all closed, and the recorder with
    them, when the block ends."""

    def __init__(self, recorder: EventRecorder) -> None:
        self.recorder = recorder
        self.pollers: list[Poller] = []

    def start(self, member: ModernMember) -> ModernMember:
        self.pollers.append(Poller(member).start())
        return member

    def __enter__(self) -> Members:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            for poller in self.pollers:
                poller.stop()
        finally:
            self.recorder.close()


def member(cluster, topic: str, group: str, name: str, recorder: EventRecorder, *, strategy: str, bootstrap=None,
           session_ms: int = 6000, commit_interval_ms: int = 5000, **extra) -> ModernMember:
    return ModernMember(MemberConfig(group=group, topics=(topic,), member_name=name, strategy=strategy,
                                     bootstrap=bootstrap or cluster.bootstrap, session_timeout_ms=session_ms,
                                     auto_commit_interval_ms=commit_interval_ms, extra=extra), recorder=recorder)


def events_of(path) -> list[dict]:
    return list(read_events(path))


def generations(events: list[dict], name: str) -> list[int]:
    return [e["generation"] for e in events if e["type"] == "rebalance_completed" and e["member"] == name]


def committed_after_revoking(events: list[dict], name: str) -> bool:
    mine = [e["type"] for e in events if e["member"] == name]
    return "partitions_revoked" in mine and "offsets_committed" in mine[mine.index("partitions_revoked"):]


def test_default_heartbeat_interval_is_kafkas_fixed_three_seconds():
    config = MemberConfig(group="g", topics=("t",), bootstrap="h:1", session_timeout_ms=6000)
    assert settings_from(config, client_id="m").heartbeat_interval_ms == 3000


def test_commits_wait_for_a_stable_membership_while_the_leader_holds_its_sync(cluster, names, tmp_path):
    """The leader takes 1 s to assign; its own auto-commit runs every 100 ms meanwhile. Kafka sends no
    commit while rebalancing, so nobody is fenced: two cooperative rounds and no lost partitions."""
    topic, group = names
    create_topic(cluster.bootstrap, topic, PARTITIONS)
    produce(cluster.bootstrap, topic, 200)
    path = tmp_path / "events.jsonl"
    recorder = EventRecorder(path, backend="classic")
    slow = f"{__name__}:SlowCooperativeSticky"
    with Members(recorder) as members:
        first = members.start(member(cluster, topic, group, "first", recorder, strategy=slow, commit_interval_ms=100,
                                     **{"heartbeat.interval.ms": 500}))
        wait_until(lambda: len(first.assignment()) == PARTITIONS, "the first member to own everything")
        wait_until(lambda: sum(1 for e in events_of(path) if e["type"] == "offsets_committed") >= 3,
                   "the first member's auto-commits")
        joined_at = generations(events_of(path), "first")[-1]
        second = members.start(member(cluster, topic, group, "second", recorder, strategy=slow,
                                      commit_interval_ms=100, **{"heartbeat.interval.ms": 500}))
        wait_until(lambda: len(first.assignment()) == 2 == len(second.assignment()), "two partitions each")
        settled = time.monotonic()
        wait_until(lambda: time.monotonic() - settled > 3, "a quiet spell in which a spurious round would show")
    events = events_of(path)
    assert not [e for e in events if e["type"] == "partitions_lost"]
    assert generations(events, "first") == [joined_at, joined_at + 1, joined_at + 2]
    assert generations(events, "second") == [joined_at + 1, joined_at + 2]


def test_a_member_cut_from_its_coordinator_keeps_fetching_until_fenced(cluster, names, tmp_path):
    """The cut member's coordination link is black-holed for three session timeouts while its data link
    flows: it keeps consuming (a zombie beside the new owner), its heartbeat gives up at the session
    timeout, and once the link heals it learns it was fenced and a late commit is refused."""
    topic, group = names
    create_topic(cluster.bootstrap, topic, PARTITIONS)
    session_ms = 6000
    loop = asyncio.new_event_loop()
    loop_thread = threading.Thread(target=loop.run_forever, daemon=True)
    loop_thread.start()

    def on_loop(coroutine_or_call):
        if asyncio.iscoroutine(coroutine_or_call):
            return asyncio.run_coroutine_threadsafe(coroutine_or_call, loop).result(10)
        done = threading.Event()
        loop.call_soon_threadsafe(lambda: (coroutine_or_call(), done.set()))
        assert done.wait(10)

    hub = ProxyHub()
    proxy = on_loop(hub.add("cut", ("coord", "data"), "broker-0", parse_address(cluster.bootstrap)))
    RunFolder(tmp_path).advertised.write_text(json.dumps({"cut": {"0": proxy.address}}))
    path = tmp_path / "events.jsonl"
    recorder = EventRecorder(path, backend="classic")
    stop_producing = threading.Event()

    def keep_producing() -> None:
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, linger_ms=5)
        seq = 0
        while not stop_producing.is_set():
            producer.send(topic, json.dumps({"seq": seq, "ts_ms": int(time.time() * 1000)}).encode(),
                          partition=seq % PARTITIONS)
            seq += 1
            time.sleep(0.01)
        producer.close()

    producing = threading.Thread(target=keep_producing, daemon=True)
    producing.start()
    try:
        with Members(recorder) as members:
            cut = members.start(member(cluster, topic, group, "cut", recorder, strategy="range",
                                       bootstrap=proxy.address, session_ms=session_ms, commit_interval_ms=500,
                                       **{"heartbeat.interval.ms": 1000}))
            steady = members.start(member(cluster, topic, group, "steady", recorder, strategy="range",
                                          session_ms=session_ms, commit_interval_ms=500,
                                          **{"heartbeat.interval.ms": 1000}))
            wait_until(lambda: len(cut.assignment()) == 2 == len(steady.assignment()), "two each")
            wait_until(lambda: any(e["type"] == "offsets_committed" and e["member"] == "cut"
                                   for e in events_of(path)), "the cut member's first commit")
            cut_owned = set(cut.assignment())
            on_loop(lambda: hub.set_toxic("cut", "coord", Toxic(kind=LinkFault.PARTITION)))
            cut_at = time.time() * 1000
            wait_until(lambda: time.time() * 1000 - cut_at > 3 * session_ms, "three session timeouts", 60)
            late_positions = {tp: o for tp, o in cut._positions.items() if tp in cut_owned}
            assert late_positions
            heal_at = time.time() * 1000
            with cut._lock:  # no poll until the late commit is answered: it is the zombie's, not a rejoined member's
                on_loop(lambda: hub.set_toxic("cut", "coord", None))
                with pytest.raises(CommitFailedError) as refused:
                    cut.commit(late_positions)
            wait_until(lambda: any(e["type"] == "partitions_lost" and e["member"] == "cut"
                                   for e in events_of(path)), "the cut member to learn it was fenced")
            wait_until(lambda: len(cut.assignment()) == 2 == len(steady.assignment()), "two each again")
    finally:
        stop_producing.set()
        on_loop(hub.stop())
        loop.call_soon_threadsafe(loop.stop)
        loop_thread.join(10)
    events = events_of(path)
    # Refused by the coordinator (fenced) or, once the member knows, by the member itself.
    assert refused.value.error in (errors.UNKNOWN_MEMBER_ID, errors.ILLEGAL_GENERATION, errors.REBALANCE_IN_PROGRESS)
    zombie = [e for e in events if e["type"] == "records_consumed" and e["member"] == "cut"
              and cut_at + 2 * session_ms < e["ts_ms"] < heal_at]
    assert zombie, "the cut member stopped consuming before it was fenced"
    taken_over = [e for e in events if e["type"] == "partitions_assigned" and e["member"] == "steady"
                  and cut_at < e["ts_ms"] < heal_at]
    assert taken_over, "the steady member took the cut member's partitions over during the cut"
    gave_up = [e for e in events if e["type"] == "coordination_request" and e["member"] == "cut"
               and e["op"] == "Heartbeat" and e["error"] == "NETWORK_EXCEPTION" and cut_at < e["ts_ms"] < heal_at]
    assert gave_up, "the heartbeat waited past the session timeout on a stalled coordinator"
    late = [e for e in events if e["type"] == "offsets_committed" and e["member"] == "cut"
            and e["ts_ms"] > cut_at + 1000 and e["generation"] == generations(events, "cut")[0]]
    assert not late, "a commit of the fenced generation was accepted"


def test_an_unknown_member_id_from_join_declares_the_partitions_lost_before_rejoining(cluster, names, tmp_path):
    """A cooperative member removed while it rejoins gets UNKNOWN_MEMBER_ID from JoinGroup: it declares
    its partitions lost first, then joins again as a new member."""
    topic, group = names
    create_topic(cluster.bootstrap, topic, PARTITIONS)
    path = tmp_path / "events.jsonl"
    recorder = EventRecorder(path, backend="classic")
    beats = {"heartbeat.interval.ms": 4000}  # so the removal reaches JoinGroup before any heartbeat
    with Members(recorder) as members:
        first = members.start(member(cluster, topic, group, "first", recorder, strategy="cooperative-sticky",
                                     session_ms=12_000, **beats))
        wait_until(lambda: len(first.assignment()) == PARTITIONS, "the first member to own everything")
        members.start(member(cluster, topic, group, "second", recorder, strategy="cooperative-sticky",
                             session_ms=12_000, **beats))
        wait_until(lambda: len(first.assignment()) == 2, "the first member to revoke two partitions")
        # The removal must come after the rejoin's own commit: a commit refused with UNKNOWN_MEMBER_ID resets
        # the member id, and the JoinGroup that follows asks for a new one instead of being refused.
        wait_until(lambda: committed_after_revoking(events_of(path), "first"), "the first member's pre-join commit")
        member_id = [e for e in events_of(path) if e["type"] == "rebalance_completed" and e["member"] == "first"][-1][
            "member_id"]
        leave = BrokerConnection(*parse_address(cluster.bootstrap), client_id="admin", timeout_s=20)
        leave.request(LeaveGroupRequest[3](group_id=group, members=[
            LeaveGroupRequest.MemberIdentity(member_id=member_id, group_instance_id=None)]))
        leave.close()
        wait_until(lambda: any(e["type"] == "partitions_lost" and e["member"] == "first" for e in events_of(path)),
                   "the first member to declare its partitions lost")
    events = [e for e in events_of(path) if e["member"] == "first"]
    refused = next(i for i, e in enumerate(events) if e["type"] == "coordination_request" and e["op"] == "JoinGroup"
                   and e["error"] == "UNKNOWN_MEMBER_ID")
    lost = next(i for i, e in enumerate(events) if e["type"] == "partitions_lost")
    next_join = next(i for i, e in enumerate(events) if i > refused and e["type"] == "coordination_request"
                     and e["op"] == "JoinGroup")
    assert refused < lost < next_join


def test_a_leader_assigning_for_longer_than_a_session_keeps_its_membership(cluster, names, tmp_path):
    """Heartbeats run from the JoinGroup answer on: a leader that takes 8 s over a 6 s session is not
    evicted, and the group completes the generation on its first attempt."""
    topic, group = names
    create_topic(cluster.bootstrap, topic, PARTITIONS)
    path = tmp_path / "events.jsonl"
    recorder = EventRecorder(path, backend="classic")
    slow = f"{__name__}:VerySlowRange"
    with Members(recorder) as members:
        first = members.start(member(cluster, topic, group, "first", recorder, strategy=slow,
                                     **{"heartbeat.interval.ms": 1000}))
        wait_until(lambda: len(first.assignment()) == PARTITIONS, "the first member to own everything")
        second = members.start(member(cluster, topic, group, "second", recorder, strategy=slow,
                                      **{"heartbeat.interval.ms": 1000}))
        wait_until(lambda: len(first.assignment()) == 2 == len(second.assignment()), "two each")
    events = events_of(path)
    first_generation = generations(events, "first")[0]
    assert generations(events, "first") == [first_generation, first_generation + 1]
    assert generations(events, "second") == [first_generation + 1]
    assert not [e for e in events if e["type"] in ("partitions_lost", "rebalance_failed")]


def test_the_revocation_commit_is_retried_until_it_lands(cluster, names, tmp_path):
    """The commit that precedes giving partitions up fails twice (the coordinator unreachable); it is
    tried again with backoff, so the new owner starts exactly where the old one stopped."""
    topic, group = names
    create_topic(cluster.bootstrap, topic, PARTITIONS)
    produce(cluster.bootstrap, topic, 40)
    path = tmp_path / "events.jsonl"
    recorder = EventRecorder(path, backend="classic")
    with Members(recorder) as members:
        first = members.start(member(cluster, topic, group, "first", recorder, strategy="range",
                                     commit_interval_ms=600_000))
        wait_until(lambda: first._positions and all(
            first._positions.get(TopicPartition(topic, p)) == 10 for p in range(PARTITIONS)),
            "the first member to consume everything")
        coordinator = first.coordinator
        real_send = coordinator._send
        failures = [2]

        def flaky_send(connection, op, request, **kwargs):
            if op == "OffsetCommit" and failures[0] > 0:
                failures[0] -= 1
                raise ConnectionFailed("coordinator unreachable (injected)")
            return real_send(connection, op, request, **kwargs)

        coordinator._send = flaky_send
        second = members.start(member(cluster, topic, group, "second", recorder, strategy="range"))
        wait_until(lambda: len(first.assignment()) == 2 == len(second.assignment()), "two each")
    events = events_of(path)
    handed_over = [e for e in events if e["type"] == "partitions_assigned" and e["member"] == "second"][-1]
    assert handed_over["committed"] == {tp: 10 for tp in handed_over["partitions"]}


def test_cooperative_revocation_commits_nothing_and_the_pre_join_commit_holds_no_records_back(cluster, names, tmp_path):
    """Kafka's cooperative consumer commits once per rebalance, before the JoinGroup (onJoinPrepare), and
    keeps handing out records while that commit is out; after the SyncGroup it only tells the listener
    what was revoked (onJoinComplete). So the new owner of a revoked partition starts at the pre-join
    commit and consumes again what the old owner consumed after it. Here the pre-join commit takes 3 s
    (several polls' time even on a loaded machine) and the leader takes 1 s to assign, while records keep
    arriving."""
    topic, group = names
    create_topic(cluster.bootstrap, topic, PARTITIONS)
    path = tmp_path / "events.jsonl"
    recorder = EventRecorder(path, backend="classic")
    stop_producing = threading.Event()

    def keep_producing() -> None:
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, linger_ms=5)
        seq = 0
        while not stop_producing.is_set():
            producer.send(topic, json.dumps({"seq": seq, "ts_ms": int(time.time() * 1000)}).encode(),
                          partition=seq % PARTITIONS)
            seq += 1
            time.sleep(0.01)
        producer.close()

    producing = threading.Thread(target=keep_producing, daemon=True)
    producing.start()
    slow = f"{__name__}:SlowCooperativeSticky"
    window: list[float] = []
    try:
        with Members(recorder) as members:
            first = members.start(member(cluster, topic, group, "first", recorder, strategy=slow,
                                         commit_interval_ms=600_000, **{"heartbeat.interval.ms": 500}))
            wait_until(lambda: len(first.assignment()) == PARTITIONS, "the first member to own everything")
            wait_until(lambda: sum(1 for e in events_of(path) if e["type"] == "records_consumed") >= 20,
                       "the first member consuming")
            coordinator = first.coordinator
            real_send = coordinator._send

            def slow_pre_join_commit(connection, op, request, **kwargs):
                if op == "OffsetCommit" and not window:
                    window.append(time.time() * 1000)
                    time.sleep(3.0)
                    answer = real_send(connection, op, request, **kwargs)
                    window.append(time.time() * 1000)
                    return answer
                return real_send(connection, op, request, **kwargs)

            coordinator._send = slow_pre_join_commit
            second = members.start(member(cluster, topic, group, "second", recorder, strategy=slow,
                                          commit_interval_ms=600_000, **{"heartbeat.interval.ms": 500}))
            wait_until(lambda: len(first.assignment()) == 2 == len(second.assignment()), "two partitions each")
    finally:
        stop_producing.set()
        producing.join(10)
    events = events_of(path)
    assert len(window) == 2
    during = [e for e in events if e["type"] == "records_consumed" and e["member"] == "first"
              and window[0] + 100 < e["ts_ms"] < window[1] - 100]
    assert during, "records were held back while the pre-join commit was out"
    revoked_at = next(e["ts_ms"] for e in events if e["type"] == "partitions_revoked" and e["member"] == "first")
    handed = [e for e in events if e["type"] == "partitions_assigned" and e["member"] == "second"]
    starts = {tp: offset for e in handed for tp, offset in e["committed"].items()}
    last_seen = {}
    for e in events:
        if e["type"] == "records_consumed" and e["member"] == "first" and e["ts_ms"] <= revoked_at:
            last_seen[f"{e['topic']}-{e['partition']}"] = e["last_offset"]
    # The pre-join commit's own event is written once its answer is back, a moment after window[1]: from the
    # commit's start to the revocation there is that one and no other.
    commits = [e for e in events if e["type"] == "offsets_committed" and e["member"] == "first"
               and window[0] <= e["ts_ms"] <= revoked_at]
    assert len(commits) <= 1, f"a commit between the pre-join commit and the revocation: {commits[1:]}"
    again = {tp: last_seen[tp] + 1 - start for tp, start in starts.items() if tp in last_seen}
    assert again and any(count > 0 for count in again.values()), (starts, last_seen)
