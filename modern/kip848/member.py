"""`Kip848Member`: a consumer-group member speaking KIP-848's ConsumerGroupHeartbeat, as Kafka 4's
consumer and librdkafka do with `group.protocol=consumer`.

The heartbeat thread (`modern.kip848.membership_manager`) keeps the member in the group and holds the assignment
the coordinator last sent; everything the application sees happens here, on the polling thread,
as Kafka runs rebalance callbacks inside poll():

  1. reconcile: with auto-commit on, every consumed position is committed first, synchronously and
     retried up to the rebalance timeout (Kafka's maybeAutoCommitSyncBeforeRevocation, at the start
     of every reconciliation); then partitions owned but no longer assigned are revoked (the
     listener told exactly those), then the new ones are assigned (their committed offsets fetched
     with OffsetFetch v9 under the member's id and epoch, the listener told exactly those); each
     change is acknowledged by an immediate heartbeat. Partitions that stay are never revoked.
  2. fenced (FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID): everything owned is lost, without a commit,
     then the member joins again with epoch 0.
  3. auto-commit, asynchronous, one at a time, never while the coordinator is unknown; its timer
     restarts when a reconciliation completes, and a retriable failure is retried after
     retry.backoff.ms.

The data side is `modern.client.fetcher` (assign + seek), as in `modern.classic.member`.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping

from kafka.protocol.consumer import OffsetCommitRequest, OffsetFetchRequest

from modern.client.committed_offsets import by_topic, fetch_committed
from modern.client.connection import ConnectionFailed
from modern.client.fetched import FetchingMember
from modern.client.fetcher import Fetcher
from modern.common import errors
from modern.common.errors import ErrorClass
from modern.kip848.client_settings import settings_from
from modern.kip848.member_states import IN_GROUP, RECONCILES, ClientMemberState
from modern.kip848.membership_manager import FENCING_ERRORS, MembershipManager
from rebalance import events as ev
from rebalance.events import EventRecorder, NullRecorder
from rebalance.member import MemberConfig, RebalanceListener, pod_client_id
from rebalance.metrics import RebalanceMetrics
from rebalance.types import Record, TopicPartition

OFFSETS_VERSION = 9      # OffsetCommit and OffsetFetch carrying the member id and epoch
RETRIABLE = errors.COORDINATOR_ERRORS


class _Fenced(Exception):
    """An offset fetch found the member no longer in the group: the heartbeat will say so too."""


class Kip848Member(FetchingMember):
    def __init__(self, config: MemberConfig, *, listener: RebalanceListener | None = None,
                 recorder: EventRecorder | None = None) -> None:
        self.config = config
        self.member_id = config.member_name or f"member-{uuid.uuid4().hex[:8]}"   # the name in its client.id
        self.listener = listener or RebalanceListener()
        self.recorder = recorder or NullRecorder()
        self.settings = settings_from(config, client_id=pod_client_id(self.member_id))
        self.membership = MembershipManager(self.settings, recorder=self.recorder, member_name=self.member_id,
                                          owned=lambda: self._owned)
        self.metrics = RebalanceMetrics()
        self._fetcher: Fetcher | None = None
        self._owned: frozenset[TopicPartition] = frozenset()
        self._positions: dict[TopicPartition, int] = {}
        self._rebalance_started: float | None = None      # an open reconciliation (monotonic seconds)
        self._steps = 0                                   # revocations and assignments in it
        self._next_auto_commit = 0.0
        self._commit_in_flight: threading.Thread | None = None
        self._lock = threading.RLock()
        self._closed = False

    @property
    def group_member_id(self) -> str:
        """The id the coordinator knows this member by (a UUID the client made)."""
        return self.membership.member_id

    # ------------------------------------------------------------ Member

    def start(self) -> None:
        self._start_fetching(self.settings.assignor)
        self._open_rebalance("join")
        self.membership.start()
        self._restart_auto_commit_timer()

    def poll(self, timeout_s: float) -> list[Record]:
        with self._lock:
            if self._closed:
                return []
            self._reconcile()
            self._maybe_auto_commit()
            return self._fetch(timeout_s, self.membership.member_epoch)

    def _group_news(self) -> threading.Event:
        return self.membership.news

    def _wait_idle(self, timeout_s: float) -> None:
        """Nothing to fetch: Kafka's AsyncKafkaConsumer.pollForFetches waits on its fetch buffer for up to the
        time to the next heartbeat (maximumTimeToWait), retry.backoff.ms while a partition has no position yet,
        and nothing but data ends that wait: an assignment or a revocation the background thread received
        meanwhile waits for the next poll (processBackgroundEvents). When a heartbeat is due now, or no
        interval is known yet (joining), Kafka's poll goes round at once and sees any news as it comes: the lab
        waits for the news instead of spinning."""
        wait_s = self.membership.time_to_next_heartbeat_s()
        if wait_s is not None and self._awaiting_committed:
            wait_s = min(wait_s, self.settings.retry_backoff_ms / 1000)
        if not wait_s:
            super()._wait_idle(timeout_s)
            return
        time.sleep(min(timeout_s, wait_s))

    def _give_up_partitions(self) -> None:
        """Commit, revoke (listener); `close` then leaves with epoch -1 (-2 for a static member)."""
        self.membership.prepare_leaving()
        if self._owned and self.config.auto_commit:
            self._commit_offsets({tp: o for tp, o in self._positions.items() if tp in self._owned})
        if self._owned:
            self._revoke(set(self._owned))

    def _metrics_snapshot(self) -> dict:
        return self.metrics.snapshot(time.monotonic())

    def _leave_group(self) -> None:
        self.membership.leave()

    def abandon(self) -> None:
        """As SIGKILL: no commit, no revocation, no leave heartbeat; the session ends it."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.membership.stop()
        if self._fetcher is not None:
            self._fetcher.close()

    # ------------------------------------------------------------ reconciliation (polling thread)

    def _reconcile(self) -> None:
        seen = self.membership.snapshot()
        if seen.fatal is not None:
            if self._owned:
                self._lose(set(self._owned))
            raise seen.fatal
        if seen.state is ClientMemberState.FENCED:
            if self._owned:
                self._lose(set(self._owned))
            self._open_rebalance("fenced")
            self.membership.rejoin()
            return
        if seen.state not in RECONCILES or seen.target is None:
            return
        target = seen.target
        if target == self._owned and seen.state is ClientMemberState.RECONCILING:
            self.membership.ack_now()   # the target came back to what is owned: nothing to do but say so
        if target != self._owned:
            if not self.membership.reconciling():
                return   # fenced or stopped since the snapshot: the next poll sees it
            self._open_rebalance("assignment")
            self._auto_commit_before_reconciliation()
            revoked = set(self._owned - target)
            if revoked:
                self._revoke(revoked)
                self.membership.ack_now()
            added = set(target - self._owned)
            if added:
                try:
                    self._assign(added)
                except _Fenced:
                    self.membership.ack_now()   # a heartbeat now learns the fencing; nothing was assigned
                    return
                self.membership.ack_now()
            self._restart_auto_commit_timer()
        if self._owned == target and self._rebalance_started is not None:
            self._complete_rebalance(seen.member_epoch)

    def _open_rebalance(self, trigger: str) -> None:
        if self._rebalance_started is None:
            self._rebalance_started, self._steps = time.monotonic(), 0
            self.recorder.emit(ev.REBALANCE_STARTED, self.member_id, trigger=trigger, group=self.config.group)

    def _complete_rebalance(self, epoch: int) -> None:
        duration_ms = (time.monotonic() - self._rebalance_started) * 1000
        self._rebalance_started = None
        self.metrics.rebalance_completed(duration_ms, time.monotonic())
        self.recorder.emit(ev.REBALANCE_COMPLETED, self.member_id, generation=epoch,
                           assigned=sorted(map(str, self._owned)), duration_ms=round(duration_ms, 3),
                           attempts=max(1, self._steps), protocol=self.settings.assignor, leader=False,
                           member_id=self.membership.member_id)

    def _revoke(self, partitions: set[TopicPartition]) -> None:
        self._drop(partitions)
        self._steps += 1
        self.recorder.emit(ev.PARTITIONS_REVOKED, self.member_id, partitions=sorted(map(str, partitions)))
        self.listener.on_partitions_revoked(set(partitions))

    def _lose(self, partitions: set[TopicPartition]) -> None:
        self._drop(partitions)
        self.recorder.emit(ev.PARTITIONS_LOST, self.member_id, partitions=sorted(map(str, partitions)))
        self.listener.on_partitions_lost(set(partitions))

    def _assign(self, partitions: set[TopicPartition]) -> None:
        committed = self._committed_offsets(partitions, self._fetch_committed, not_yet=(_Fenced,))
        self._owned = frozenset(self._owned | partitions)
        self._steps += 1
        self._fetch_from(committed)
        self.recorder.emit(ev.PARTITIONS_ASSIGNED, self.member_id, partitions=sorted(map(str, partitions)),
                           committed={str(tp): o for tp, o in sorted(committed.items())})
        self.listener.on_partitions_assigned(set(partitions))

    # ------------------------------------------------------------ offsets

    def _maybe_auto_commit(self) -> None:
        """Kafka's CommitRequestManager.maybeAutoCommitAsync: asynchronous, at most one in flight, only
        while the coordinator is known and the member is in the group. The timer restarts at the
        interval as the commit goes out; a retriable failure brings the next one forward to
        retry.backoff.ms (maybeResetTimerWithBackoff); any other refusal, STALE_MEMBER_EPOCH included,
        waits for the interval (the next one carries the newer epoch)."""
        if not self.settings.auto_commit or time.monotonic() < self._next_auto_commit:
            return
        positions = {tp: o for tp, o in self._positions.items() if tp in self._owned}
        busy = self._commit_in_flight is not None and self._commit_in_flight.is_alive()
        if not positions or busy or not self.membership.coordinator_known \
                or self.membership.snapshot().state not in RECONCILES:
            return
        self._restart_auto_commit_timer()   # before the commit goes: its failure may bring it forward
        self._commit_in_flight = threading.Thread(target=self._auto_commit_once, args=(positions,),
                                                  name=f"commit-{self.member_id}", daemon=True)
        self._commit_in_flight.start()

    def _auto_commit_once(self, positions: Mapping[TopicPartition, int]) -> None:
        if self._commit_once(positions) in RETRIABLE:
            self._next_auto_commit = time.monotonic() + self.settings.retry_backoff_ms / 1000

    def _restart_auto_commit_timer(self) -> None:
        """The next auto-commit one interval from now: when one goes out, and when a reconciliation
        completes (Kafka's ConsumerMembershipManager.signalReconciliationCompleting ->
        CommitRequestManager.resetAutoCommitTimer: the new assignment starts a fresh interval)."""
        self._next_auto_commit = time.monotonic() + self.settings.auto_commit_interval_ms / 1000

    def _auto_commit_before_reconciliation(self) -> ErrorClass:
        """Kafka's maybeAutoCommitSyncBeforeRevocation: with auto-commit on, all consumed positions
        (not only the revoked partitions'), retried with backoff up to the rebalance timeout while the
        error is retriable or STALE_MEMBER_EPOCH with the member still in the group (the retry carries
        the latest epoch and positions). The reconciliation goes on whatever the outcome."""
        if not self.settings.auto_commit:
            return errors.NONE
        deadline = time.monotonic() + self.settings.rebalance_timeout_ms / 1000
        attempts = 0
        while True:
            offsets = {tp: o for tp, o in self._positions.items() if tp in self._owned}
            if not offsets:
                return errors.NONE
            if self.membership.snapshot().state not in IN_GROUP:
                return errors.UNKNOWN_MEMBER_ID   # fenced or stopped meanwhile: nothing to commit for
            error = self._commit_once(offsets)
            retriable = error in RETRIABLE or error is errors.STALE_MEMBER_EPOCH
            if not retriable or time.monotonic() >= deadline or self._closed:
                return error
            time.sleep(self.membership.retry_delay_s(attempts))
            attempts += 1

    def _commit_once(self, offsets: Mapping[TopicPartition, int]) -> ErrorClass:
        epoch = self.membership.member_epoch
        try:
            error = self.send_commit(offsets, epoch)
        except ConnectionFailed:
            self.membership.coordinator_unknown()
            error = errors.COORDINATOR_NOT_AVAILABLE
        self._committed(offsets, error, epoch)
        return error

    def _commit_offsets(self, offsets: Mapping[TopicPartition, int]) -> ErrorClass:
        """A synchronous commit (on close, commit()), as Kafka's CommitRequestManager.commitSyncWithRetries:
        retried while the error is retriable (the coordinator moving), up to request.timeout.ms; any other
        answer ends it. STALE_MEMBER_EPOCH is not retriable there (commitSyncExceptionForError makes it a
        CommitFailedException), even when the epoch moved while the commit was out: the caller's commit()
        raises CommitFailedError."""
        if not offsets:
            return errors.NONE
        deadline = time.monotonic() + self.settings.request_timeout_ms / 1000
        while True:
            if self.membership.snapshot().state not in IN_GROUP:
                error = errors.UNKNOWN_MEMBER_ID   # not sent: the member is not in the group
                self._committed(offsets, error, self.membership.member_epoch)
                return error
            error = self._commit_once(offsets)
            if error not in RETRIABLE or time.monotonic() >= deadline:
                return error
            time.sleep(self.settings.retry_backoff_ms / 1000)

    def send_commit(self, offsets: Mapping[TopicPartition, int], epoch: int) -> ErrorClass:
        """One OffsetCommit v9 with this member's id and the given epoch; the error it got."""
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for tp, offset in sorted(offsets.items()):
            by_topic.setdefault(tp.topic, []).append((tp.partition, offset))
        topic_cls = OffsetCommitRequest.OffsetCommitRequestTopic
        request = OffsetCommitRequest[OFFSETS_VERSION](
            group_id=self.settings.group, generation_id_or_member_epoch=epoch,
            member_id=self.membership.member_id, group_instance_id=self.settings.instance_id, retention_time_ms=-1,
            topics=[topic_cls(name=topic, partitions=[topic_cls.OffsetCommitRequestPartition(
                partition_index=p, committed_offset=o, committed_leader_epoch=-1, committed_metadata="")
                for p, o in parts]) for topic, parts in by_topic.items()])
        answer = self.membership.to_coordinator("OffsetCommit", request)
        codes = [p.error_code for t in answer.topics for p in t.partitions if p.error_code]
        error = errors.for_code(codes[0]) if codes else errors.NONE
        if error in errors.COORDINATOR_MOVED:
            self.membership.coordinator_unknown()   # COORDINATOR_LOAD_IN_PROGRESS: retried at the same broker
        return error

    def _committed(self, offsets: Mapping[TopicPartition, int], error: ErrorClass, epoch: int) -> None:
        rendered = {str(tp): o for tp, o in sorted(offsets.items())}
        if error is errors.NONE:
            self.recorder.emit(ev.OFFSETS_COMMITTED, self.member_id, offsets=rendered, generation=epoch)
        else:
            self.recorder.emit(ev.COMMIT_FAILED, self.member_id, offsets=rendered, error=errors.name_of(error),
                               generation=epoch)

    def _fetch_committed(self, partitions: set[TopicPartition]) -> dict[TopicPartition, int]:
        """Committed next offsets by OffsetFetch v9 under the member's id and epoch (none: left out)."""
        topics = by_topic(partitions)
        group_cls = OffsetFetchRequest.OffsetFetchRequestGroup

        def attempt() -> tuple[ErrorClass, list]:
            # built at each attempt: the member's epoch may have moved on since the last
            request = OffsetFetchRequest[OFFSETS_VERSION](groups=[group_cls(
                group_id=self.settings.group, member_id=self.membership.member_id,
                member_epoch=self.membership.member_epoch,
                topics=[group_cls.OffsetFetchRequestTopics(name=t, partition_indexes=ps) for t, ps in topics.items()])],
                require_stable=False)
            group = self.membership.to_coordinator("OffsetFetch", request).groups[0]
            return errors.for_code(group.error_code), group.topics

        def fenced(error: ErrorClass) -> None:
            if error in FENCING_ERRORS:
                raise _Fenced(errors.name_of(error))

        return fetch_committed(attempt, timeout_ms=self.settings.request_timeout_ms,
                               backoff_ms=self.settings.retry_backoff_ms,
                               coordinator_moved=self.membership.coordinator_unknown, stopping=lambda: self._closed,
                               fenced=fenced)

