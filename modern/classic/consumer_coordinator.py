"""What a consumer adds to group membership (Kafka's ConsumerCoordinator): the assignor the
leader runs, eager or cooperative (KIP-429) revocation, and offsets.

Commits follow Kafka's consumer (3.7): none is sent unless the member is stable; auto-commit is
asynchronous, a commit still out never holding the next one back; every commit, auto-commit, pre-join or
the application's, reaches the coordinator in the order it was made (`modern.classic.commit_line`); none while
the coordinator is unknown and none while a rebalance is pending; its timer starts again after each join, and
after a retriable failure the next try is retry.backoff.ms away; a member cut off from its
coordinator keeps fetching until it is fenced. A commit answered ILLEGAL_GENERATION or
UNKNOWN_MEMBER_ID means "rebalance in progress" only when the generation changed since it was
sent and the member is preparing a rebalance; otherwise the member is reset and its partitions
are lost (`OffsetCommitResponseHandler`). FENCED_INSTANCE_ID on a commit of the current
generation is fatal. The only commit of a rebalance is the one before the rejoin, retried with
backoff up to the rebalance timeout: eager, on the polling thread, before the revocation (no
record is handed out meanwhile, as Kafka pauses the partitions); cooperative, on the round's
thread, while records keep flowing, its JoinGroup sent at the application's next call once it is done (with nothing
to auto-commit, in the same call). After a cooperative SyncGroup the revoked partitions are
only handed to the listener, as `onJoinComplete` does: what was consumed since the pre-join
commit is consumed again by the new owner. Partition changes reach the member through
`PartitionHooks`, on the polling thread only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from kafka.protocol.consumer import OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.metadata import MetadataRequest

from modern.classic.abstract_coordinator import GroupMembership, JoinOutcome
from modern.classic.commit_line import CommitLine
from modern.classic.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from modern.classic.membership_states import MembershipState
from modern.classic.settings import ClientSettings
from modern.client.committed_offsets import by_topic, fetch_committed
from modern.client.connection import BrokerConnection, ConnectionFailed
from modern.common import errors
from modern.common.errors import ErrorClass, GroupError
from rebalance import events as ev
from rebalance.assignors import get_assignor
from rebalance.events import EventRecorder
from rebalance.types import Subscription, TopicPartition

COMMIT_VERSION = 7
FETCH_VERSION = 7
METADATA_VERSION = 4

# A commit that failed with these may succeed when tried again (Kafka's RetriableException): the coordinator
# moving or loading (tried after a lookup, or at the same broker), or the request timed out.
RETRIABLE_COMMIT_ERRORS = errors.COORDINATOR_ERRORS | {errors.REQUEST_TIMED_OUT}


class PartitionHooks(Protocol):
    """What the coordinator tells the member, always on the polling thread."""

    def revoke(self, partitions: set[TopicPartition]) -> None: ...   # give up (offsets already committed)

    def assign(self, partitions: set[TopicPartition]) -> None: ...   # start fetching

    def lose(self, partitions: set[TopicPartition]) -> None: ...     # gone without a chance to commit

    def positions(self) -> dict[TopicPartition, int]: ...            # next offsets to auto-commit ({} when off);
                                                                      # also read from the join worker

    def committed(self, offsets: Mapping[TopicPartition, int], error: ErrorClass, generation: int) -> None: ...

    def rebalanced(self) -> None: ...                                  # a join completed: restart the auto-commit timer


class ConsumerCoordinator(GroupMembership):
    def __init__(self, settings: ClientSettings, hooks: PartitionHooks, *, recorder: EventRecorder,
                 member_name: str) -> None:
        super().__init__(settings, recorder=recorder, member_name=member_name)
        self.hooks = hooks
        self.assignor = get_assignor(settings.strategy)
        self.cooperative = str(self.assignor.rebalance_protocol) == "cooperative"
        self.owned: frozenset[TopicPartition] = frozenset()
        # Every commit, in the order made: each goes out when those made before it are done.
        self._commit_line = CommitLine()

    def poll(self) -> bool:
        """Rebalance when needed; True when no rebalance is pending (an auto-commit may go out)."""
        return self.poll_group()

    # ------------------------------------------------------------ rebalance hooks (polling thread)

    def _protocol_name(self) -> str:
        return self.assignor.name

    def _join_metadata(self) -> bytes:
        return encode_subscription(Subscription(
            topics=self.settings.topics, owned_partitions=tuple(sorted(self.owned)),
            generation=self.generation.generation_id, group_instance_id=self.settings.group_instance_id))

    def _on_join_prepare(self) -> None:
        if self._release_if_lost() or self.cooperative:
            return   # cooperative: the pre-join commit runs on the round's thread (_background_preparation)
        # Eager: commit what was consumed, while still stable, then give everything up.
        self._commit_with_retry(self.hooks.positions)
        if self._release_if_lost():  # that commit found the member fenced
            return
        if self.owned:
            revoked, self.owned = set(self.owned), frozenset()
            self.hooks.revoke(revoked)

    def _background_preparation(self) -> Callable[[], bool] | None:
        """Cooperative: the pre-join commit, on the round's thread, so that records keep flowing (Kafka's
        onJoinPrepare sends it and returns; the JoinGroup goes at the application's next call once it is
        answered). None for eager members (theirs ran in _on_join_prepare), when nothing is owned to commit
        for (a first join, or after the partitions were lost) and when there is nothing to auto-commit
        (auto-commit off, as with Spring's acknowledgements, or nothing consumed): Kafka's onJoinPrepare then
        returns at once and the JoinGroup goes out in the same call, a follow-up round's in the poll that
        applied the revocation."""
        if not self.cooperative or not self.generation.is_valid or not self.hooks.positions():
            return None
        return self._cooperative_pre_join_commit

    def _cooperative_pre_join_commit(self) -> bool:
        """False when that commit found the member fenced (the polling thread then declares the partitions lost)."""
        self._commit_with_retry(self.hooks.positions)
        return self.generation.is_valid

    def _release_if_lost(self) -> bool:
        """No generation (fenced, removed, left): what we owned is lost, not revoked."""
        if self.generation.is_valid:
            return False
        if self.owned:
            lost, self.owned = set(self.owned), frozenset()
            self.hooks.lose(lost)
        return True

    def _on_join_complete(self, outcome: JoinOutcome) -> None:
        assigned = set(decode_assignment(outcome.assignment).partitions)
        owned = set(self.owned)
        revoked, added = owned - assigned, assigned - owned
        if self.cooperative:
            if revoked:
                # Only the listener, as Kafka's onJoinComplete: the commit was the pre-join one.
                self.owned = frozenset(owned & assigned)
                self.hooks.revoke(revoked)
                # KIP-429: what we gave up goes to its new owner in a follow-up round.
                self.request_rejoin("cooperative: revoked partitions")
            self.owned = frozenset(assigned)
            if added:
                self.hooks.assign(added)
        else:
            self.owned = frozenset(assigned)
            self.hooks.assign(assigned)
        self.hooks.rebalanced()
        duration_ms = (time.monotonic() - outcome.started) * 1000
        self.metrics.rebalance_completed(duration_ms, time.monotonic())
        generation = outcome.generation
        self.recorder.emit(ev.REBALANCE_COMPLETED, self.member_name, generation=generation.generation_id,
                           assigned=sorted(map(str, assigned)), duration_ms=round(duration_ms, 3),
                           attempts=outcome.attempts, protocol=generation.protocol,
                           leader=outcome.leader == generation.member_id, member_id=generation.member_id)
        self.recorder.emit(ev.METRICS, self.member_name, **self.metrics.snapshot(time.monotonic()))

    # ------------------------------------------------------------ the leader's assignment (join worker)

    def _perform_assignment(self, connection: BrokerConnection, protocol: str, members: Iterable[Any]
                            ) -> dict[str, bytes]:
        if protocol != self.assignor.name:
            raise GroupError(errors.INCONSISTENT_GROUP_PROTOCOL, f"leader cannot run {protocol!r}")
        subscriptions = {m.member_id: decode_subscription(bytes(m.metadata), m.group_instance_id) for m in members}
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        counts = self._partition_counts(connection, topics)
        valid = {t: c for t, c in counts.items() if c > 0}
        cleaned = {
            member: Subscription(topics=tuple(t for t in s.topics if t in valid),
                                 owned_partitions=tuple(tp for tp in s.owned_partitions
                                                        if tp.topic in valid and tp.partition < valid[tp.topic]),
                                 generation=s.generation, user_data=s.user_data, group_instance_id=s.group_instance_id)
            for member, s in subscriptions.items()
        }
        assignments = self.assignor.assign(valid, cleaned)
        return {member: encode_assignment(assignment) for member, assignment in assignments.items()}

    def _partition_counts(self, connection: BrokerConnection, topics: list[str]) -> dict[str, int]:
        response = self._send(connection, "Metadata", MetadataRequest[METADATA_VERSION](
            topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=True))
        return {t.name: len(t.partitions) if t.error_code == 0 else 0 for t in response.topics}

    # ------------------------------------------------------------ offsets

    def commit(self, offsets: Mapping[TopicPartition, int], *, timeout_s: float | None = None) -> ErrorClass:
        """One synchronous OffsetCommit with this member's generation: NONE or the error. It takes its place
        in the commit line now and goes out after every commit made before it (`modern.classic.commit_line`);
        one that cannot go out within `timeout_s` (default request.timeout.ms) fails with REQUEST_TIMED_OUT."""
        if not offsets:
            return errors.NONE
        place = self._commit_line.take_place()
        wait_s = self.settings.request_timeout_ms / 1000 if timeout_s is None else timeout_s
        try:
            return self._commit_in_turn(place, offsets, time.monotonic() + wait_s)
        finally:
            self._commit_line.leave(place)

    def _commit_in_turn(self, place: object, offsets: Mapping[TopicPartition, int], deadline: float) -> ErrorClass:
        if not self._commit_line.wait_turn(place, deadline):  # the commits before it took the whole time
            error = errors.REQUEST_TIMED_OUT
        else:
            generation = self.membership.generation_if_stable()
            if generation is None:  # Kafka's consumer fails such a commit without sending it
                error = errors.REBALANCE_IN_PROGRESS if self.membership.rebalancing else errors.UNKNOWN_MEMBER_ID
            else:
                remaining = deadline - time.monotonic()
                error = (self._send_commit(self.ensure_coordinator(), offsets, generation, remaining)
                         if remaining > 0 else errors.REQUEST_TIMED_OUT)
        self.hooks.committed(offsets, error, self.generation.generation_id)
        return error

    def maybe_commit_async(self, offsets: Mapping[TopicPartition, int], *, retry_soon: Callable[[], None]) -> bool:
        """Auto-commit, sent in the background unless the coordinator is unknown or the member is not stable;
        True when a commit went out. As Kafka 3.7's, a commit still out does not hold the next one back, and
        the offsets are the ones given now: the commit takes its place in the commit line now, goes out once
        the commits made before it are answered (in order, on one connection) and fails with
        REQUEST_TIMED_OUT when request.timeout.ms passes first. After a retriable failure `retry_soon` is
        called (Kafka's auto-commit callback then sets the next try retry.backoff.ms away)."""
        with self._lock:
            if not offsets or not self.coordinator_known or self.membership.generation_if_stable() is None \
                    or self.rejoin_pending:
                return False
        place = self._commit_line.take_place()
        deadline = time.monotonic() + self.settings.request_timeout_ms / 1000
        threading.Thread(target=self._auto_commit, args=(place, dict(offsets), deadline, retry_soon),
                         name=f"commit-{self.member_name}", daemon=True).start()
        return True

    def _auto_commit(self, place: object, offsets: dict[TopicPartition, int], deadline: float,
                     retry_soon: Callable[[], None]) -> None:
        try:
            try:
                error = self._commit_in_turn(place, offsets, deadline)
            except ConnectionFailed:
                self._coordinator_unknown()
                error = errors.COORDINATOR_NOT_AVAILABLE
                self.hooks.committed(offsets, error, self.generation.generation_id)
        finally:
            self._commit_line.leave(place)
        if error in RETRIABLE_COMMIT_ERRORS:
            retry_soon()

    def _commit_with_retry(self, positions: Callable[[], Mapping[TopicPartition, int]]) -> ErrorClass:
        """As Kafka's pre-join commit: retried with backoff while the error is retriable, up to the
        rebalance timeout, each try with the positions as they are then."""
        deadline = time.monotonic() + self.settings.effective_rebalance_timeout_ms / 1000
        while True:
            offsets = positions()
            try:
                error = self.commit(offsets)
            except ConnectionFailed:
                self._coordinator_unknown()
                error = errors.COORDINATOR_NOT_AVAILABLE
                self.hooks.committed(offsets, error, self.generation.generation_id)
            if error not in RETRIABLE_COMMIT_ERRORS or time.monotonic() >= deadline or self._closing.is_set():
                return error
            time.sleep(self.settings.retry_backoff_ms / 1000)

    def _send_commit(self, connection: BrokerConnection, offsets: Mapping[TopicPartition, int], generation: Any,
                     timeout_s: float | None = None) -> ErrorClass:
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for tp, offset in sorted(offsets.items()):
            by_topic.setdefault(tp.topic, []).append((tp.partition, offset))
        topic_cls = OffsetCommitRequest.OffsetCommitRequestTopic
        request = OffsetCommitRequest[COMMIT_VERSION](
            group_id=self.settings.group,
            generation_id_or_member_epoch=generation.generation_id,
            member_id=generation.member_id,
            group_instance_id=self.settings.group_instance_id,
            topics=[topic_cls(name=topic, partitions=[
                topic_cls.OffsetCommitRequestPartition(partition_index=p, committed_offset=o,
                                                       committed_leader_epoch=-1, committed_metadata="")
                for p, o in parts]) for topic, parts in by_topic.items()])
        try:
            response = self._send(connection, "OffsetCommit", request, timeout_s=timeout_s)
        except ConnectionFailed:
            self._coordinator_unknown()
            return errors.COORDINATOR_NOT_AVAILABLE
        codes = {p.error_code for t in response.topics for p in t.partitions}
        error = errors.for_code(max(codes, key=lambda c: c != 0)) if codes else errors.NONE
        return self._commit_answered(error, generation)

    def _commit_answered(self, error: ErrorClass, sent: Any) -> ErrorClass:
        """What a commit's error means, as Kafka's OffsetCommitResponseHandler reads it; `sent` is the
        generation the commit carried."""
        with self._lock:
            unchanged = self.generation == sent
            preparing = self.membership.state is MembershipState.PREPARING_REBALANCE
            if error in (errors.UNKNOWN_MEMBER_ID, errors.ILLEGAL_GENERATION):
                if not unchanged and preparing:
                    return errors.REBALANCE_IN_PROGRESS  # a stale commit of a member already joining again
                self._membership_lost(f"commit: {errors.name_of(error)}",
                                      keep_member_id=error is errors.ILLEGAL_GENERATION)
            elif error is errors.FENCED_INSTANCE_ID:
                if not unchanged:
                    return errors.REBALANCE_IN_PROGRESS if preparing else error   # CommitFailedException
                # Another process took this static member's place: fatal, the partitions lost first.
                self._membership_lost("commit: FENCED_INSTANCE_ID")
                self._fatal = GroupError(error, "OffsetCommit")
            elif error is errors.REBALANCE_IN_PROGRESS:
                self.request_rejoin("commit: REBALANCE_IN_PROGRESS")
            elif error in errors.COORDINATOR_MOVED:
                self._coordinator_unknown()   # COORDINATOR_LOAD_IN_PROGRESS: retried at the same broker
        return error

    def fetch_committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Committed next offsets (partitions without one are left out)."""
        topics = by_topic(partitions)
        if not topics:
            return {}

        def attempt() -> tuple[ErrorClass, list]:
            response = self._send(self.ensure_coordinator(), "OffsetFetch", OffsetFetchRequest[FETCH_VERSION](
                group_id=self.settings.group,
                topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                        for t, ps in topics.items()],
                require_stable=False))
            return errors.for_code(response.error_code), response.topics

        return fetch_committed(attempt, timeout_ms=self.settings.request_timeout_ms,
                               backoff_ms=self.settings.retry_backoff_ms, coordinator_moved=self._coordinator_unknown,
                               stopping=self._closing.is_set)
