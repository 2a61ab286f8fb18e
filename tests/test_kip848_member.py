"""The lab's KIP-848 member's timers and threads, read against Kafka trunk's `ConsumerMembershipManager`,
`CommitRequestManager` and `AbstractHeartbeatRequestManager`, checked without a broker: commits, fetches and
heartbeats go to stubs."""

from __future__ import annotations

import time

import pytest

from modern.client.fetched import CommitFailedError
from modern.common import errors
from modern.kip848.member import Kip848Member
from modern.kip848.member_states import ClientMemberState
from rebalance.member import MemberConfig
from rebalance.types import Record
from tests.modern_support import wait_until
from tests.test_kip848_client import TP0, TP1, TP2, heartbeat_answer, scripted_commits, unit_member
from tests.test_modern_member import Scripted

INTERVAL_MS = 60_000   # an auto-commit interval no test waits for


def committing_member(*answers) -> tuple[Kip848Member, list]:
    """A member in the group (epoch 3, owning t-0 and t-1, coordinator known) whose auto-commit is due now
    and whose commits get `answers` in order; the commits it sent are returned alongside."""
    member = Kip848Member(MemberConfig(group="g", topics=("t",), member_name="m", bootstrap="127.0.0.1:1",
                                       auto_commit_interval_ms=INTERVAL_MS))
    beats = member.membership
    beats._state, beats._epoch, beats._coordinator_known = ClientMemberState.STABLE, 3, True
    member._owned, member._positions = frozenset({TP0, TP1}), {TP0: 5, TP1: 9}
    member._assign = lambda partitions: setattr(member, "_owned", member._owned | partitions)
    sent: list[dict] = []
    script = list(answers)

    def send_commit(offsets, epoch):
        sent.append(dict(offsets))
        return script.pop(0) if script else errors.NONE

    member.send_commit = send_commit
    return member, sent


def auto_commit_settled(member: Kip848Member) -> None:
    member._maybe_auto_commit()
    if member._commit_in_flight is not None:
        member._commit_in_flight.join(10)


# ------------------------------------------------------------ the auto-commit timer


def test_a_completed_reconciliation_restarts_the_auto_commit_timer():
    """ConsumerMembershipManager.signalReconciliationCompleting -> CommitRequestManager.resetAutoCommitTimer:
    an auto-commit due before the reconciliation waits a whole interval after it."""
    member, sent = committing_member()
    member.membership._target = frozenset({TP0, TP2})       # t-1 revoked, t-2 added
    member._reconcile()
    assert sent == [{TP0: 5, TP1: 9}]                        # the commit before reconciling, nothing else
    assert member._owned == {TP0, TP2}
    auto_commit_settled(member)
    assert sent == [{TP0: 5, TP1: 9}], "an auto-commit went out right after the reconciliation"
    assert member._next_auto_commit > time.monotonic() + INTERVAL_MS / 1000 / 2


@pytest.mark.parametrize("retriable", [errors.COORDINATOR_LOAD_IN_PROGRESS, errors.NOT_COORDINATOR,
                                       errors.COORDINATOR_NOT_AVAILABLE], ids=errors.name_of)
def test_a_retriable_auto_commit_failure_is_retried_after_the_backoff_not_the_interval(retriable):
    """CommitRequestManager.maybeAutoCommitAsync: the timer restarts at the interval as the commit goes out,
    and a retriable failure brings it forward to retry.backoff.ms (maybeResetTimerWithBackoff)."""
    member, sent = committing_member(retriable)
    auto_commit_settled(member)
    assert len(sent) == 1

    def retried() -> bool:
        auto_commit_settled(member)
        return len(sent) == 2

    wait_until(retried, "the retry", timeout_s=INTERVAL_MS / 1000 / 4)


@pytest.mark.parametrize("refusal", [errors.STALE_MEMBER_EPOCH, errors.UNKNOWN_MEMBER_ID], ids=errors.name_of)
def test_a_refused_auto_commit_waits_for_the_interval(refusal):
    """STALE_MEMBER_EPOCH (or any refusal that is not retriable) is not retried early: the next auto-commit,
    an interval later, carries the newer epoch."""
    member, sent = committing_member(refusal)
    auto_commit_settled(member)
    assert len(sent) == 1
    assert member._next_auto_commit > time.monotonic() + INTERVAL_MS / 1000 / 2


# ------------------------------------------------------------ synchronous commits


def test_a_synchronous_commit_refused_as_stale_fails_at_once():
    """CommitRequestManager.commitSyncWithRetries retries only a RetriableException; STALE_MEMBER_EPOCH is not
    one, so commitSync fails with CommitFailedException (commitSyncExceptionForError) after one request, even
    when the member's epoch moved while that request was out."""
    member, _ = committing_member()
    epochs_sent: list[int] = []

    def send_commit(offsets, epoch):
        epochs_sent.append(epoch)
        member.membership._epoch = 4   # a heartbeat answer moved the epoch while the first request was out
        return errors.STALE_MEMBER_EPOCH

    member.send_commit = send_commit
    with pytest.raises(CommitFailedError) as refused:
        member.commit()
    assert refused.value.error is errors.STALE_MEMBER_EPOCH
    assert epochs_sent == [3], f"the refused commit was sent again, with epochs {epochs_sent}"


@pytest.mark.parametrize("retriable", [errors.COORDINATOR_LOAD_IN_PROGRESS, errors.NOT_COORDINATOR],
                         ids=errors.name_of)
def test_a_synchronous_commit_retries_a_retriable_error(retriable):
    """The other half of commitSyncWithRetries: a retriable error is tried again until the commit's timeout."""
    member, sent = committing_member(retriable)
    member.commit()
    assert len(sent) == 2


# ------------------------------------------------------------ the heartbeat's backoff


class OneRecordFetcher:
    """The data path: every poll hands out one record of t-0."""

    def poll(self, timeout_ms: int):
        return {TP0: [Record(topic="t", partition=0, offset=5, key=None, value=None)]}

    def position(self, tp):
        return None

    def close(self) -> None:
        pass


def test_a_poll_during_a_heartbeat_backoff_returns_at_once_with_records():
    """The heartbeat thread never sleeps holding the lock the polling thread reads the group's state under:
    during a COORDINATOR_LOAD_IN_PROGRESS backoff of 8-12 s a poll returns its records at once, as Kafka's
    application thread never waits on the background thread's backoff."""
    member = unit_member(**{"retry.backoff.ms": 10_000, "retry.backoff.max.ms": 10_000})
    scripted_commits(member)
    member._fetcher = OneRecordFetcher()
    beats = member.membership
    loading = heartbeat_answer(errors.COORDINATOR_LOAD_IN_PROGRESS)
    beats._main = beats._beat = Scripted(ConsumerGroupHeartbeat=[loading] * 5)
    beats._coordinator, beats._coordinator_known = ("stub", 1), True
    beats.start()
    try:
        wait_until(lambda: beats._failed_attempts == 1, "the loading coordinator's answer")
        started = time.monotonic()
        records = member.poll(0.1)
        took = time.monotonic() - started
        assert [(r.partition, r.offset) for r in records] == [(0, 5)]
        assert took < 5, f"the poll waited {took:.1f} s on the heartbeat's backoff"
        assert beats._beat.sent == ["ConsumerGroupHeartbeat"]    # still backing off: nothing sent meanwhile
    finally:
        beats.stop()


# ------------------------------------------------------------ an idle member's poll


def idle_member(state: ClientMemberState, *, next_heartbeat_s: float) -> Kip848Member:
    """A member that owns nothing, in `state`, whose coordinator gave it a 5 s interval, its next heartbeat due in
    `next_heartbeat_s`; nothing started, no commit due."""
    member = unit_member()
    member._owned, member._positions = frozenset(), {}
    member._next_auto_commit = time.monotonic() + INTERVAL_MS / 1000
    scripted_commits(member)
    beats = member.membership
    beats._state, beats._interval_ms = state, 5_000
    beats._next_due = time.monotonic() + next_heartbeat_s
    return member


def assignment_arrives_during_the_poll(member: Kip848Member, partitions: frozenset) -> None:
    """The heartbeat answer carrying `partitions` arrives after this poll looked for a reconciliation and before
    it waits (the heartbeat thread's own work: the target and RECONCILING, through its one setter)."""
    beats = member.membership

    def arrive() -> None:
        with beats._lock:
            beats._target = partitions
            beats._set_state(ClientMemberState.RECONCILING)

    member._maybe_auto_commit = arrive


def test_an_idle_member_is_not_woken_by_a_pending_reconciliation():
    """AsyncKafkaConsumer.pollForFetches: a consumer with nothing to fetch waits on its fetch buffer for
    min(poll timeout, maximumTimeToWait), the time to its next heartbeat; the onPartitionsAssigned callback the
    background thread queues meanwhile does not end that wait, it runs in the next poll
    (processBackgroundEvents)."""
    member = idle_member(ClientMemberState.STABLE, next_heartbeat_s=4.5)
    assignment_arrives_during_the_poll(member, frozenset({TP0}))
    started = time.monotonic()
    assert member.poll(0.6) == []
    took = time.monotonic() - started
    assert took >= 0.6, f"the idle poll returned after {took:.2f} s, woken by the assignment"
    assert member._owned == frozenset(), "reconciled inside the poll that was waiting"
    member._maybe_auto_commit, member._fetcher = (lambda: None), OneRecordFetcher()
    member.poll(0.01)
    assert member._owned == {TP0}, "the next poll reconciles"


def test_an_idle_member_waits_no_longer_than_its_next_heartbeat():
    """maximumTimeToWait bounds the wait from above too: a poll of 10 s whose heartbeat is due in 0.2 s returns
    around then, so the application comes back to poll() in the heartbeat's rhythm."""
    member = idle_member(ClientMemberState.STABLE, next_heartbeat_s=0.2)
    started = time.monotonic()
    member.poll(10.0)
    assert time.monotonic() - started < 5, "the idle poll waited out its whole timeout"


def test_a_joining_member_takes_its_first_assignment_at_once():
    """Before the first answer the heartbeat interval is Kafka's initial 0, so maximumTimeToWait is 0 and the
    application thread does not wait: a member joining sees its first assignment as soon as it comes."""
    member = idle_member(ClientMemberState.JOINING, next_heartbeat_s=4.5)
    member.membership._interval_ms = None    # no answer yet

    def answered() -> None:
        with member.membership._lock:
            member.membership._target = frozenset({TP0})
            member.membership._set_state(ClientMemberState.RECONCILING)

    member._maybe_auto_commit = answered
    started = time.monotonic()
    member.poll(10.0)
    assert time.monotonic() - started < 5, "the joining member waited out its poll with an assignment pending"
