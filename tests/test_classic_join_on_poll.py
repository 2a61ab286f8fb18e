"""A classic member's join moves on only while its application is inside the client, as in Kafka 3.7.

The JoinGroup answer, the leader's assignment (`ConsumerCoordinator.onLeaderElected`) and the SyncGroup are
handled when the application thread calls into the consumer (`poll()` -> `ConsumerCoordinator.poll` ->
`ensureActiveGroup`, or `commitSync`); the heartbeat thread is disabled while the member has not joined
(`AbstractCoordinator.HeartbeatThread.run`). So a cooperative leader still handling a batch holds the whole
group's SyncGroup until it polls again. An eager member owns nothing once it has rejoined: it has no batch to
handle and waits inside poll(), so its join goes on at once, as before.

Real members against a real broker; waits are for observed effects, and the one fixed span (the leader's
batch) only makes room for what must not happen.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from broker.admin import create_topic
from modern.classic.member import ModernMember
from rebalance.events import EventRecorder, read_events
from rebalance.member import MemberConfig
from tests.modern_support import wait_until
from tests.test_poll_loop_classic import PARTITIONS, Producing, joins_sent

pytestmark = pytest.mark.broker

BATCH_ROOM_S = 1.5    # how long the busy leader's batch goes on after its JoinGroup is answered


@pytest.fixture
def cluster(broker_cluster, monkeypatch):
    monkeypatch.setenv("REBALANCE_LAB_GROUP_INITIAL_REBALANCE_DELAY_MS", "200")
    return broker_cluster(1)


class Application:
    """One member polled on a thread of its own. `pause` stops its polling (busy elsewhere); `hold_next_batch`
    makes the next poll that returns records while the member is still rebalancing, its JoinGroup sent, start a
    batch that lasts until `release`: the application handles records and does not call into the client
    meanwhile."""

    def __init__(self, member: ModernMember) -> None:
        self.member = member
        self.errors: list[BaseException] = []
        self.holding = threading.Event()
        self.batches_held = 0
        self._polling = threading.Event()
        self._idle = threading.Event()
        self._hold_next = threading.Event()
        self._hold_after_joins = 0
        self._released = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"app-{member.member_id}", daemon=True)

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
                records = self.member.poll(0.05)
            except BaseException as error:  # reported by stop()
                self.errors.append(error)
                return
            if records and self._hold_next.is_set() and self.member.coordinator.rejoin_pending \
                    and sent(self, "JoinGroup") > self._hold_after_joins:
                self._hold_next.clear()
                self.batches_held += 1
                self.holding.set()
                self._released.wait(60)
                self.holding.clear()

    def pause(self) -> None:
        self._polling.clear()
        wait_until(self._idle.is_set, f"{self.member.member_id} to finish its poll")

    def resume(self) -> None:
        self._polling.set()

    def hold_next_batch(self) -> None:
        self._hold_after_joins = sent(self, "JoinGroup")
        self._hold_next.set()

    def release(self) -> None:
        self._released.set()

    def stop(self) -> None:
        self._stop.set()
        self._polling.set()
        self._released.set()
        self._thread.join(timeout=30)
        self.member.close()
        assert not self.errors, self.errors


def sent(app: Application, api: str) -> int:
    return app.member.coordinator.requests.sent.get(api, 0)


def answered_joins(path, member: str) -> int:
    return sum(1 for e in read_events(path) if e["type"] == "coordination_request" and e["member"] == member
               and e["op"] == "JoinGroup" and e.get("error") is None)


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_a_leader_busy_with_its_batch_holds_the_sync_group_only_when_it_keeps_partitions(cluster, tmp_path,
                                                                                         strategy):
    """`leader` and `follower` share four partitions; a newcomer joins while the follower is busy, so the join
    phase waits for it. The leader rejoins at its next poll: cooperative, it keeps its partitions, gets records
    and starts a batch; eager, it has revoked everything and waits inside poll(). The follower polls again and
    the join phase ends. Cooperative: the leader's JoinGroup answer waits for the end of its batch, and with it
    the assignment and the SyncGroup that the newcomer needs. Eager: the leader syncs at once."""
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, PARTITIONS)
    path = tmp_path / "events.jsonl"
    recorder = EventRecorder(path, backend="classic")

    def member(name: str) -> ModernMember:
        return ModernMember(MemberConfig(group=group, topics=(topic,), member_name=name, strategy=strategy,
                                         bootstrap=cluster.bootstrap, session_timeout_ms=10_000,
                                         extra={"heartbeat.interval.ms": 300, "max.poll.interval.ms": 60_000}),
                            recorder=recorder)

    producing = Producing(cluster.bootstrap, topic)
    apps: list[Application] = []
    try:
        leader = Application(member("leader")).start()
        apps.append(leader)
        wait_until(lambda: len(leader.member.assignment()) == PARTITIONS, "the leader to own every partition")
        follower = Application(member("follower")).start()
        apps.append(follower)

        def settled() -> bool:
            owned = [app.member.assignment() for app in apps]
            return all(owned) and sum(map(len, owned)) == PARTITIONS and not any(
                app.member.coordinator.rejoin_pending for app in apps)

        wait_until(settled, "two partitions each, the group stable")
        follower.pause()
        leader.hold_next_batch()
        joins, syncs = sent(leader, "JoinGroup"), sent(leader, "SyncGroup")
        newcomer = Application(member("newcomer")).start()
        apps.append(newcomer)
        wait_until(lambda: sent(leader, "JoinGroup") > joins and sent(newcomer, "JoinGroup") > 0,
                   "the leader and the newcomer to rejoin")
        if strategy == "cooperative-sticky":
            wait_until(leader.holding.is_set, "the leader to start a batch while it rejoins")
        answered = answered_joins(path, "leader")
        follower.resume()
        if strategy == "cooperative-sticky":
            wait_until(lambda: answered_joins(path, "leader") > answered, "the leader's JoinGroup to be answered")
            time.sleep(BATCH_ROOM_S)
            assert sent(leader, "SyncGroup") == syncs, "the leader sent SyncGroup while it was handling its batch"
            assert newcomer.member.assignment() == set(), "the newcomer got partitions before the leader synced"
            leader.release()
        wait_until(settled, "the three members to share the partitions")
        assert sent(leader, "SyncGroup") > syncs
        assert leader.batches_held == (1 if strategy == "cooperative-sticky" else 0)
    finally:
        producing.stop()
        try:
            for app in apps:
                app.stop()
        finally:
            recorder.close()
    leaders = [e for e in read_events(path) if e["type"] == "rebalance_completed" and e["member"] == "leader"]
    assert leaders and all(e["leader"] for e in leaders), "the first member did not stay the leader"


def test_a_cooperative_member_with_nothing_to_auto_commit_rejoins_in_the_poll_that_revoked(cluster, tmp_path):
    """Spring's acknowledgements, not the client, commit (auto-commit off). When a SyncGroup takes partitions
    away, Kafka 3.7's joinGroupIfNeeded goes round again in the same poll: onJoinPrepare has no auto-commit to
    wait for and returns at once, so the follow-up JoinGroup goes out before poll() hands the application its
    records. `owner` owns all four partitions and handles each batch for 0.2 s; a newcomer joins, so
    `owner` revokes two. Its follow-up JoinGroup must be out while it handles the batch that poll returned,
    not at its next poll."""
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, PARTITIONS)
    recorder = EventRecorder(tmp_path / "events.jsonl", backend="classic")

    def member(name: str) -> ModernMember:
        return ModernMember(MemberConfig(group=group, topics=(topic,), member_name=name, strategy="cooperative-sticky",
                                         bootstrap=cluster.bootstrap, session_timeout_ms=10_000, auto_commit=False,
                                         extra={"heartbeat.interval.ms": 300, "max.poll.interval.ms": 60_000}),
                            recorder=recorder)

    handling_s = 0.2
    revoking_polls: list[tuple[int, int]] = []   # JoinGroups sent before the poll, and at the end of its batch
    stop = threading.Event()
    owner, newcomer = member("owner"), member("newcomer")

    def owner_loop() -> None:
        while not stop.is_set():
            before, joins = owner.assignment(), joins_sent(owner)
            records = owner.poll(0.05)
            revoked = bool(before - owner.assignment())
            if records:
                time.sleep(handling_s)   # handling the batch: no call into the client
            if revoked:
                revoking_polls.append((joins, joins_sent(owner)))

    def newcomer_loop() -> None:
        while not stop.is_set():
            newcomer.poll(0.05)

    producing = Producing(cluster.bootstrap, topic)
    threads = [threading.Thread(target=loop, daemon=True) for loop in (owner_loop, newcomer_loop)]
    try:
        owner.start()
        threads[0].start()
        wait_until(lambda: len(owner.assignment()) == PARTITIONS, "the owner to own every partition")
        newcomer.start()
        threads[1].start()
        wait_until(lambda: revoking_polls, "the owner to revoke partitions for the newcomer", timeout_s=30)
        wait_until(lambda: len(newcomer.assignment()) == PARTITIONS // 2, "the newcomer to get two partitions",
                   timeout_s=30)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
        producing.stop()
        for one in (owner, newcomer):
            one.close()
        recorder.close()
    joins_before, joins_after_batch = revoking_polls[0]
    assert joins_after_batch > joins_before, "the follow-up JoinGroup waited for the owner's next poll"
