"""ModernMember and its client pieces: settings, heartbeat timing, metrics, max.poll.interval.ms, CLI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from kafka.protocol.consumer import (
    JoinGroupResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorResponse

from broker.admin import create_topic
from modern.classic.abstract_coordinator import GroupMembership, JoinOutcome, now_ms
from modern.classic.consumer_coordinator import ConsumerCoordinator
from modern.classic.consumer_protocol import decode_subscription, encode_assignment
from modern.classic.member import ModernMember, settings_from
from modern.classic.membership_states import HeartbeatTimer, Membership, MembershipState
from modern.classic.settings import ClientSettings
from modern.client.coordinator_lookup import Coordinator, ExponentialBackoff
from modern.common import errors
from rebalance.backends import profile
from rebalance.events import EventRecorder, NullRecorder, read_events
from rebalance.member import Member, MemberConfig, member_name_of
from rebalance.metrics import RebalanceMetrics
from rebalance.types import Assignment, Generation, TopicPartition

BOOT = (("127.0.0.1", 9092),)


def settings(**overrides) -> ClientSettings:
    values = dict(group="g", topics=("t",), bootstrap=BOOT, client_id="c", session_timeout_ms=10_000,
                  heartbeat_interval_ms=3000, max_poll_interval_ms=20_000)
    values.update(overrides)
    return ClientSettings(**values)


def test_heartbeat_timer_is_pure_time_arithmetic():
    timer = HeartbeatTimer(settings(), now=0)
    assert timer.time_to_next_heartbeat(1000) == 2000
    timer.sent(3000)
    assert timer.time_to_next_heartbeat(3000) == 3000
    timer.failed(3100, 0.5)
    assert timer.time_to_next_heartbeat(3100) == 100        # retried after retry.backoff.ms (100)
    assert not timer.session_expired(10_000)
    assert timer.session_expired(10_001)                    # no successful answer for the session timeout
    timer.received(9000)
    assert not timer.session_expired(19_000)
    assert not timer.poll_timeout_expired(20_000)
    assert timer.poll_timeout_expired(20_001)
    timer.polled(20_001)
    assert not timer.poll_timeout_expired(40_001)


def test_a_failed_heartbeat_backs_off_exponentially_until_one_is_answered():
    """Kafka's Heartbeat.failHeartbeat: the next try after retry.backoff.ms * 2^failures (capped at
    retry.backoff.max.ms, +-20 % jitter), counted from the failure; receiveHeartbeat resets the count."""
    timer = HeartbeatTimer(settings(), now=0)
    waits = []
    for failure in range(6):
        now = 10_000 + failure * 5_000
        timer.sent(now - 10)
        timer.failed(now, 0.5)
        waits.append(timer.time_to_next_heartbeat(now))
    assert waits == [100, 200, 400, 800, 1000, 1000]
    timer.sent(50_000)
    timer.failed(50_010, 0.0)
    assert timer.time_to_next_heartbeat(50_010) == 800         # 1,000 less 20 %: the jitter applies at the cap
    timer.received(50_900)                                      # an answer (NONE or REBALANCE_IN_PROGRESS)
    timer.failed(51_000, 0.5)
    assert timer.time_to_next_heartbeat(51_000) == 100
    timer.failed(51_100, 0.999)
    assert 200 < timer.time_to_next_heartbeat(51_100) < 240   # the second try again, below +20 %
    timer.reset(52_000)                                         # a JoinGroup answer: the count is kept
    assert timer.time_to_next_heartbeat(52_000) == 3000
    timer.failed(52_100, 0.5)
    assert timer.time_to_next_heartbeat(52_100) == 400


def test_finding_the_coordinator_again_resets_the_session_not_the_heartbeat():
    """Kafka's FindCoordinator answer resets only the session timer (resetSessionTimeout): a heartbeat that
    failed on the old coordinator is retried when its backoff ends once the new one is known, not a whole
    heartbeat interval later (which added up to 3 s to the time without a coordinator)."""
    membership = GroupMembership(settings(), recorder=NullRecorder(), member_name="m")
    membership._connect = lambda host, port: None
    now = now_ms()
    membership._timer.sent(now - 1000)
    membership._timer.failed(now - 500, 0.5)                  # the old coordinator refused it
    membership._install_coordinator(Coordinator(node_id=1, host="127.0.0.1", port=1))
    assert membership._timer.time_to_next_heartbeat(now_ms()) == 0
    assert membership._timer.session_remaining_ms(now_ms()) > 9_000


def test_settings_validate_and_map_kafka_names():
    config = MemberConfig(group="g", topics=("t",), bootstrap="h:1,k:2", member_name="m", session_timeout_ms=9000,
                          extra={"max.poll.interval.ms": 5000})
    mapped = settings_from(config, client_id="m")
    assert mapped.bootstrap == (("h", 1), ("k", 2))
    assert mapped.heartbeat_interval_ms == 3000 and mapped.effective_rebalance_timeout_ms == 5000
    with pytest.raises(ValueError, match="heartbeat.interval.mss"):
        settings_from(MemberConfig(group="g", topics=("t",), bootstrap="h:1", extra={"heartbeat.interval.mss": 1}),
                      client_id="m")
    with pytest.raises(ValueError, match="bootstrap"):
        settings_from(MemberConfig(group="g", topics=("t",)), client_id="m")
    with pytest.raises(ValueError, match="heartbeat.interval.ms"):
        settings(heartbeat_interval_ms=10_000)


def test_metrics_use_kafka_names():
    metrics = RebalanceMetrics()
    metrics.join_completed(10)
    metrics.sync_completed(2)
    metrics.rebalance_completed(15, now_s=100.0)
    metrics.rebalance_completed(25, now_s=101.0)
    metrics.rebalance_failed()
    snap = metrics.snapshot(now_s=103.5)
    assert snap["rebalance-latency-avg"] == 20 and snap["rebalance-latency-max"] == 25
    assert snap["rebalance-latency-total"] == 40 and snap["rebalance-total"] == 2
    assert snap["failed-rebalance-total"] == 1
    assert snap["join-time-max"] == 10 and snap["sync-time-avg"] == 2
    assert snap["last-rebalance-seconds-ago"] == 2.5


def test_backend_registry_builds_a_member():
    member = profile("classic").make(MemberConfig(group="g", topics=("t",), bootstrap="127.0.0.1:1", member_name="x"))
    assert isinstance(member, ModernMember) and isinstance(member, Member)
    assert member.member_id == "x" and member.assignment() == set()


# ---------------------------------------------------------------- the client against a scripted coordinator
#
# Kafka 3.7's ConsumerCoordinator / AbstractCoordinator rules for commits and the coordinator lookup,
# each checked against a connection that answers from a script (no broker, no clock to wait on).

TP = TopicPartition("t", 0)


class Scripted:
    """A coordinator connection answering from a script: API name -> answers in order; an answer may be
    a response, an exception to raise, or a callable giving either."""

    address = "stub:1"

    def __init__(self, **answers) -> None:
        self.answers = {name: list(script) for name, script in answers.items()}
        self.sent: list[str] = []
        self.aborted = 0

    def request(self, request, timeout_s=None):
        name = type(request).__name__.split("_")[0].removesuffix("Request")
        self.sent.append(name)
        answer = self.answers[name].pop(0)
        answer = answer() if callable(answer) else answer
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def abort(self) -> None:
        self.aborted += 1

    def close(self) -> None:
        pass


class Hooks:
    """PartitionHooks that only record what they were told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def revoke(self, partitions):
        self.calls.append(("revoke", set(partitions)))

    def assign(self, partitions):
        self.calls.append(("assign", set(partitions)))

    def lose(self, partitions):
        self.calls.append(("lose", set(partitions)))

    def positions(self):
        return {TP: 7}

    def committed(self, offsets, error, generation):
        self.calls.append(("committed", errors.name_of(error)))

    def rebalanced(self):
        self.calls.append(("rebalanced", None))


def commit_answer(error) -> OffsetCommitResponse:
    topic = OffsetCommitResponse.OffsetCommitResponseTopic
    return OffsetCommitResponse[7](throttle_time_ms=0, topics=[topic(name="t", partitions=[
        topic.OffsetCommitResponsePartition(partition_index=0, error_code=error.errno)])])


def find_answer(port: int = 1) -> FindCoordinatorResponse:
    return FindCoordinatorResponse[3](throttle_time_ms=0, error_code=0, error_message=None, node_id=0,
                                      host="stub", port=port)


def stable_member(connection: Scripted, *, generation: int = 5, **overrides) -> tuple[ConsumerCoordinator, Hooks]:
    """A member stable in `generation`, owning t-0, whose coordinator connections are `connection`."""
    hooks = Hooks()
    member = ConsumerCoordinator(settings(**overrides), hooks, recorder=NullRecorder(), member_name="m")
    member._main = member._join = member._beat = connection
    member.coordinator, member._coordinator_known = (0, "stub", 1), True
    member._set(Membership(state=MembershipState.STABLE, generation=Generation(generation, "m-1", "range")))
    member._rejoin_reason = None
    member.owned = frozenset({TP})
    return member, hooks


@pytest.mark.parametrize("error", [errors.ILLEGAL_GENERATION, errors.UNKNOWN_MEMBER_ID])
@pytest.mark.parametrize("meanwhile, stale", [
    ("rejoining, same generation", False),       # Kafka: the member is reset (its partitions are lost)
    ("stable in a newer generation", False),     # reset too: not "rebalance in progress"
    ("rejoining after a newer generation", True),  # the only case read as "rebalance in progress"
])
def test_a_stale_commit_is_rebalance_in_progress_only_if_the_generation_moved_and_the_member_is_rejoining(
        error, meanwhile, stale):
    member: ConsumerCoordinator

    def answered():
        if meanwhile != "rejoining, same generation":   # a newer generation came while the commit was out
            member._set(Membership(state=MembershipState.STABLE, generation=Generation(6, "m-1", "range")))
        if meanwhile != "stable in a newer generation":
            member._set(member.membership.join_sent())
        return commit_answer(error)

    member, hooks = stable_member(Scripted(OffsetCommit=[answered]))
    got = member.commit({TP: 7})
    if stale:
        assert got is errors.REBALANCE_IN_PROGRESS and member.generation.is_valid
    else:
        assert got is error
        assert member.membership.state is MembershipState.UNJOINED and not member.generation.is_valid
        assert member.member_id == ("m-1" if error is errors.ILLEGAL_GENERATION else "")
        member.poll()                                 # the next poll declares the partitions lost, then rejoins
        assert ("lose", {TP}) in hooks.calls


def test_fenced_instance_id_on_a_commit_of_the_current_generation_is_fatal():
    member, hooks = stable_member(Scripted(OffsetCommit=[commit_answer(errors.FENCED_INSTANCE_ID)]),
                                  group_instance_id="static-1")
    assert member.commit({TP: 7}) is errors.FENCED_INSTANCE_ID
    with pytest.raises(errors.GroupError, match="FENCED_INSTANCE_ID"):
        member.poll()
    assert ("lose", {TP}) in hooks.calls            # declared lost before the error surfaces


def test_fenced_instance_id_on_a_commit_of_an_older_generation_is_not_fatal():
    member: ConsumerCoordinator

    def answered():
        member._set(Membership(state=MembershipState.STABLE, generation=Generation(6, "m-1", "range")))
        member._set(member.membership.join_sent())
        return commit_answer(errors.FENCED_INSTANCE_ID)

    member, hooks = stable_member(Scripted(OffsetCommit=[answered]), group_instance_id="static-1")
    assert member.commit({TP: 7}) is errors.REBALANCE_IN_PROGRESS
    assert member._fatal is None


def test_no_auto_commit_while_a_rejoin_is_pending_and_the_timer_restarts_after_each_join():
    member, hooks = stable_member(Scripted(OffsetCommit=[]))
    member.request_rejoin("heartbeat: REBALANCE_IN_PROGRESS")
    assert member.rejoin_pending
    assert not member.maybe_commit_async({TP: 7}, retry_soon=lambda: None)   # the poll that starts a join
    # commits nothing
    assert member._main.sent == []
    member._on_join_complete(JoinOutcome(generation=Generation(6, "m-1", "range"), leader="m-1",
                                         assignment=encode_assignment(Assignment((TP,))),
                                         started=time.monotonic(), attempts=1))
    assert ("rebalanced", None) in hooks.calls      # the member restarts its auto-commit interval


def wait_for(condition, what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def stable_modern_member(connection: Scripted) -> ModernMember:
    """A ModernMember (auto-commit every 5 s) stable in generation 5, owning t-0 at offset 7, whose
    coordinator connections are `connection`; never started."""
    member = ModernMember(MemberConfig(group="g", topics=("t",), bootstrap="127.0.0.1:1", member_name="m"))
    coordinator = member.coordinator
    coordinator._main = coordinator._join = coordinator._beat = connection
    coordinator.coordinator, coordinator._coordinator_known = (0, "stub", 1), True
    coordinator._set(Membership(state=MembershipState.STABLE, generation=Generation(5, "m-1", "range")))
    coordinator._rejoin_reason = None
    coordinator.owned = member._owned = frozenset({TP})
    member._positions = {TP: 7}
    return member


@pytest.mark.parametrize("answer, next_try_s", [
    (errors.COORDINATOR_LOAD_IN_PROGRESS, 0.1),     # retriable: after retry.backoff.ms
    (errors.NONE, 5.0),                             # done: a whole auto.commit.interval.ms
])
def test_a_retriable_auto_commit_failure_is_tried_again_after_retry_backoff(answer, next_try_s):
    """ConsumerCoordinator.autoCommitOffsetsAsync's callback: a RetriableCommitFailedException sets the
    auto-commit timer to retry.backoff.ms (nextAutoCommitTimer.updateAndReset), not a whole interval."""
    connection = Scripted(OffsetCommit=[commit_answer(answer)])
    member = stable_modern_member(connection)
    member._maybe_auto_commit()
    wait_for(lambda: connection.sent and not any(t.name == "commit-m" for t in threading.enumerate()),
             "the auto-commit")
    assert next_try_s - 0.5 < member._next_auto_commit - time.monotonic() <= next_try_s


def test_an_auto_commit_is_not_held_back_by_the_one_still_out_and_they_land_in_order():
    """3.7's classic auto-commit has no "one in flight" rule: a commit still unanswered when the interval
    passes does not stop the next one, which goes out after it (one connection, in order). One that cannot go
    out within request.timeout.ms fails as REQUEST_TIMED_OUT, retriable."""
    released = threading.Event()

    def slow_answer():
        released.wait(30)
        return commit_answer(errors.NONE)

    connection = Recording(OffsetCommit=[slow_answer, commit_answer(errors.NONE)])
    member, hooks = stable_member(connection)
    retried = []
    assert member.maybe_commit_async({TP: 7}, retry_soon=lambda: retried.append(7))
    wait_for(lambda: connection.sent, "the first commit to go out")
    assert member.maybe_commit_async({TP: 8}, retry_soon=lambda: retried.append(8))
    released.set()
    wait_for(lambda: len(connection.sent) == 2 and not len(member._commit_line), "both commits")
    offsets = [r.topics[0].partitions[0].committed_offset for _, r, _ in connection.requests]
    assert offsets == [7, 8] and retried == []

    held = threading.Event()
    connection = Recording(OffsetCommit=[lambda: held.wait(30) and commit_answer(errors.NONE)])
    member, hooks = stable_member(connection, request_timeout_ms=300)
    assert member.maybe_commit_async({TP: 9}, retry_soon=lambda: retried.append(9))
    wait_for(lambda: connection.sent, "the first commit to go out")
    assert member.maybe_commit_async({TP: 10}, retry_soon=lambda: retried.append(10))
    wait_for(lambda: retried == [10], "the queued commit to time out")
    assert ("committed", "REQUEST_TIMED_OUT") in hooks.calls and connection.sent == ["OffsetCommit"]
    held.set()
    wait_for(lambda: not len(member._commit_line), "the first commit's answer")


def test_coordinator_load_in_progress_is_retried_at_the_same_coordinator():
    member, _ = stable_member(Scripted(OffsetCommit=[commit_answer(errors.COORDINATOR_LOAD_IN_PROGRESS)]))
    assert member.commit({TP: 7}) is errors.COORDINATOR_LOAD_IN_PROGRESS
    assert member.coordinator_known                   # not "unknown": no FindCoordinator follows
    with pytest.raises(errors.GroupError):
        member._check_group_error("JoinGroup", errors.COORDINATOR_LOAD_IN_PROGRESS)
    assert member.coordinator_known
    member._check_group_error("JoinGroup", errors.NONE)
    with pytest.raises(errors.GroupError):
        member._check_group_error("SyncGroup", errors.NOT_COORDINATOR)
    assert not member.coordinator_known               # NOT_COORDINATOR: look it up again


def test_the_coordinator_fetch_also_retries_load_in_progress_at_the_same_coordinator():
    fetch_topic = OffsetFetchResponse.OffsetFetchResponseTopic
    answer = OffsetFetchResponse[7](throttle_time_ms=0, error_code=0, topics=[fetch_topic(name="t", partitions=[
        fetch_topic.OffsetFetchResponsePartition(partition_index=0, committed_offset=3, committed_leader_epoch=-1,
                                                 metadata="", error_code=0)])])
    loading = OffsetFetchResponse[7](throttle_time_ms=0, error_code=errors.COORDINATOR_LOAD_IN_PROGRESS.errno,
                                     topics=[])
    connection = Scripted(OffsetFetch=[loading, answer])
    member, _ = stable_member(connection)
    assert member.fetch_committed([TP]) == {TP: 3}
    assert connection.sent == ["OffsetFetch", "OffsetFetch"]     # no FindCoordinator in between


class Recording(Scripted):
    """A Scripted connection that also keeps each request and the timeout it was sent with."""

    def __init__(self, **answers) -> None:
        super().__init__(**answers)
        self.requests: list[tuple[str, object, float | None]] = []

    def request(self, request, timeout_s=None):
        self.requests.append((type(request).__name__.split("_")[0].removesuffix("Request"), request, timeout_s))
        return super().request(request, timeout_s)


def join_answer(generation: int, member_id: str = "m-1", leader: str = "leader-1") -> JoinGroupResponse:
    return JoinGroupResponse[5](throttle_time_ms=0, error_code=0, generation_id=generation,
                                protocol_type="consumer", protocol_name="cooperative-sticky", leader=leader,
                                skip_assignment=False, member_id=member_id, members=[])


def sync_answer(error=errors.NONE, partitions=(TP,)) -> SyncGroupResponse:
    return SyncGroupResponse[3](throttle_time_ms=0, error_code=error.errno, protocol_type=None, protocol_name=None,
                                assignment=encode_assignment(Assignment(partitions)) if error is errors.NONE else b"")


def test_a_retried_join_carries_the_current_generation_and_the_requests_keep_kafkas_timeouts():
    """Kafka's ConsumerCoordinator.metadata() is built for every JoinGroup: after a SyncGroup answered
    REBALANCE_IN_PROGRESS the next JoinGroup reports the generation the last JoinGroup gave (6), not the one
    the round started in (5), with the partitions still owned. JoinGroup waits max(request.timeout.ms,
    rebalance timeout + 5 s); SyncGroup request.timeout.ms (AbstractCoordinator.sendSyncGroupRequest)."""
    connection = Recording(OffsetCommit=[commit_answer(errors.NONE)],
                           JoinGroup=[join_answer(6), join_answer(7)],
                           SyncGroup=[sync_answer(errors.REBALANCE_IN_PROGRESS), sync_answer()])
    member, hooks = stable_member(connection, strategy="cooperative-sticky", max_poll_interval_ms=60_000,
                                  request_timeout_ms=20_000)
    member.request_rejoin("heartbeat: REBALANCE_IN_PROGRESS")
    wait_for(lambda: member.poll() and ("rebalanced", None) in hooks.calls, "the join to complete")
    assert member._fatal is None
    joins = [decode_subscription(bytes(request.protocols[0].metadata))
             for name, request, _ in connection.requests if name == "JoinGroup"]
    assert [j.generation for j in joins] == [5, 6]
    assert all(j.owned_partitions == (TP,) for j in joins)
    timeouts = {name: timeout for name, _, timeout in connection.requests}
    assert timeouts["JoinGroup"] == 65 and timeouts["SyncGroup"] == 20
    assert member.generation.generation_id == 7


def test_backoff_doubles_from_retry_backoff_to_its_maximum_with_jitter():
    backoff = ExponentialBackoff(100, 1000)
    assert [backoff.backoff_ms(n, 0.5) for n in range(6)] == [100, 200, 400, 800, 1000, 1000]
    assert backoff.backoff_ms(0, 0.0) == pytest.approx(80) and backoff.backoff_ms(0, 0.999) < 120
    assert backoff.backoff_ms(3, 0.999) < 1000 and backoff.backoff_ms(4, 0.0) == pytest.approx(800)  # the jitter goes
    # below the cap: the exponent stops growing at the cap (log2 10), then the draw applies
    assert max(backoff.backoff_ms(n, 0.999) for n in range(10)) == 1000          # never above the maximum
    assert ExponentialBackoff(100, 100).backoff_ms(5, 0.9) == 100                 # no room to grow: constant


def test_one_coordinator_lookup_serves_every_thread_and_cuts_no_connection_in_use():
    """The heartbeat thread and the polling thread both find the coordinator unknown: one FindCoordinator
    goes out, the other thread uses its answer, and the connections (same coordinator) stay as they are."""
    in_use = Scripted()
    member, _ = stable_member(in_use)
    member._coordinator_known = False
    probes: list[Scripted] = []

    def probe(host, port):
        def slow_answer():
            time.sleep(0.3)
            return find_answer()
        probes.append(Scripted(FindCoordinator=[slow_answer]))
        return probes[-1]

    member._connect = probe
    threads = [threading.Thread(target=member.ensure_coordinator) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sum(p.sent.count("FindCoordinator") for p in probes) == 1
    assert member.coordinator_known and member._main is in_use and in_use.aborted == 0


# ---------------------------------------------------------------- with brokers


@pytest.fixture
def cluster(broker_cluster, monkeypatch):
    monkeypatch.setenv("REBALANCE_LAB_GROUP_INITIAL_REBALANCE_DELAY_MS", "200")
    return broker_cluster(1)


def wait_until(condition, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.broker
def test_max_poll_interval_makes_a_member_leave_and_lose_its_partitions(cluster, tmp_path):
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, 4)
    recorder = EventRecorder(tmp_path / "events.jsonl", backend="classic")

    def make(name: str, max_poll_ms: int) -> ModernMember:
        member = ModernMember(MemberConfig(group=group, topics=(topic,), member_name=name, bootstrap=cluster.bootstrap,
                                           extra={"heartbeat.interval.ms": 200, "max.poll.interval.ms": max_poll_ms}),
                              recorder=recorder)
        member.start()
        return member

    slow, steady = make("slow", 1500), make("steady", 60_000)
    try:
        def both_polled_until(condition) -> bool:
            slow.poll(0.05)
            steady.poll(0.05)
            return condition()

        wait_until(lambda: both_polled_until(lambda: len(slow.assignment()) == 2 == len(steady.assignment())),
                   "two partitions each")
        # `slow` stops polling: after max.poll.interval.ms its heartbeat thread leaves the group.
        wait_until(lambda: steady.poll(0.05) is not None and len(steady.assignment()) == 4, "steady to own all four")
        slow.poll(0.05)  # back: its partitions were lost, it rejoins
        wait_until(lambda: both_polled_until(lambda: len(slow.assignment()) == 2 == len(steady.assignment())),
                   "the slow member back with two partitions")
    finally:
        slow.close()
        steady.close()
        recorder.close()
    events = list(read_events(tmp_path / "events.jsonl"))
    leaves = [e for e in events if e["type"] == "coordination_request" and e["op"] == "LeaveGroup"
              and e["member"] == "slow"]
    assert leaves[0]["reason"] == "max.poll.interval.ms exceeded"
    assert any(e["type"] == "partitions_lost" and e["member"] == "slow" for e in events)
    assert any(e["type"] == "rebalance_started" and e["trigger"] == "max.poll.interval.ms exceeded" for e in events)


@pytest.mark.broker
def test_member_ids_order_as_pods_do_so_range_shares_do_not_follow_the_start_order(cluster):
    """A classic member id is `client.id`, a dash and a UUID, and a deployment's pods share one client.id, so
    their ids order at random. The lab's client id is the name behind a random tag: with 10 members on 4
    partitions, range gives one each to the 4 first ids, whichever started first."""
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, 4)
    members = [ModernMember(MemberConfig(group=group, topics=(topic,), member_name=f"m{i:03d}",
                                         bootstrap=cluster.bootstrap, extra={"heartbeat.interval.ms": 200}))
               for i in range(10)]
    client_ids = [m.settings.client_id for m in members]
    assert [member_name_of(c) for c in client_ids] == [m.member_id for m in members]
    assert client_ids != sorted(client_ids)            # in start order: 1 chance in 10! = 3.6 million
    first_four = {m.member_id for m in sorted(members, key=lambda m: m.settings.client_id)[:4]}
    for member in members:
        member.start()
    try:
        def owners() -> set[str]:
            for member in members:
                member.poll(0.01)
            return {m.member_id for m in members if m.assignment()}

        wait_until(lambda: owners() == first_four, "range to give the four first ids a partition each")
    finally:
        for member in members:
            member.close()


@pytest.mark.broker
def test_member_cli_runs_a_modern_member_and_leaves_on_sigterm(cluster, tmp_path):
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, 3)
    events = tmp_path / "cli.jsonl"
    command = [sys.executable, "-m", "experiments.cli.app", "member", "--backend", "classic", "--bootstrap",
               cluster.bootstrap, "--group", group, "--topic", topic, "--strategy", "cooperative-sticky",
               "--id", "cli-member", "--instance-id", "cli-instance", "--events", str(events),
               "--config", "heartbeat.interval.ms=500"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "COLUMNS": "200"})
    try:
        lines = []
        for line in process.stdout:
            lines.append(line)
            if "cli-member" in line and "owns" in line and f"{topic}-0" in line:
                break
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, "".join(lines) + output
    kinds = [e["type"] for e in read_events(events)]
    assert "rebalance_completed" in kinds and kinds[-1] == "member_stopped"
    joined = [e for e in read_events(events) if e["type"] == "member_started"]
    assert joined[0]["group_instance_id"] == "cli-instance"


def test_membership_moves_only_along_its_table():
    from modern.classic.membership_states import IllegalMembershipTransition, Membership, MembershipState
    from rebalance.types import Generation

    joined = Membership().join_sent().member_id_given("m-1").joined(Generation(4, "m-1", "range"))
    assert joined.state is MembershipState.COMPLETING_REBALANCE and joined.sends_heartbeats
    assert joined.generation_if_stable() is None                  # no commit until the sync is answered
    stable = joined.synced()
    assert stable.generation_if_stable() == Generation(4, "m-1", "range")
    fenced = stable.lost(keep_member_id=True)
    assert fenced.state is MembershipState.UNJOINED and fenced.member_id == "m-1" and not fenced.generation.is_valid
    assert stable.lost(keep_member_id=False).member_id == ""
    with pytest.raises(IllegalMembershipTransition):
        Membership().synced()                                        # never stable without a join
    with pytest.raises(IllegalMembershipTransition):
        stable.joined(Generation(5, "m-1", "range"))                 # a new generation needs a JoinGroup first


def test_a_join_round_moves_only_along_its_table():
    from modern.classic.join_round import IllegalRoundTransition, JoinRound, RoundStep

    round_ = JoinRound(started=0.0)
    assert round_.step is RoundStep.PREPARING and not round_.over
    round_.join_again(not_before=5.0)
    for step in (RoundStep.JOINING, RoundStep.JOIN_ANSWERED, RoundStep.SYNCING):
        round_.move(step)
    round_.join_again(not_before=0.0)                  # SyncGroup answered REBALANCE_IN_PROGRESS
    assert round_.step is RoundStep.TO_JOIN and round_.not_before == 0.0
    with pytest.raises(IllegalRoundTransition):
        round_.move(RoundStep.SYNCING)                 # no SyncGroup without a JoinGroup answer read first
    for step in (RoundStep.JOINING, RoundStep.JOIN_ANSWERED, RoundStep.SYNCING, RoundStep.SYNCED):
        round_.move(step)
    assert round_.over
    with pytest.raises(IllegalRoundTransition):
        round_.join_again(not_before=0.0)              # a finished round is applied, never resumed
