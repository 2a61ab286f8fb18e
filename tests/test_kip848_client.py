"""The lab's own KIP-848 member (`modern.kip848.member.Kip848Member`) against the lab's broker, alone and
beside librdkafka consumers with `group.protocol=consumer`.

Members poll in threads of their own and record what their rebalance listener was told; tests wait
for observed effects (assignments, the group's own description), never for a fixed time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from kafka.protocol.metadata import FindCoordinatorResponse

from broker.admin import create_topic
from modern.common import errors
from modern.common.consumer_group_messages import ConsumerGroupHeartbeatResponse
from modern.kip848.member import Kip848Member
from modern.kip848.member_states import ClientMemberState
from modern.kip848.membership_manager import MembershipManager
from rebalance import heartbeat_kinds
from rebalance.events import EventRecorder, read_events
from rebalance.member import MemberConfig, RebalanceListener
from rebalance.types import TopicPartition
from tests.modern_support import produce, wait_until
from tests.test_kip848_conformance import History, balanced, consumer_worker, describe
from tests.test_kip848_timing import lower_broker_timing
from tests.test_modern_conformance import PARTITIONS, Worker, complete_and_disjoint
from tests.test_modern_member import Scripted, find_answer

pytestmark = [pytest.mark.broker, pytest.mark.conformance]

SESSION_TIMEOUT_MS = 3_000


@pytest.fixture
def cluster(broker_cluster, monkeypatch):
    """One broker process whose consumer groups end a session after 3 s and want a heartbeat every 300 ms (both
    below Kafka's minimums, lowered with them as an operator would)."""
    lower_broker_timing(monkeypatch, SESSION_TIMEOUT_MS, 300)
    return broker_cluster(1)


@pytest.fixture
def names():
    suffix = uuid.uuid4().hex[:8]
    return f"topic-{suffix}", f"group-{suffix}"


class Recording(RebalanceListener):
    def __init__(self, name: str, history: History) -> None:
        self.name, self.history = name, history
        history.events[name] = []

    def on_partitions_assigned(self, partitions):
        self.history.events[self.name].append(("assigned", frozenset(tp.partition for tp in partitions)))

    def on_partitions_revoked(self, partitions):
        self.history.events[self.name].append(("revoked", frozenset(tp.partition for tp in partitions)))

    def on_partitions_lost(self, partitions):
        self.history.events[self.name].append(("lost", frozenset(tp.partition for tp in partitions)))


def lab_worker(name: str, bootstrap: str, topic: str, group: str, history: History, recorder: EventRecorder,
               *, strategy: str = "uniform", members: dict | None = None) -> Worker:
    def make():
        member = Kip848Member(MemberConfig(group=group, topics=(topic,), strategy=strategy, member_name=name,
                                           bootstrap=bootstrap, auto_commit_interval_ms=500),
                              listener=Recording(name, history), recorder=recorder)
        member.start()
        if members is not None:
            members[name] = member
        return member

    def poll(member):
        return [(r.partition, r.offset) for r in member.poll(0.1)]

    return Worker(name, make, poll, lambda m: {tp.partition for tp in m.assignment()}, lambda m: m.close())


@pytest.fixture
def recorder(tmp_path):
    with EventRecorder(tmp_path / "events.jsonl", backend="kip848") as events:
        yield events


def events_of(recorder: EventRecorder, member: str, kind: str) -> list[dict]:
    return [e for e in read_events(recorder.path) if e["member"] == member and e["type"] == kind]


def stop_all(workers):
    for worker in workers:
        worker.stop()


def test_one_to_three_members_get_a_complete_disjoint_assignment(cluster, names, recorder):
    topic, group = names
    create_topic(cluster.bootstrap, topic, PARTITIONS)
    history, members = History(), {}
    workers: list[Worker] = []
    try:
        for size in range(1, 4):
            workers.append(lab_worker(f"lab-{size}", cluster.bootstrap, topic, group, history, recorder,
                                      members=members))
            wait_until(lambda: balanced(workers) and all(w.error is None for w in workers),
                       f"{size} lab members sharing {PARTITIONS} partitions")
        wait_until(lambda: describe(cluster.bootstrap, group).group_state == "Stable", "a stable group")
        described = describe(cluster.bootstrap, group)
    finally:
        stop_all(workers)
    assert described.assignor_name == "uniform" and len(described.members) == 3
    assert {m.member_id for m in described.members} == {m.group_member_id for m in members.values()}
    assert all(m.member_epoch == described.assignment_epoch for m in described.members)
    for name in members:
        beats = [e for e in events_of(recorder, name, "coordination_request") if e["op"] == "ConsumerGroupHeartbeat"]
        assert beats[0]["detail"] == "join" and beats[-1]["detail"] == "leave"
        assert {e["detail"] for e in beats} <= set(heartbeat_kinds.DETAILS)
        completed = events_of(recorder, name, "rebalance_completed")
        assert completed and completed[-1]["leader"] is False and completed[-1]["protocol"] == "uniform"


def test_a_leaving_member_moves_only_its_partitions(cluster, names, recorder):
    topic, group = names
    create_topic(cluster.bootstrap, topic, PARTITIONS)
    history = History()
    workers = [lab_worker(f"lab-{i}", cluster.bootstrap, topic, group, history, recorder) for i in range(3)]
    try:
        wait_until(lambda: balanced(workers), "three lab members with two partitions each")
        leaver, stayers = workers[2], workers[:2]
        held, marks = set(leaver.owned), history.marks()
        leaver.stop()
        wait_until(lambda: complete_and_disjoint(stayers), "the two others holding every partition")
        seen = history.snapshot()
    finally:
        stop_all(workers[:2])
    for worker in stayers:
        assert seen.since(marks, worker.name, "revoked") == set(), f"{worker.name} was revoked"
    gained = set().union(*(seen.since(marks, w.name, "assigned") for w in stayers))
    assert gained == held   # exactly the leaver's partitions moved
    assert seen.since(marks, "lab-2", "revoked") == held and seen.since(marks, "lab-2", "lost") == set()


_STALLABLE = """
import sys, time
from modern.kip848.member import Kip848Member
from rebalance.events import EventRecorder
from rebalance.member import MemberConfig
bootstrap, topic, group, events = sys.argv[1:5]
member = Kip848Member(MemberConfig(group=group, topics=(topic,), strategy="uniform", member_name="stalled",
                                   bootstrap=bootstrap), recorder=EventRecorder(events, backend="kip848"))
member.start()
while True:
    member.poll(0.1)
"""


def test_a_fenced_member_reports_lost_and_rejoins_with_epoch_0(cluster, names, tmp_path):
    """SIGSTOP past the session: the coordinator drops the member; once resumed, its next heartbeat
    is refused, it declares everything lost (no commit) and joins again under the same member id."""
    topic, group = names
    create_topic(cluster.bootstrap, topic, PARTITIONS)
    events = tmp_path / "stalled.jsonl"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    child = subprocess.Popen([sys.executable, "-c", _STALLABLE, cluster.bootstrap, topic, group, str(events)], env=env)
    try:
        def kinds():
            return [e for e in read_events(events) if e["type"] in ("rebalance_completed", "partitions_lost",
                                                                      "coordination_request", "commit_failed",
                                                                      "offsets_committed")] \
                if events.exists() else []

        wait_until(lambda: any(e["type"] == "rebalance_completed" and len(e["assigned"]) == PARTITIONS
                               for e in kinds()), "the member holding every partition")
        os.kill(child.pid, signal.SIGSTOP)
        wait_until(lambda: describe(cluster.bootstrap, group).group_state == "Empty", "the session to end")
        before = len(kinds())
        os.kill(child.pid, signal.SIGCONT)
        wait_until(lambda: any(e["type"] == "rebalance_completed" for e in kinds()[before:]), "the member back")
        after = kinds()[before:]
    finally:
        child.kill()
        child.wait(30)
    lost = [e for e in after if e["type"] == "partitions_lost"]
    assert len(lost) == 1 and len(lost[0]["partitions"]) == PARTITIONS
    beats = [e for e in after if e["type"] == "coordination_request" and e["op"] == "ConsumerGroupHeartbeat"]
    refused = [i for i, e in enumerate(beats) if e["error"] in ("UNKNOWN_MEMBER_ID", "FENCED_MEMBER_EPOCH")]
    assert refused and beats[refused[0] + 1]["detail"] == "join"    # the next heartbeat joins with epoch 0
    assert not [e for e in after if e["type"] == "offsets_committed" and e["ts_ns"] < lost[0]["ts_ns"]]
    completions = [e for e in read_events(events) if e["type"] == "rebalance_completed"]
    assert len({e["member_id"] for e in completions}) == 1                # the same member id throughout
    assert len(completions[-1]["assigned"]) == PARTITIONS


def test_commits_carry_the_member_epoch_and_a_stale_epoch_is_refused(cluster, names, recorder):
    topic, group = names
    create_topic(cluster.bootstrap, topic, PARTITIONS)
    produce(cluster.bootstrap, topic, 60, partitions=PARTITIONS)
    history, members = History(), {}
    workers = [lab_worker("lab-0", cluster.bootstrap, topic, group, history, recorder, members=members)]
    try:
        wait_until(lambda: len(workers[0].seen) == 60, "the first member consuming every record")
        first = members["lab-0"]
        old_epoch = first.membership.member_epoch
        wait_until(lambda: events_of(recorder, "lab-0", "offsets_committed"), "an auto-commit")
        workers.append(lab_worker("lab-1", cluster.bootstrap, topic, group, history, recorder, members=members))
        wait_until(lambda: balanced(workers) and first.membership.member_epoch > old_epoch, "a new member epoch")
        offsets = {TopicPartition(topic, p): 10 for p in sorted(workers[0].owned)}
        stale = first.send_commit(offsets, old_epoch)
        current = first.send_commit(offsets, first.membership.member_epoch)
    finally:
        stop_all(workers)
    assert stale is errors.STALE_MEMBER_EPOCH and current is errors.NONE
    committed = events_of(recorder, "lab-0", "offsets_committed")
    assert {e["generation"] for e in committed} <= set(range(1, 100)) and committed[0]["generation"] == old_epoch
    fetches = [e for e in events_of(recorder, "lab-1", "coordination_request") if e["op"] == "OffsetFetch"]
    assert fetches, "the new member read its partitions' committed offsets"
    assigned = events_of(recorder, "lab-1", "partitions_assigned")
    assert all(json.dumps(e["committed"]) for e in assigned) and any(e["committed"] for e in assigned)


def test_a_mixed_group_with_librdkafka_consumers_converges(cluster, names, recorder):
    topic, group = names
    create_topic(cluster.bootstrap, topic, PARTITIONS)
    history = History()
    workers = [lab_worker("lab-0", cluster.bootstrap, topic, group, history, recorder),
               consumer_worker("rd-0", cluster.bootstrap, topic, group, history),
               lab_worker("lab-1", cluster.bootstrap, topic, group, history, recorder),
               consumer_worker("rd-1", cluster.bootstrap, topic, group, history)]
    try:
        wait_until(lambda: balanced(workers) and all(w.owned for w in workers) and all(w.error is None for w in workers),
                   "two lab members and two librdkafka consumers sharing the partitions")
        wait_until(lambda: describe(cluster.bootstrap, group).group_state == "Stable", "a stable group")
        described = describe(cluster.bootstrap, group)
        marks = history.marks()
        workers[3].stop()   # a librdkafka consumer leaves: the lab members take its partitions
        rest = workers[:3]
        wait_until(lambda: complete_and_disjoint(rest), "three members holding every partition")
        seen = history.snapshot()
    finally:
        stop_all(workers[:3])
    assert len(described.members) == 4
    assert all(m.member_epoch == described.assignment_epoch for m in described.members)
    for worker in rest:
        assert seen.since(marks, worker.name, "revoked") == set(), f"{worker.name} was revoked"


# ---------------------------------------------------------------- against a scripted coordinator
#
# Kafka's ConsumerMembershipManager / CommitRequestManager / AbstractHeartbeatRequestManager (trunk,
# between 3.9 and 4.0), checked without a broker: the member's commits and heartbeats go to stubs.

TP0, TP1, TP2 = (TopicPartition("t", p) for p in range(3))


def unit_member(**extra) -> Kip848Member:
    """A member in the group at epoch 3, owning t-0 (consumed up to 5) and t-1 (up to 9); nothing started."""
    member = Kip848Member(MemberConfig(group="g", topics=("t",), member_name="m", bootstrap="127.0.0.1:1",
                                       extra=extra))
    member.membership._state, member.membership._epoch = ClientMemberState.STABLE, 3
    member._owned, member._positions = frozenset({TP0, TP1}), {TP0: 5, TP1: 9}
    member._assign = lambda partitions: setattr(member, "_owned", member._owned | partitions)  # no fetch here
    return member


def scripted_commits(member: Kip848Member, failing_s: float = 0.0) -> list[tuple[float, dict]]:
    """Every commit the member sends, with its time; COORDINATOR_NOT_AVAILABLE for the first `failing_s`."""
    sent: list[tuple[float, dict]] = []
    until = time.monotonic() + failing_s

    def send_commit(offsets, epoch):
        sent.append((time.monotonic(), dict(offsets)))
        return errors.COORDINATOR_NOT_AVAILABLE if time.monotonic() < until else errors.NONE

    member.send_commit = send_commit
    return sent


def test_every_reconciliation_first_commits_every_consumed_position():
    """maybeAutoCommitSyncBeforeRevocation: at the start of a reconciliation, even one that only adds."""
    member = unit_member()
    sent = scripted_commits(member)
    member.membership._target = frozenset({TP0, TP1, TP2})        # nothing revoked, t-2 added
    member._reconcile()
    assert [offsets for _, offsets in sent] == [{TP0: 5, TP1: 9}]
    assert member._owned == {TP0, TP1, TP2}
    member = unit_member()
    sent = scripted_commits(member)
    member.membership._target = frozenset({TP0})                   # t-1 revoked: still everything committed
    member._reconcile()
    assert [offsets for _, offsets in sent] == [{TP0: 5, TP1: 9}]
    assert member._owned == {TP0}


def test_the_commit_before_reconciling_is_retried_up_to_the_rebalance_timeout_not_the_request_timeout():
    member = unit_member(**{"request.timeout.ms": 200, "max.poll.interval.ms": 20_000})
    started = time.monotonic()
    sent = scripted_commits(member, failing_s=0.8)
    member.membership._target = frozenset({TP0})
    member._reconcile()
    assert len(sent) >= 3 and sent[-1][0] - started >= 0.8      # went on past request.timeout.ms
    assert sent[-1][1] == {TP0: 5, TP1: 9} and member._owned == {TP0}


def test_no_commit_before_reconciling_when_auto_commit_is_off():
    member = Kip848Member(MemberConfig(group="g", topics=("t",), member_name="m", bootstrap="127.0.0.1:1",
                                       auto_commit=False))
    member.membership._state, member.membership._epoch = ClientMemberState.STABLE, 3
    member._owned, member._positions = frozenset({TP0, TP1}), {TP0: 5, TP1: 9}
    sent = scripted_commits(member)
    member.membership._target = frozenset({TP0})
    member._reconcile()
    assert sent == [] and member._owned == {TP0}


def heartbeat_answer(error, epoch: int = 3) -> ConsumerGroupHeartbeatResponse:
    return ConsumerGroupHeartbeatResponse[1](throttle_time_ms=0, error_code=error.errno, error_message=None,
                                             member_id="m", member_epoch=epoch, heartbeat_interval_ms=5000,
                                             assignment=None)


def in_group(**extra) -> MembershipManager:
    """The heartbeat side of a member at epoch 3 whose coordinator is known; no thread started."""
    beats = Kip848Member(MemberConfig(group="g", topics=("t",), member_name="m", bootstrap="127.0.0.1:1",
                                      extra=extra)).membership
    beats._state, beats._epoch = ClientMemberState.STABLE, 3
    beats._main = beats._beat = Scripted()
    beats._coordinator, beats._coordinator_known = ("stub", 1), True
    return beats


def test_not_coordinator_resets_the_backoff_and_the_heartbeat_follows_the_lookup_at_once():
    """AbstractHeartbeatRequestManager: NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE mark the coordinator
    unknown and reset the backoff, so the next heartbeat goes as soon as FindCoordinator answers."""
    beats = in_group()
    for _ in range(3):                                   # a loading coordinator: the backoff grows
        beats._on_answer(heartbeat_answer(errors.COORDINATOR_LOAD_IN_PROGRESS), None)
    assert beats.coordinator_known                       # loading: the same coordinator, asked again
    for error in (errors.NOT_COORDINATOR, errors.COORDINATOR_NOT_AVAILABLE):
        started = time.monotonic()
        beats._on_answer(heartbeat_answer(error), None)
        assert time.monotonic() - started < 0.05, f"{errors.name_of(error)}: backed off"
        assert not beats.coordinator_known and beats._next_due <= time.monotonic()
        beats._coordinator_known = True
    beats._coordinator_known = False
    new = Scripted(ConsumerGroupHeartbeat=[heartbeat_answer(errors.NONE)])
    lookup = Scripted(FindCoordinator=[find_answer(port=2)])
    beats._connect = lambda host, port: lookup if port == 1 else new
    started = time.monotonic()
    beats._beat_once()
    assert lookup.sent == ["FindCoordinator"] and new.sent == ["ConsumerGroupHeartbeat"]
    assert time.monotonic() - started < 0.1 and beats.coordinator_known


def test_find_coordinator_backs_off_exponentially():
    """Three refused lookups wait about 100, 200 and 400 ms (+-20 %), not 3 x retry.backoff.ms."""
    beats = in_group()
    beats._coordinator_known = False
    refused = FindCoordinatorResponse[3](throttle_time_ms=0, error_code=errors.COORDINATOR_NOT_AVAILABLE.errno,
                                         error_message=None, node_id=-1, host="", port=-1)
    answers = [refused, refused, refused, find_answer(port=1)]
    beats._connect = lambda host, port: Scripted(FindCoordinator=[answers.pop(0)])
    started = time.monotonic()
    beats._find_coordinator()
    assert beats.coordinator_known and not answers
    assert 0.8 * 0.7 <= time.monotonic() - started < 1.2 * 0.7 + 0.3
