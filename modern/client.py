"""The consumer's side of the group protocol, in the four phases of a rebalance:

  1. FIND_COORDINATOR  ask any broker which broker coordinates the group;
  2. JOIN_GROUP        send the subscription; a v4+ coordinator first answers
                       MEMBER_ID_REQUIRED with an id to rejoin with; the join ends with a
                       generation, a protocol and a leader (only the leader sees the members);
  3. SYNC_GROUP        the leader runs the assignor and sends the plan; everyone gets its part;
  4. HEARTBEAT         a thread of its own keeps the session alive between polls and learns
                       of the next rebalance; polling itself must come back within
                       max.poll.interval.ms or the member leaves the group.

`GroupClient` does the phases; `ConsumerCoordinator` adds what a consumer needs: the
assignor (run by the leader), eager or cooperative (KIP-429) revocation, and offsets.
Partition changes are handed to a `PartitionHooks` (the member), on the polling thread only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kafka.protocol.consumer import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest

from modern import errors
from modern.connection import BrokerConnection, ConnectionFailed
from modern.consumer_protocol import (
    PROTOCOL_TYPE,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from modern.errors import ErrorClass, GroupError
from rebalance import events as ev
from rebalance.assignors import get_assignor
from rebalance.events import EventRecorder
from rebalance.types import NO_GENERATION, Generation, MemberState, Subscription, TopicPartition

# Versions this client speaks (the coordinator serves these and more).
JOIN_VERSION = 5            # v4: MEMBER_ID_REQUIRED, v5: group.instance.id
SYNC_VERSION = 3
HEARTBEAT_VERSION = 3
LEAVE_VERSION = 3
COMMIT_VERSION = 7
FETCH_VERSION = 7
FIND_VERSION = 3
METADATA_VERSION = 4

# Errors that end the member: configuration problems no retry can fix.
FATAL_ERRORS = frozenset({errors.INCONSISTENT_GROUP_PROTOCOL, errors.INVALID_SESSION_TIMEOUT,
                          errors.GROUP_MAX_SIZE_REACHED, errors.FENCED_INSTANCE_ID, errors.INVALID_GROUP_ID})
# Errors that mean "your membership is gone": the partitions are lost, not revoked.
MEMBERSHIP_ERRORS = frozenset({errors.UNKNOWN_MEMBER_ID, errors.ILLEGAL_GENERATION})


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(frozen=True, kw_only=True)
class ClientSettings:
    """The Kafka consumer settings this client honours, under their Kafka names' meaning."""

    group: str
    topics: tuple[str, ...]
    bootstrap: tuple[tuple[str, int], ...]
    client_id: str
    strategy: str = "range"                      # partition.assignment.strategy
    group_instance_id: str | None = None         # group.instance.id
    session_timeout_ms: int                      # session.timeout.ms (no default here: MemberConfig's is the one)
    heartbeat_interval_ms: int = 3_000           # heartbeat.interval.ms
    max_poll_interval_ms: int = 300_000          # max.poll.interval.ms (also the rebalance timeout)
    rebalance_timeout_ms: int | None = None      # defaults to max.poll.interval.ms, as Java does
    retry_backoff_ms: int = 100                  # retry.backoff.ms
    request_timeout_ms: int = 30_000             # request.timeout.ms

    def __post_init__(self) -> None:
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError("heartbeat.interval.ms must be lower than session.timeout.ms")
        if not self.topics:
            raise ValueError("a member needs at least one topic")

    @property
    def effective_rebalance_timeout_ms(self) -> int:
        return self.rebalance_timeout_ms or self.max_poll_interval_ms


class HeartbeatTimer:
    """When the next heartbeat is due and whether the session or the poll interval ran out.

    No I/O and no clock reading: every method takes `now` (ms), like kafka-python's Heartbeat.
    """

    def __init__(self, settings: ClientSettings, now: int) -> None:
        self.settings = settings
        self.last_send = self.last_receive = self.last_poll = self.last_reset = now
        self.heartbeat_failed = False

    def sent(self, now: int) -> None:
        self.last_send = now
        self.heartbeat_failed = False

    def received(self, now: int) -> None:
        self.last_receive = now

    def failed(self, now: int) -> None:
        self.heartbeat_failed = True

    def polled(self, now: int) -> None:
        self.last_poll = now

    def reset(self, now: int) -> None:
        self.last_reset = self.last_send = self.last_receive = now
        self.heartbeat_failed = False

    def time_to_next_heartbeat(self, now: int) -> int:
        interval = self.settings.retry_backoff_ms if self.heartbeat_failed else self.settings.heartbeat_interval_ms
        return max(0, self.last_send + interval - now)

    def session_expired(self, now: int) -> bool:
        return now - max(self.last_receive, self.last_reset) > self.settings.session_timeout_ms

    def poll_timeout_expired(self, now: int) -> bool:
        return now - self.last_poll > self.settings.max_poll_interval_ms


class RebalanceMetrics:
    """Kafka's consumer-coordinator metrics, under their Kafka names."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.rebalance_ms: list[float] = []
        self.join_ms: list[float] = []
        self.sync_ms: list[float] = []
        self.failed = 0
        self.last_rebalance_end: float | None = None   # monotonic seconds

    def record(self, kind: str, millis: float) -> None:
        with self._lock:
            getattr(self, f"{kind}_ms").append(millis)
            if kind == "rebalance":
                self.last_rebalance_end = time.monotonic()

    def record_failure(self) -> None:
        with self._lock:
            self.failed += 1

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            def avg(values: list[float]) -> float:
                return sum(values) / len(values) if values else float("nan")

            ago = -1.0 if self.last_rebalance_end is None else time.monotonic() - self.last_rebalance_end
            return {
                "rebalance-latency-avg": avg(self.rebalance_ms),
                "rebalance-latency-max": max(self.rebalance_ms, default=float("nan")),
                "rebalance-latency-total": sum(self.rebalance_ms),
                "rebalance-total": len(self.rebalance_ms),
                "failed-rebalance-total": self.failed,
                "join-time-avg": avg(self.join_ms),
                "join-time-max": max(self.join_ms, default=float("nan")),
                "sync-time-avg": avg(self.sync_ms),
                "sync-time-max": max(self.sync_ms, default=float("nan")),
                "last-rebalance-seconds-ago": ago,
            }


class PartitionHooks(Protocol):
    """What the coordinator tells the member, always on the polling thread."""

    def revoke(self, partitions: set[TopicPartition]) -> None: ...   # commit (if auto) and give up

    def assign(self, partitions: set[TopicPartition]) -> None: ...   # start fetching

    def lose(self, partitions: set[TopicPartition]) -> None: ...     # gone without a chance to commit


@dataclass
class _JoinOutcome:
    generation: Generation
    leader: str
    assignment: bytes


@dataclass
class _Flags:
    """What the heartbeat thread found out, for the polling thread to act on."""

    rejoin_reason: str | None = "join"
    partitions_lost: bool = False
    fatal: BaseException | None = None
    coordinator_unknown: bool = True


class ConsumerCoordinator:
    def __init__(self, settings: ClientSettings, hooks: PartitionHooks, *, recorder: EventRecorder,
                 member_name: str) -> None:
        self.settings = settings
        self.hooks = hooks
        self.recorder = recorder
        self.member_name = member_name
        self.assignor = get_assignor(settings.strategy)
        self.cooperative = str(self.assignor.rebalance_protocol) == "cooperative"
        self.metrics = RebalanceMetrics()
        self.state = MemberState.UNJOINED
        self.generation: Generation = NO_GENERATION
        self.member_id = ""                       # kept across rejoins (set by MEMBER_ID_REQUIRED or a join)
        self.owned: frozenset[TopicPartition] = frozenset()
        self.coordinator: tuple[int, str, int] | None = None
        self.requests_sent: dict[str, int] = {}
        self._lock = threading.RLock()            # guards state, generation and flags across the threads
        self._flags = _Flags()
        # One connection per thread that talks to the coordinator, so none waits behind another's
        # parked request: commits and offset fetches (polling thread), JoinGroup/SyncGroup (the
        # join worker), heartbeats (the heartbeat thread).
        self._main: BrokerConnection | None = None
        self._join: BrokerConnection | None = None
        self._beat: BrokerConnection | None = None
        self._join_worker: threading.Thread | None = None
        self._joined: tuple[_JoinOutcome, float, int] | None = None   # a finished join, to apply on poll
        self._rebalance_started = 0.0
        self._bootstrap_index = 0
        self._closing = threading.Event()
        self._wake = threading.Condition(self._lock)
        self._timer = HeartbeatTimer(settings, now_ms())
        self._thread = threading.Thread(target=self._heartbeat_loop, name=f"heartbeat-{member_name}", daemon=True)

    # ------------------------------------------------------------ life cycle

    def start(self) -> None:
        self._thread.start()

    def close(self, *, leave: bool = True) -> None:
        self._closing.set()
        with self._wake:
            self._wake.notify_all()
        for connection in (self._main, self._join, self._beat):
            if connection is not None:
                connection.abort()
        self._thread.join(timeout=10)
        if self._join_worker is not None:
            self._join_worker.join(timeout=10)
        if leave and (self.generation.is_valid or self.member_id):
            self._leave_group("close")
        for connection in (self._main, self._join, self._beat):
            if connection is not None:
                connection.close()

    # ------------------------------------------------------------ the polling thread

    def poll(self) -> None:
        """Called on every consumer poll; never blocks on the group (like Java's poll(timeout)).

        It notes the poll (max.poll.interval.ms), applies a join that finished since the last
        poll (listener callbacks run here, on the polling thread), and when a rebalance is
        needed prepares for it here (eager: revoke everything) and starts the join in the
        background.
        """
        with self._lock:
            self._timer.polled(now_ms())
            if self._flags.fatal is not None:
                raise self._flags.fatal
            finished, self._joined = self._joined, None
        if finished is not None:
            self._on_join_complete(*finished)
        self._maybe_start_rebalance()

    def _maybe_start_rebalance(self) -> None:
        with self._lock:
            if self._join_worker is not None and self._join_worker.is_alive():
                return
            reason = self._flags.rejoin_reason
            if reason is None or self._joined is not None or self._closing.is_set():
                return
            self._flags.rejoin_reason = None   # consumed: a new reason after this starts a new round
            lost = self._flags.partitions_lost
            self._flags.partitions_lost = False
            self.state = MemberState.REBALANCING
        self._rebalance_started = time.monotonic()
        self.recorder.emit(ev.REBALANCE_STARTED, self.member_name, trigger=reason, group=self.settings.group)
        if lost and self.owned:
            lost_partitions = set(self.owned)
            self.owned = frozenset()
            self.hooks.lose(lost_partitions)
        if not self.cooperative and self.owned:
            # Eager: give everything up before joining (auto-commit happens in the hook).
            revoked = set(self.owned)
            self.hooks.revoke(revoked)
            self.owned = frozenset()
        subscription = Subscription(topics=self.settings.topics, owned_partitions=tuple(sorted(self.owned)),
                                    generation=self.generation.generation_id,
                                    group_instance_id=self.settings.group_instance_id)
        self._join_worker = threading.Thread(target=self._join_until_done, args=(subscription, self._rebalance_started),
                                             name=f"join-{self.member_name}", daemon=True)
        self._join_worker.start()

    def _join_until_done(self, subscription: Subscription, started: float) -> None:
        """The join worker: phases 1-3, retried until they succeed, fail for good, or we close."""
        attempts = 0
        try:
            while not self._closing.is_set():
                attempts += 1
                try:
                    outcome = self._join_and_sync(subscription)
                except GroupError as error:
                    self.metrics.record_failure()
                    if error.error in FATAL_ERRORS:
                        self.recorder.emit(ev.REBALANCE_FAILED, self.member_name,
                                           error=errors.name_of(error.error), attempts=attempts)
                        raise
                    self._closing.wait(self.settings.retry_backoff_ms / 1000)
                    continue
                except ConnectionFailed:
                    self.metrics.record_failure()
                    self._coordinator_dead()
                    self._closing.wait(self.settings.retry_backoff_ms / 1000)
                    continue
                with self._lock:
                    self._joined = (outcome, started, attempts)
                return
        except BaseException as error:  # never vanish: the next poll() raises it
            with self._lock:
                self._flags.fatal = error

    def _on_join_complete(self, outcome: _JoinOutcome, started: float, attempts: int) -> None:
        assigned = set(decode_assignment(outcome.assignment).partitions)
        owned = set(self.owned)
        with self._lock:
            self.generation = outcome.generation
            self.state = MemberState.STABLE
            self._timer.reset(now_ms())
        revoked = owned - assigned
        added = assigned - owned
        if self.cooperative:
            if revoked:
                self.hooks.revoke(revoked)
            self.owned = frozenset(owned & assigned)
            if added:
                self.owned = frozenset(assigned)
                self.hooks.assign(added)
            if revoked:
                # KIP-429: what we gave up goes to its new owner in a follow-up round.
                with self._lock:
                    self._flags.rejoin_reason = "cooperative: revoked partitions"
        else:
            self.owned = frozenset(assigned)
            self.hooks.assign(assigned)
        duration_ms = (time.monotonic() - started) * 1000
        self.metrics.record("rebalance", duration_ms)
        self.recorder.emit(ev.REBALANCE_COMPLETED, self.member_name, generation=outcome.generation.generation_id,
                           assigned=sorted(map(str, assigned)), duration_ms=round(duration_ms, 3), attempts=attempts,
                           protocol=outcome.generation.protocol, leader=outcome.leader == outcome.generation.member_id,
                           member_id=outcome.generation.member_id)
        self.recorder.emit(ev.METRICS, self.member_name, **self.metrics.snapshot())

    # ------------------------------------------------------------ phase 1: find the coordinator

    def ensure_coordinator(self) -> BrokerConnection:
        with self._lock:
            if self._main is not None and not self._flags.coordinator_unknown:
                return self._main
        deadline = time.monotonic() + self.settings.request_timeout_ms / 1000
        last_error: Exception | None = None
        while time.monotonic() < deadline and not self._closing.is_set():
            host, port = self.settings.bootstrap[self._bootstrap_index % len(self.settings.bootstrap)]
            self._bootstrap_index += 1
            probe = BrokerConnection(host, port, client_id=self.settings.client_id,
                                     timeout_s=self.settings.request_timeout_ms / 1000)
            try:
                response = self._send(probe, "FindCoordinator", FindCoordinatorRequest[FIND_VERSION](
                    key=self.settings.group, key_type=0))
            except ConnectionFailed as error:
                last_error = error
                time.sleep(self.settings.retry_backoff_ms / 1000)
                continue
            finally:
                probe.close()
            error = errors.for_code(response.error_code)
            if error is not errors.NONE:
                last_error = GroupError(error, "FindCoordinator")
                time.sleep(self.settings.retry_backoff_ms / 1000)
                continue
            with self._lock:
                for connection in (self._main, self._join, self._beat):
                    if connection is not None:
                        connection.abort()  # never wait here for a request in flight on the old one
                self.coordinator = (response.node_id, response.host, response.port)
                self._main, self._join, self._beat = (
                    BrokerConnection(response.host, response.port, client_id=self.settings.client_id,
                                     timeout_s=self.settings.request_timeout_ms / 1000)
                    for _ in range(3))
                self._flags.coordinator_unknown = False
                self._timer.reset(now_ms())
                return self._main
        raise ConnectionFailed(f"no coordinator found for group {self.settings.group!r}: {last_error}")

    def _coordinator_dead(self) -> None:
        with self._lock:
            self._flags.coordinator_unknown = True

    # ------------------------------------------------------------ phases 2 and 3: join and sync

    def _join_and_sync(self, subscription: Subscription) -> _JoinOutcome:
        self.ensure_coordinator()
        connection = self._join
        join_started = time.monotonic()
        join_timeout = self.settings.effective_rebalance_timeout_ms / 1000 + 5 + self.settings.request_timeout_ms / 1000
        while True:
            response = self._send(connection, "JoinGroup", JoinGroupRequest[JOIN_VERSION](
                group_id=self.settings.group,
                session_timeout_ms=self.settings.session_timeout_ms,
                rebalance_timeout_ms=self.settings.effective_rebalance_timeout_ms,
                member_id=self.member_id,
                group_instance_id=self.settings.group_instance_id,
                protocol_type=PROTOCOL_TYPE,
                protocols=[JoinGroupRequest.JoinGroupRequestProtocol(
                    name=self.assignor.name, metadata=encode_subscription(subscription))],
            ), timeout_s=join_timeout)
            error = errors.for_code(response.error_code)
            if error is errors.MEMBER_ID_REQUIRED:
                self.member_id = response.member_id  # the coordinator's id for us: rejoin with it at once
                continue
            break
        self._check_group_error("JoinGroup", error)
        self.member_id = response.member_id
        self.metrics.record("join", (time.monotonic() - join_started) * 1000)
        generation = Generation(response.generation_id, response.member_id, response.protocol_name)
        plan: dict[str, bytes] = {}
        if response.leader == response.member_id:
            plan = self._run_assignor(connection, response.protocol_name, response.members)
        sync_started = time.monotonic()
        sync = self._send(connection, "SyncGroup", SyncGroupRequest[SYNC_VERSION](
            group_id=self.settings.group,
            generation_id=generation.generation_id,
            member_id=generation.member_id,
            group_instance_id=self.settings.group_instance_id,
            assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                         for m, a in plan.items()],
        ), timeout_s=join_timeout)
        self._check_group_error("SyncGroup", errors.for_code(sync.error_code))
        self.metrics.record("sync", (time.monotonic() - sync_started) * 1000)
        return _JoinOutcome(generation, response.leader, bytes(sync.assignment))

    def _run_assignor(self, connection: BrokerConnection, protocol: str, members: Iterable[Any]) -> dict[str, bytes]:
        """The leader's job: decode every subscription, assign, encode."""
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

    def _check_group_error(self, api: str, error: ErrorClass) -> None:
        if error is errors.NONE:
            return
        with self._lock:
            if error is errors.UNKNOWN_MEMBER_ID or error is errors.FENCED_INSTANCE_ID:
                self.member_id = ""
                self.generation = NO_GENERATION
            elif error is errors.ILLEGAL_GENERATION:
                self.generation = NO_GENERATION
            elif error in errors.COORDINATOR_ERRORS:
                self._flags.coordinator_unknown = True
        raise GroupError(error, api)

    # ------------------------------------------------------------ phase 4: heartbeats (own thread)

    def _heartbeat_loop(self) -> None:
        try:
            while not self._closing.is_set():
                with self._wake:
                    wait_ms = self._timer.time_to_next_heartbeat(now_ms())
                    self._wake.wait(timeout=min(max(wait_ms, 1), 500) / 1000)
                    if self._closing.is_set():
                        return
                    if self.state is not MemberState.STABLE:
                        continue
                    rediscover = self._flags.coordinator_unknown
                if rediscover:
                    # As Java's heartbeat thread does: find the (new) coordinator and carry on.
                    try:
                        self.ensure_coordinator()
                    except ConnectionFailed:
                        pass
                    continue
                with self._wake:
                    now = now_ms()
                    if self._timer.poll_timeout_expired(now):
                        leave = True
                    else:
                        leave = False
                        if self._timer.session_expired(now):
                            self._flags.coordinator_unknown = True  # as Java does: look it up again
                            continue
                        if self._timer.time_to_next_heartbeat(now) > 0:
                            continue
                    generation = self.generation
                    connection = self._beat
                    self._timer.sent(now)
                if leave:
                    self._leave_for_poll_timeout()
                    continue
                self._send_heartbeat(connection, generation)
        except BaseException as error:  # never let the thread die silently: poll() re-raises it
            with self._lock:
                self._flags.fatal = error

    def _send_heartbeat(self, connection: BrokerConnection, generation: Generation) -> None:
        try:
            response = self._send(connection, "Heartbeat", HeartbeatRequest[HEARTBEAT_VERSION](
                group_id=self.settings.group, generation_id=generation.generation_id,
                member_id=generation.member_id, group_instance_id=self.settings.group_instance_id))
        except ConnectionFailed:
            with self._lock:
                self._timer.failed(now_ms())
                self._flags.coordinator_unknown = True  # rediscover; membership itself may be intact
            return
        error = errors.for_code(response.error_code)
        with self._lock:
            if self.generation != generation:
                return  # answered for a generation we already left
            if error is errors.NONE:
                self._timer.received(now_ms())
            elif error is errors.REBALANCE_IN_PROGRESS:
                self._timer.received(now_ms())
                self._flags.rejoin_reason = self._flags.rejoin_reason or "heartbeat: REBALANCE_IN_PROGRESS"
            elif error in MEMBERSHIP_ERRORS:
                if error is errors.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                self.generation = NO_GENERATION
                self.state = MemberState.UNJOINED
                self._flags.partitions_lost = True
                self._flags.rejoin_reason = f"heartbeat: {errors.name_of(error)}"
            elif error in errors.COORDINATOR_ERRORS:
                self._timer.failed(now_ms())
                self._flags.coordinator_unknown = True
            elif error is errors.FENCED_INSTANCE_ID:
                self._flags.fatal = GroupError(error, "Heartbeat")
            else:
                self._timer.failed(now_ms())

    def _leave_for_poll_timeout(self) -> None:
        """max.poll.interval.ms passed without a poll: leave so the group can move on without us."""
        self._leave_group("max.poll.interval.ms exceeded")
        with self._lock:
            if self.settings.group_instance_id is None:
                self.member_id = ""  # we left: the next join starts afresh (a static member keeps its place)
            self.generation = NO_GENERATION
            self.state = MemberState.UNJOINED
            self._flags.partitions_lost = True
            self._flags.rejoin_reason = "max.poll.interval.ms exceeded"

    def _leave_group(self, reason: str) -> None:
        if self.settings.group_instance_id is not None:
            return  # static members leave only by session timeout (as the Java client does)
        connection = self._beat or self._main
        if connection is None or not self.member_id:
            return
        try:
            self._send(connection, "LeaveGroup", LeaveGroupRequest[LEAVE_VERSION](
                group_id=self.settings.group,
                members=[LeaveGroupRequest.MemberIdentity(member_id=self.member_id, group_instance_id=None)]),
                reason=reason)
        except ConnectionFailed:
            pass  # the session timeout will remove us instead

    # ------------------------------------------------------------ offsets

    def commit(self, offsets: Mapping[TopicPartition, int]) -> ErrorClass:
        """OffsetCommit with this member's generation: NONE or the error (e.g. ILLEGAL_GENERATION)."""
        if not offsets:
            return errors.NONE
        connection = self.ensure_coordinator()
        with self._lock:
            generation = self.generation
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
            response = self._send(connection, "OffsetCommit", request)
        except ConnectionFailed:
            self._coordinator_dead()
            return errors.COORDINATOR_NOT_AVAILABLE
        codes = {p.error_code for t in response.topics for p in t.partitions}
        error = errors.for_code(max(codes, key=lambda c: c != 0)) if codes else errors.NONE
        with self._lock:
            if error in MEMBERSHIP_ERRORS and self.generation == generation:
                if error is errors.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                self.generation = NO_GENERATION
                self._flags.partitions_lost = True
                self._flags.rejoin_reason = f"commit: {errors.name_of(error)}"
            elif error is errors.REBALANCE_IN_PROGRESS:
                self._flags.rejoin_reason = self._flags.rejoin_reason or "commit: REBALANCE_IN_PROGRESS"
            elif error in errors.COORDINATOR_ERRORS:
                self._flags.coordinator_unknown = True
        return error

    def fetch_committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Committed next offsets (partitions without one are left out)."""
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        by_topic: dict[str, list[int]] = {}
        for tp in wanted:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        deadline = time.monotonic() + self.settings.request_timeout_ms / 1000
        while True:
            connection = self.ensure_coordinator()
            try:
                response = self._send(connection, "OffsetFetch", OffsetFetchRequest[FETCH_VERSION](
                    group_id=self.settings.group,
                    topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                            for t, ps in by_topic.items()],
                    require_stable=False))
                error = errors.for_code(response.error_code)
            except ConnectionFailed:
                error = errors.COORDINATOR_NOT_AVAILABLE
            if error is errors.NONE:
                return {TopicPartition(t.name, p.partition_index): p.committed_offset
                        for t in response.topics for p in t.partitions if p.committed_offset >= 0}
            if error in errors.COORDINATOR_ERRORS:
                self._coordinator_dead()
            if time.monotonic() > deadline or self._closing.is_set():
                raise GroupError(error, "OffsetFetch")
            time.sleep(self.settings.retry_backoff_ms / 1000)

    # ------------------------------------------------------------ sending, with an event per request

    def _send(self, connection: BrokerConnection, op: str, request: Any, *, timeout_s: float | None = None,
              **fields: object) -> Any:
        started = time.monotonic()
        self.requests_sent[op] = self.requests_sent.get(op, 0) + 1
        try:
            response = connection.request(request, timeout_s)
        except ConnectionFailed as failure:
            self.recorder.emit(ev.COORDINATION_REQUEST, self.member_name, op=op, group=self.settings.group,
                               latency_ms=round((time.monotonic() - started) * 1000, 3), error="NETWORK_EXCEPTION",
                               detail=str(failure), **fields)
            raise
        self.recorder.emit(ev.COORDINATION_REQUEST, self.member_name, op=op, group=self.settings.group,
                           latency_ms=round((time.monotonic() - started) * 1000, 3),
                           error=_response_error(response), broker=connection.address, **fields)
        return response


def _response_error(response: Any) -> str | None:
    code = getattr(response, "error_code", None)
    if code is None and hasattr(response, "topics") and response.topics:
        codes = [getattr(p, "error_code", 0) for t in response.topics for p in getattr(t, "partitions", [])]
        code = next((c for c in codes if c), 0)
    return errors.name_of(code) if code else None
