"""The membership manager (Kafka's `ConsumerMembershipManager` with its heartbeat request manager): the member's
side of ConsumerGroupHeartbeat, finding the coordinator, the heartbeat thread, the member epoch and the
assignment the coordinator last sent.

The member's state is a `ClientMemberState` (`modern.kip848.member_states` writes the states and their
allowed moves down, beside Kafka's), changed only through `_set_state`, which refuses any other move.
A JOINING member sends epoch 0 and every field; a member with an epoch sends it, and only the fields
that changed (its owned partitions when they changed), as Kafka's consumer does; after any failed
heartbeat every field is sent again. An answer whose target differs from what the member owns moves
it to RECONCILING; the polling thread reconciles and acknowledges (ACKNOWLEDGING: the next heartbeat
goes at once), and that heartbeat leaves it STABLE or RECONCILING, as Kafka's
`onHeartbeatRequestGenerated`. A FENCED member sends nothing until the polling thread has declared its
partitions lost: only then does it join again, under the same member id (Kafka 4's client keeps its id
for its lifetime). The session is the coordinator's: a member cut off keeps its partitions, retrying
with backoff, until an answer says it was fenced, as Kafka's consumer does.

Errors, as Kafka's AbstractHeartbeatRequestManager reads them: NOT_COORDINATOR and
COORDINATOR_NOT_AVAILABLE mark the coordinator unknown and reset the backoff, so the next heartbeat
goes as soon as the lookup answers; COORDINATOR_LOAD_IN_PROGRESS and a broken connection back off
(exponentially from retry.backoff.ms to retry.backoff.max.ms, with jitter); the lookup is the client's
one `modern.client.coordinator_lookup.CoordinatorLookup`, with the same backoff.

Partition callbacks never run here: the polling thread reads `snapshot()` and reconciles, then
calls `ack_now()` so the change is reported without waiting for the interval.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from modern.client.connection import BrokerConnection, ConnectionFailed
from modern.client.coordinator_lookup import Coordinator, CoordinatorLookup, ExponentialBackoff
from modern.client.traced_requests import TracedRequests
from modern.common import errors
from modern.common.consumer_group_messages import ConsumerGroupHeartbeatRequest
from modern.common.errors import GroupError
from modern.kip848.client_settings import Kip848Settings
from modern.kip848.member_states import (
    HEARTBEAT_NOW,
    HEARTBEATING,
    IN_GROUP,
    PREVIOUS_STATES,
    RECONCILES,
    ClientMemberState,
    check_transition,
)
from rebalance import events as ev
from rebalance import heartbeat_kinds
from rebalance.events import EventRecorder
from rebalance.topic_ids import topic_id
from rebalance.types import TopicPartition

HEARTBEAT_VERSION = 1     # v1: the member makes its own id
JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH = 0, -1, -2
FENCING_ERRORS = frozenset({errors.FENCED_MEMBER_EPOCH, errors.UNKNOWN_MEMBER_ID})


S = ClientMemberState


@dataclass(frozen=True)
class Snapshot:
    """What the polling thread reconciles against, read in one go."""

    state: ClientMemberState
    member_epoch: int
    target: frozenset[TopicPartition] | None   # the last assignment the coordinator sent (None: none yet)
    target_seq: int                            # bumped by every answer that carried an assignment
    fatal: BaseException | None


class MembershipManager:
    def __init__(self, settings: Kip848Settings, *, recorder: EventRecorder, member_name: str,
                 owned: Callable[[], frozenset[TopicPartition]]) -> None:
        self.settings = settings
        self.recorder = recorder
        self.member_name = member_name
        self.member_id = str(uuid.uuid4())
        self.requests = TracedRequests(recorder, member_name=member_name, group=settings.group)
        self._owned = owned
        self._topic_names = {topic_id(name): name for name in settings.topics}
        self._lock = threading.RLock()
        self._wake = threading.Condition(self._lock)
        self._state = S.UNSUBSCRIBED
        self._epoch = JOIN_EPOCH
        self._target: frozenset[TopicPartition] | None = None
        self._target_seq = 0
        self._fatal: BaseException | None = None
        self._interval_ms: int | None = None       # Kafka's starts at 0: none until the coordinator gives one
        self._next_due = 0.0                       # restarted at each send, as Kafka's heartbeat timer
        self._in_flight = False
        self._send_all = True                      # every field in the next heartbeat
        self._last_reported: frozenset[TopicPartition] | None = None
        self.backoff = ExponentialBackoff(settings.retry_backoff_ms, settings.retry_backoff_max_ms)
        self._draw = random.Random().random
        self._failed_attempts = 0                  # heartbeats failed in a row (the backoff's exponent)
        self._backing_off = False                  # the next heartbeat waits for _next_due, ack or not
        self._coordinator_known = False
        self._main: BrokerConnection | None = None   # commits and offset fetches
        self._beat: BrokerConnection | None = None   # heartbeats only
        self._coordinator: tuple[str, int] | None = None
        self._stopping = threading.Event()
        # Set when the polling thread has something to act on (a state change, a new assignment): a poll
        # that owns nothing waits on it instead of spinning.
        self.news = threading.Event()
        self.lookup = CoordinatorLookup(
            group=settings.group, bootstrap=settings.bootstrap, client_id=settings.client_id,
            request_timeout_ms=settings.request_timeout_ms, backoff=self.backoff, requests=self.requests,
            stopping=self._stopping, connect=lambda host, port: self._connect(host, port))
        self._thread = threading.Thread(target=self._loop, name=f"heartbeat-{member_name}", daemon=True)

    # ------------------------------------------------------------ what the polling thread uses

    def start(self) -> None:
        """Subscribe: an unsubscribed member starts joining, and the heartbeat thread starts."""
        with self._lock:
            if self._state is S.UNSUBSCRIBED:
                self._set_state(S.JOINING)
        self._thread.start()

    def snapshot(self) -> Snapshot:
        with self._lock:
            return Snapshot(self._state, self._epoch, self._target, self._target_seq, self._fatal)

    @property
    def member_epoch(self) -> int:
        return self._epoch

    @property
    def coordinator_known(self) -> bool:
        return self._coordinator_known

    def time_to_next_heartbeat_s(self) -> float | None:
        """How long the application thread may wait for data before the next heartbeat (Kafka's
        AbstractHeartbeatRequestManager.maximumTimeToWait): 0 when one is due now and not yet sent
        (shouldHeartbeatNow), else the time left on the heartbeat timer or the backoff. None while no interval
        has been given: Kafka's is 0 until the first answer, so its application thread does not wait then."""
        with self._lock:
            if self._interval_ms is None:
                return None
            if self._state in HEARTBEAT_NOW and not self._in_flight and not self._backing_off:
                return 0.0
            return max(0.0, self._next_due - time.monotonic())

    def reconciling(self) -> bool:
        """The polling thread starts reconciling the target; False if the member may no longer (fenced,
        leaving or stopped meanwhile)."""
        with self._lock:
            if self._state not in RECONCILES:
                return False
            self._set_state(S.RECONCILING)
            return True

    def ack_now(self) -> None:
        """A reconciliation step is done: report the owned partitions with the next heartbeat, now.
        Nothing to report once the member is out of the group meanwhile."""
        with self._lock:
            if self._state in (S.RECONCILING, S.ACKNOWLEDGING):
                self._set_state(S.ACKNOWLEDGING)

    def rejoin(self) -> None:
        """After fencing, once the partitions were declared lost: join again with epoch 0."""
        with self._lock:
            if self._state is S.FENCED:
                self._epoch, self._target, self._send_all = JOIN_EPOCH, None, True
                self._set_state(S.JOINING)

    def prepare_leaving(self) -> None:
        """Closing: the polling thread commits and revokes next; heartbeats go on meanwhile (Kafka's
        leaveGroup, before its callbacks run)."""
        with self._lock:
            if self._state in PREVIOUS_STATES[S.PREPARE_LEAVING] - {S.UNSUBSCRIBED}:   # not started: nothing to do
                self._set_state(S.PREPARE_LEAVING)

    def leave(self) -> None:
        """Stop heartbeating and tell the coordinator: epoch -1, or -2 for a static member. Only a member
        the coordinator gave an epoch sends it; one fenced meanwhile is out of the group already."""
        self.prepare_leaving()
        with self._lock:
            if self._state is S.PREPARE_LEAVING:
                self._set_state(S.LEAVING)
            elif self._state is S.FENCED:
                self._set_state(S.UNSUBSCRIBED)   # Kafka's leaveGroup for a fenced member
            send = self._state is S.LEAVING and self._epoch > 0 and self._coordinator is not None
        self._halt()
        if send:
            epoch = STATIC_LEAVE_EPOCH if self.settings.instance_id else LEAVE_EPOCH
            try:
                connection = self._connect(*self._coordinator)
                try:
                    self._heartbeat(connection, epoch, send_all=False, owned=None)
                finally:
                    connection.close()
            except ConnectionFailed:
                pass   # the coordinator will find out when the session ends
        with self._lock:
            if self._state is S.LEAVING:
                self._set_state(S.UNSUBSCRIBED)   # sent or skipped, as Kafka's onHeartbeatRequestSkipped

    def stop(self) -> None:
        """Stop at once and send nothing more (a crash)."""
        with self._lock:
            if self._state is not S.FATAL:
                self._set_state(S.STOPPED)
        self._halt()

    def _halt(self) -> None:
        """End the heartbeat thread and close its connections; the state is the caller's."""
        self._stopping.set()
        with self._lock:
            self._wake.notify_all()
        for connection in (self._beat, self._main):
            if connection is not None:
                connection.abort()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)
        for connection in (self._beat, self._main):
            if connection is not None:
                connection.close()

    def to_coordinator(self, op: str, request):
        """A group request other than the heartbeat (OffsetCommit, OffsetFetch): traced, to the coordinator, found
        first if need be, on the member's main connection."""
        return self.requests.send(self.ensure_coordinator(), op, request)

    def retry_delay_s(self, attempts: int) -> float:
        """How long a request that failed `attempts` times waits before its next try: the client's exponential
        backoff with jitter (retry.backoff.ms up to retry.backoff.max.ms)."""
        return self.backoff.backoff_ms(attempts, random.random()) / 1000

    def coordinator_unknown(self) -> None:
        with self._lock:
            self._coordinator_known = False

    def ensure_coordinator(self) -> BrokerConnection:
        """The connection for commits and offset fetches, looking the coordinator up if needed."""
        self._find_coordinator()
        return self._main

    # ------------------------------------------------------------ the heartbeat thread

    def _loop(self) -> None:
        try:
            while not self._stopping.is_set():
                with self._wake:
                    if self._state not in HEARTBEATING:
                        self._wake.wait(0.1)
                        continue
                    wait_s = self._next_due - time.monotonic()
                    waiting = self._backing_off or self._state not in HEARTBEAT_NOW
                    if wait_s > 0 and waiting:
                        self._wake.wait(wait_s)   # releases the lock: snapshot() never waits on a backoff
                        continue
                    self._backing_off = False
                self._beat_once()
        except BaseException as error:  # never vanish: the next poll raises it
            with self._lock:
                self._fatal = error
                if self._state in PREVIOUS_STATES[S.FATAL]:   # else fenced or stopped: the error is kept
                    self._set_state(S.FATAL)

    def _beat_once(self) -> None:
        try:
            self._find_coordinator()
            with self._lock:
                if self._state not in HEARTBEATING:
                    return   # left, fenced or stopped since the loop looked
                joining = self._state is S.JOINING
                epoch = JOIN_EPOCH if joining else self._epoch
                send_all = self._send_all or joining
                owned = frozenset() if joining else self._owned()
                changed = owned != self._last_reported
                if self._state is S.ACKNOWLEDGING:   # this heartbeat is the acknowledgement
                    self._set_state(S.STABLE if owned == self._target else S.RECONCILING)
                # Kafka's makeHeartbeatRequest restarts the heartbeat timer as the request goes out
                self._next_due = time.monotonic() + (self._interval_ms or 0) / 1000
                self._in_flight = True
            report = owned if (send_all or changed) else None
            answer = self._heartbeat(self._beat, epoch, send_all=send_all, owned=report)
        except ConnectionFailed:
            self.coordinator_unknown()   # a disconnect: look it up again, after the backoff
            self._retry_later()
            return
        finally:
            with self._lock:
                self._in_flight = False
        if answer is not None:
            self._on_answer(answer, report)

    def _on_answer(self, answer: Any, reported: frozenset[TopicPartition] | None) -> None:
        error = errors.for_code(answer.error_code)
        with self._lock:
            state = self._state
            if state not in HEARTBEATING:
                return   # left, fenced or stopped meanwhile: the answer is void
            if error is errors.NONE:
                self._epoch = answer.member_epoch
                if answer.heartbeat_interval_ms > 0 and answer.heartbeat_interval_ms != self._interval_ms:
                    # Kafka's updateHeartbeatIntervalMs: a new interval restarts the timer from now
                    self._interval_ms = answer.heartbeat_interval_ms
                    self._next_due = time.monotonic() + self._interval_ms / 1000
                if answer.assignment is not None:
                    self._target = self._decode(answer.assignment)
                    self._target_seq += 1
                if reported is not None:
                    self._last_reported = reported
                self._send_all = False
                self._failed_attempts = 0
                self._set_state(self._after_success(state))
            elif error in FENCING_ERRORS and state in IN_GROUP:
                self._epoch, self._target, self._last_reported = JOIN_EPOCH, None, None
                if state is S.PREPARE_LEAVING:   # Kafka: no leave heartbeat and no rejoin then
                    self._set_state(S.LEAVING)
                    self._set_state(S.UNSUBSCRIBED)
                else:
                    self._set_state(S.FENCED)
            elif error in errors.COORDINATOR_MOVED:
                # Kafka: mark the coordinator unknown and reset the backoff, so the next heartbeat goes
                # as soon as the lookup answers.
                self._coordinator_known = False
                self._failed_attempts = 0
                self._send_all = True
                self._next_due = time.monotonic()
            elif error in FENCING_ERRORS or error is errors.COORDINATOR_LOAD_IN_PROGRESS:
                self._retry_later()
            else:   # UNSUPPORTED_ASSIGNOR, INVALID_REQUEST, GROUP_MAX_SIZE_REACHED, UNRELEASED_INSTANCE_ID, ...
                self._fatal = GroupError(error, "ConsumerGroupHeartbeat")
                self._set_state(S.FATAL)

    def _after_success(self, state: ClientMemberState) -> ClientMemberState:
        """Where an answered heartbeat leaves the member: a joining or stable member with a target it does
        not own starts reconciling; RECONCILING and ACKNOWLEDGING end only through the polling thread and
        the acknowledging heartbeat; a leaving member takes no new assignment."""
        if state in (S.JOINING, S.STABLE):
            pending = self._target is not None and self._target != self._owned()
            return S.RECONCILING if pending else S.STABLE
        return state

    def _retry_later(self) -> None:
        """Back off (Kafka's: from retry.backoff.ms doubling up to retry.backoff.max.ms, +-20 %) and send
        every field next time. Only the time of the next heartbeat is set here: `_loop` waits for it on
        the condition, which releases the lock, so the polling thread never waits on the heartbeat's
        backoff (in Kafka the application thread never does: the backoff is the background thread's)."""
        with self._lock:
            self._send_all = True
            self._next_due = time.monotonic() + self.backoff.backoff_ms(self._failed_attempts, self._draw()) / 1000
            self._failed_attempts += 1
            self._backing_off = True

    def _heartbeat(self, connection: BrokerConnection, epoch: int, *, send_all: bool,
                   owned: frozenset[TopicPartition] | None) -> Any:
        """One ConsumerGroupHeartbeat, recorded with what it was for (join, leave, ack, assignment, steady),
        decided by `rebalance.heartbeat_kinds.detail` from the same facts the coordinator counts it by: the
        request's epoch and owned partitions, the answer's assignment against the last one received."""
        request = ConsumerGroupHeartbeatRequest[HEARTBEAT_VERSION](
            group_id=self.settings.group, member_id=self.member_id, member_epoch=epoch,
            instance_id=self.settings.instance_id if (send_all or epoch < 0) else None, rack_id=None,
            rebalance_timeout_ms=self.settings.rebalance_timeout_ms if send_all else -1,
            subscribed_topic_names=list(self.settings.topics) if send_all else None, subscribed_topic_regex=None,
            server_assignor=self.settings.assignor if send_all else None, client_assignors=None,
            topic_partitions=None if owned is None else self._encode(owned))
        started = time.monotonic()
        try:
            answer = connection.request(request)
        except ConnectionFailed:
            self._record(started, self._detail(epoch, owned, None), error="NETWORK_EXCEPTION")
            raise
        assignment = None if answer.assignment is None else self._decode(answer.assignment)
        self._record(started, self._detail(epoch, owned, assignment), error=errors.name_of(answer.error_code),
                     broker=connection.address)
        return answer

    def _detail(self, epoch: int, owned: frozenset[TopicPartition] | None, assignment: frozenset | None) -> str:
        with self._lock:
            held = self._target
        return heartbeat_kinds.detail(member_epoch=epoch, owned_reported=owned is not None, assignment=assignment,
                                 held=held)

    def _record(self, started: float, detail: str, **fields: object) -> None:
        self.recorder.emit(ev.COORDINATION_REQUEST, self.member_name, op=heartbeat_kinds.API,
                           group=self.settings.group, latency_ms=round((time.monotonic() - started) * 1000, 3),
                           detail=detail, **fields)

    # ------------------------------------------------------------ the coordinator

    def _find_coordinator(self) -> None:
        """The client's one lookup (heartbeat thread, polling thread and commit thread share it)."""
        self.lookup.ensure(known=lambda: self._coordinator_known and self._main is not None,
                           install=self._install_coordinator)

    def _install_coordinator(self, found: Coordinator) -> None:
        with self._lock:
            if self._coordinator != found.address or self._main is None:
                old = (self._main, self._beat)
                self._main, self._beat = self._connect(found.host, found.port), self._connect(found.host, found.port)
                for connection in old:
                    if connection is not None:
                        connection.abort()   # the old coordinator's: what is in flight there is void
            self._coordinator = found.address
            self._coordinator_known = True

    def _connect(self, host: str, port: int) -> BrokerConnection:
        return BrokerConnection(host, port, client_id=self.settings.client_id,
                                timeout_s=self.settings.request_timeout_ms / 1000)

    # ------------------------------------------------------------ helpers

    def _set_state(self, state: ClientMemberState) -> None:
        """The one place the state changes: an illegal move raises; every move wakes the heartbeat thread
        and tells the polling thread there is news."""
        with self._lock:
            check_transition(self._state, state)
            self._state = state
            self._wake.notify_all()
            self.news.set()

    def _decode(self, assignment: Any) -> frozenset[TopicPartition]:
        return frozenset(TopicPartition(self._topic_names[t.topic_id], p) for t in assignment.topic_partitions
                         if t.topic_id in self._topic_names for p in t.partitions)

    @staticmethod
    def _encode(owned: frozenset[TopicPartition]) -> list[Any]:
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(owned):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        cls = ConsumerGroupHeartbeatRequest.TopicPartitions
        return [cls(topic_id=topic_id(name), partitions=indexes) for name, indexes in by_topic.items()]
