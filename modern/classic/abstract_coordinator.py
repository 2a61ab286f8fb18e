"""Group membership over the classic protocol, for any protocol type (Kafka's AbstractCoordinator):

  1. FIND_COORDINATOR  ask any broker which broker coordinates the group;
  2. JOIN_GROUP        send this member's protocols (a v4+ coordinator first answers
                       MEMBER_ID_REQUIRED with an id to rejoin with); the answer brings a
                       generation, a protocol and a leader (only the leader sees the members);
  3. SYNC_GROUP        the leader sends the plan; everyone gets its part;
  4. HEARTBEAT         its own thread, from the JoinGroup answer on; polling must come back
                       within max.poll.interval.ms or the member leaves the group;
  5. LEAVE_GROUP       on close (dynamic members only) or when the poll interval runs out.

The consumer's part (assignor, revocation, offsets) is `modern.classic.consumer_coordinator`, through the
hooks at the end of `GroupMembership`. The state is one `Membership` value (`modern.classic.membership_states`)
replaced through `_set`; membership is lost through `_membership_lost` and nowhere else.

Threads: the polling thread prepares and completes rebalances (every partition callback runs
there); a join worker does JoinGroup and SyncGroup so polling never blocks on the group; the
heartbeat thread. Each has its own connection, so none waits behind another's parked request.
Errors on the background threads never vanish: the next poll raises them.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from typing import Any

from kafka.protocol.consumer import HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest

from modern.classic.membership_states import (
    FATAL_ERRORS,
    MEMBERSHIP_ERRORS,
    REJOIN_AT_ONCE,
    HeartbeatTimer,
    Membership,
    MembershipState,
)
from modern.classic.settings import ClientSettings
from modern.client.connection import BrokerConnection, ConnectionFailed
from modern.client.coordinator_lookup import Coordinator, CoordinatorLookup, ExponentialBackoff
from modern.client.traced_requests import TracedRequests
from modern.common import errors
from modern.common.errors import ErrorClass, GroupError
from rebalance import events as ev
from rebalance.events import EventRecorder
from rebalance.metrics import RebalanceMetrics
from rebalance.types import Generation

# Versions this client speaks (the coordinator serves these and more).
JOIN_VERSION = 5            # v4: MEMBER_ID_REQUIRED, v5: group.instance.id
SYNC_VERSION = 3
HEARTBEAT_VERSION = 3
LEAVE_VERSION = 3
JOIN_TIMEOUT_LAPSE_MS = 5_000   # Kafka's JOIN_GROUP_TIMEOUT_LAPSE


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(frozen=True, kw_only=True)
class JoinOutcome:
    """A finished join and sync, waiting for the polling thread to apply it."""

    generation: Generation
    leader: str
    assignment: bytes
    started: float     # monotonic seconds: when the rebalance began
    attempts: int


class GroupMembership:
    protocol_type = "consumer"

    def __init__(self, settings: ClientSettings, *, recorder: EventRecorder, member_name: str) -> None:
        self.settings = settings
        self.recorder = recorder
        self.member_name = member_name
        self.metrics = RebalanceMetrics()
        self.coordinator: tuple[int, str, int] | None = None
        self.requests = TracedRequests(recorder, member_name=member_name, group=settings.group)
        self._membership = Membership()
        self._rejoin_reason: str | None = "join"
        self._coordinator_known = False
        self._fatal: BaseException | None = None
        self._lock = threading.RLock()            # guards the fields above across the threads
        self._wake = threading.Condition(self._lock)
        self._main: BrokerConnection | None = None    # commits and offset fetches
        self._join: BrokerConnection | None = None    # JoinGroup and SyncGroup
        self._beat: BrokerConnection | None = None    # heartbeats and LeaveGroup
        self._join_worker: threading.Thread | None = None
        self._joined: JoinOutcome | None = None
        self._closing = threading.Event()
        # Set when the polling thread has something to act on (a membership change, a rebalance asked for,
        # a join finished): a poll that owns nothing waits on it instead of spinning.
        self.news = threading.Event()
        self.lookup = CoordinatorLookup(
            group=settings.group, bootstrap=settings.bootstrap, client_id=settings.client_id,
            request_timeout_ms=settings.request_timeout_ms, requests=self.requests, stopping=self._closing,
            backoff=ExponentialBackoff(settings.retry_backoff_ms, settings.retry_backoff_max_ms),
            connect=lambda host, port: self._connect(host, port))
        self._timer = HeartbeatTimer(settings, now_ms())
        self._draw = random.random       # the jitter of the heartbeat's backoff
        self._heartbeat_thread = threading.Thread(target=self._heartbeat_loop, name=f"heartbeat-{member_name}",
                                                  daemon=True)

    # ------------------------------------------------------------ the state, changed in one place

    @property
    def membership(self) -> Membership:
        return self._membership

    @property
    def generation(self) -> Generation:
        return self._membership.generation

    @property
    def member_id(self) -> str:
        return self._membership.member_id

    @property
    def coordinator_known(self) -> bool:
        return self._coordinator_known

    @property
    def rejoin_pending(self) -> bool:
        """A rebalance asked for, under way, or finished and not applied yet (Kafka's rejoinNeededOrPending):
        no auto-commit goes out meanwhile."""
        with self._lock:
            worker = self._join_worker is not None and self._join_worker.is_alive()
            return worker or self._rejoin_reason is not None or self._joined is not None

    def _set(self, membership: Membership) -> None:
        with self._lock:
            self._membership = membership
            self._wake.notify_all()
        self.news.set()

    def request_rejoin(self, reason: str) -> None:
        with self._lock:
            self._rejoin_reason = self._rejoin_reason or reason
        self.news.set()

    def _membership_lost(self, reason: str, *, keep_member_id: bool = False) -> None:
        """The one place membership ends without a clean rebalance (fenced, removed, left on a poll
        timeout): no generation any more; the next poll declares the partitions lost and rejoins."""
        with self._lock:
            self._set(self._membership.lost(keep_member_id=keep_member_id))
            self._rejoin_reason = reason

    def _coordinator_unknown(self) -> None:
        with self._lock:
            self._coordinator_known = False

    # ------------------------------------------------------------ life cycle

    def start(self) -> None:
        self._heartbeat_thread.start()

    def close(self, *, leave: bool = True) -> None:
        self._closing.set()
        with self._wake:
            self._wake.notify_all()
        for connection in (self._main, self._join, self._beat):
            if connection is not None:
                connection.abort()
        self._heartbeat_thread.join(timeout=10)
        if self._join_worker is not None:
            self._join_worker.join(timeout=10)
        if leave and self.member_id:
            self._leave_group("close")
        for connection in (self._main, self._join, self._beat):
            if connection is not None:
                connection.close()

    # ------------------------------------------------------------ the polling thread

    def poll_group(self) -> bool:
        """Called on every consumer poll; never blocks on the group (like Java's poll(timeout)).

        It notes the poll (max.poll.interval.ms), applies a join that finished since the last
        poll, and when a rebalance is needed prepares for it here and starts the join in the
        background. True when no rebalance is pending (Kafka's `ConsumerCoordinator.poll` returns
        false before its auto-commit while a join is needed or under way).
        """
        with self._lock:
            self._timer.polled(now_ms())
            fatal = self._fatal
            finished, self._joined = self._joined, None
        if fatal is not None:
            self._release_if_lost()
            raise fatal
        if finished is not None:
            self._on_join_complete(finished)
        self._maybe_rejoin()
        return not self.rejoin_pending

    def _maybe_rejoin(self) -> None:
        with self._lock:
            if self._join_worker is not None and self._join_worker.is_alive():
                return
            reason = self._rejoin_reason
            if reason is None or self._joined is not None or self._closing.is_set():
                return
        started = time.monotonic()
        self.recorder.emit(ev.REBALANCE_STARTED, self.member_name, trigger=reason, group=self.settings.group)
        self._on_join_prepare()   # partitions lost, or the pre-join commit and eager revocation
        with self._lock:
            self._rejoin_reason = None  # consumed: a reason after this starts another round
        self._join_worker = threading.Thread(target=self._join_then_tell, args=(started,),
                                             name=f"join-{self.member_name}", daemon=True)
        self._join_worker.start()

    # ------------------------------------------------------------ phase 1: find the coordinator

    def ensure_coordinator(self) -> BrokerConnection:
        """The connection for commits and offset fetches, once the coordinator is known. One lookup per
        client (`modern.client.coordinator_lookup`): a thread that needs the coordinator while another looks it
        up waits for that answer. Connections are replaced only when the answer names another broker;
        a request in flight on another thread is never cut short by a lookup."""
        self.lookup.ensure(known=lambda: self._main is not None and self._coordinator_known,
                           install=self._install_coordinator)
        return self._main

    def _install_coordinator(self, found: Coordinator) -> None:
        with self._lock:
            moved = self.coordinator is None or (self.coordinator[1], self.coordinator[2]) != found.address
            if moved or self._main is None:
                old = (self._main, self._join, self._beat)
                self._main, self._join, self._beat = (self._connect(found.host, found.port) for _ in range(3))
                for connection in old:
                    if connection is not None:
                        connection.abort()   # the old coordinator's: what is in flight there is void
            self.coordinator = (found.node_id, found.host, found.port)
            self._coordinator_known = True
            self._timer.reset_session(now_ms())

    def _connect(self, host: str, port: int) -> BrokerConnection:
        return BrokerConnection(host, port, client_id=self.settings.client_id,
                                timeout_s=self.settings.request_timeout_ms / 1000)

    # ------------------------------------------------------------ phases 2 and 3: the join worker

    def _join_then_tell(self, started: float) -> None:
        try:
            self._join_until_done(started)
        finally:
            self.news.set()

    def _join_until_done(self, started: float) -> None:
        """Join and sync, retried until they succeed, the membership is lost (the polling thread then
        declares the partitions lost and starts a new round), a fatal error, or close. First the
        protocol's own preparation that must not hold the polling thread (`_prepare_in_background`)."""
        attempts = 0
        try:
            if not self._prepare_in_background():
                return   # the membership was lost meanwhile: the polling thread starts over
            while not self._closing.is_set():
                attempts += 1
                try:
                    generation, leader, assignment = self._join_and_sync()
                except GroupError as error:
                    self.metrics.rebalance_failed()
                    if error.error in FATAL_ERRORS:
                        self.recorder.emit(ev.REBALANCE_FAILED, self.member_name,
                                           error=errors.name_of(error.error), attempts=attempts)
                        raise
                    if error.error in MEMBERSHIP_ERRORS:
                        return
                    if error.error not in REJOIN_AT_ONCE:
                        self._closing.wait(self.settings.retry_backoff_ms / 1000)
                    continue
                except ConnectionFailed:
                    self.metrics.rebalance_failed()
                    self._coordinator_unknown()
                    self._closing.wait(self.settings.retry_backoff_ms / 1000)
                    continue
                with self._lock:
                    self._joined = JoinOutcome(generation=generation, leader=leader, assignment=assignment,
                                               started=started, attempts=attempts)
                return
        except BaseException as error:  # never vanish: the next poll() raises it
            with self._lock:
                self._fatal = error

    def _join_and_sync(self) -> tuple[Generation, str, bytes]:
        self.ensure_coordinator()
        connection = self._join
        join_started = time.monotonic()
        # As Java's: JoinGroup waits out the rebalance timeout plus 5 s (never less than request.timeout.ms);
        # SyncGroup gets the plain request.timeout.ms.
        join_timeout_s = max(self.settings.request_timeout_ms,
                             self.settings.effective_rebalance_timeout_ms + JOIN_TIMEOUT_LAPSE_MS) / 1000
        with self._lock:
            self._set(self._membership.join_sent())
        while True:
            with self._lock:  # built for each request, as Kafka's metadata(): the generation and owned partitions now
                metadata = self._join_metadata()
            response = self._send(connection, "JoinGroup", JoinGroupRequest[JOIN_VERSION](
                group_id=self.settings.group,
                session_timeout_ms=self.settings.session_timeout_ms,
                rebalance_timeout_ms=self.settings.effective_rebalance_timeout_ms,
                member_id=self.member_id,
                group_instance_id=self.settings.group_instance_id,
                protocol_type=self.protocol_type,
                protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name=self._protocol_name(), metadata=metadata)],
            ), timeout_s=join_timeout_s)
            error = errors.for_code(response.error_code)
            if error is not errors.MEMBER_ID_REQUIRED:
                break
            with self._lock:  # the coordinator's id for us: rejoin with it at once
                self._set(self._membership.member_id_given(response.member_id))
        self._check_group_error("JoinGroup", error)
        self.metrics.join_completed((time.monotonic() - join_started) * 1000)
        generation = Generation(response.generation_id, response.member_id, response.protocol_name)
        with self._lock:  # heartbeats start here: a leader busy assigning keeps its session
            if self._membership.state is not MembershipState.PREPARING_REBALANCE:
                # Lost while the JoinGroup was out (an earlier heartbeat or commit was fenced): the
                # answer is void; the polling thread declares the partitions lost and joins afresh.
                raise GroupError(errors.UNKNOWN_MEMBER_ID, "JoinGroup answered after the membership was lost")
            self._set(self._membership.joined(generation))
            self._timer.reset(now_ms())
        plan: dict[str, bytes] = {}
        if response.leader == response.member_id:
            plan = self._perform_assignment(connection, response.protocol_name, response.members)
        sync_started = time.monotonic()
        sync = self._send(connection, "SyncGroup", SyncGroupRequest[SYNC_VERSION](
            group_id=self.settings.group,
            generation_id=generation.generation_id,
            member_id=generation.member_id,
            group_instance_id=self.settings.group_instance_id,
            assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                         for m, a in plan.items()],
        ), timeout_s=self.settings.request_timeout_ms / 1000)
        sync_error = errors.for_code(sync.error_code)
        if sync_error is errors.REBALANCE_IN_PROGRESS:
            with self._lock:
                if self._membership.generation == generation:
                    self._set(self._membership.sync_interrupted())
        self._check_group_error("SyncGroup", sync_error)
        self.metrics.sync_completed((time.monotonic() - sync_started) * 1000)
        with self._lock:
            if self._membership.generation != generation:  # lost meanwhile (heartbeat thread)
                raise GroupError(errors.ILLEGAL_GENERATION, "SyncGroup answered for a lost generation")
            self._set(self._membership.synced())
        return generation, response.leader, bytes(sync.assignment)

    def _check_group_error(self, api: str, error: ErrorClass) -> None:
        if error is errors.NONE:
            return
        if error in MEMBERSHIP_ERRORS:
            self._membership_lost(f"{api}: {errors.name_of(error)}",
                                  keep_member_id=error is errors.ILLEGAL_GENERATION)
        elif error in errors.COORDINATOR_MOVED:
            self._coordinator_unknown()   # COORDINATOR_LOAD_IN_PROGRESS: tried again at the same broker
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
                    # Decided in one hold of the lock, so that a JoinGroup sent meanwhile stops this heartbeat.
                    action, send = self._heartbeat_action(now_ms())
                if action == "rediscover":
                    # As Java's heartbeat thread does: find the (new) coordinator and carry on.
                    try:
                        self.ensure_coordinator()
                    except ConnectionFailed:
                        pass
                elif action == "leave":
                    self._leave_for_poll_timeout()
                elif action == "send":
                    self._send_heartbeat(*send)
        except BaseException as error:  # never let the thread die silently: poll() re-raises it
            with self._lock:
                self._fatal = error

    def _heartbeat_action(self, now: int) -> tuple[str | None, tuple]:
        """What the heartbeat thread does now (called under the lock): nothing, "rediscover", "leave", or
        "send" with the connection, generation and timeout of the heartbeat, which then counts as sent.
        Nothing while the member has not joined (UNJOINED, or its JoinGroup out): Kafka's heartbeat thread
        disables itself while `state.hasNotJoinedGroup()`."""
        if not self._membership.sends_heartbeats:
            return None, ()
        if not self._coordinator_known:
            return "rediscover", ()
        if self._timer.session_expired(now):
            self._coordinator_known = False  # no answer for a whole session: look it up again
            return None, ()
        if self._timer.poll_timeout_expired(now):
            return "leave", ()
        if self._timer.time_to_next_heartbeat(now) > 0:
            return None, ()
        # Give up on a stalled coordinator when the session runs out, not at the request timeout.
        timeout_s = max(self._timer.session_remaining_ms(now), 1) / 1000
        self._timer.sent(now)
        return "send", (self._beat, self.generation, timeout_s)

    def _send_heartbeat(self, connection: BrokerConnection, generation: Generation, timeout_s: float) -> None:
        try:
            response = self._send(connection, "Heartbeat", HeartbeatRequest[HEARTBEAT_VERSION](
                group_id=self.settings.group, generation_id=generation.generation_id,
                member_id=generation.member_id, group_instance_id=self.settings.group_instance_id),
                timeout_s=timeout_s)
        except ConnectionFailed:
            with self._lock:
                self._timer.failed(now_ms(), self._draw())
                self._coordinator_known = False  # rediscover; membership itself may be intact
            return
        error = errors.for_code(response.error_code)
        with self._lock:
            if self.generation != generation:
                return  # answered for a generation we already left (Kafka's generationUnchanged())
            if error is errors.NONE:
                self._timer.received(now_ms())
            elif error is errors.REBALANCE_IN_PROGRESS:
                self._timer.received(now_ms())
                if self._membership.state is MembershipState.STABLE:  # while completing a rebalance: nothing to do
                    self.request_rejoin("heartbeat: REBALANCE_IN_PROGRESS")
            elif error in MEMBERSHIP_ERRORS:
                if self._membership.state is MembershipState.PREPARING_REBALANCE:
                    # Sent before the JoinGroup now out and answered after it (the heartbeat has a connection of
                    # its own): the JoinGroup's answer tells whether the membership is gone. Kafka's one
                    # connection hands this answer over first, when it still speaks of the generation it was
                    # sent in; here the group may have moved on on our own JoinGroup.
                    return
                self._membership_lost(f"heartbeat: {errors.name_of(error)}",
                                      keep_member_id=error is errors.ILLEGAL_GENERATION)
                if error is errors.FENCED_INSTANCE_ID:
                    self._fatal = GroupError(error, "Heartbeat")
            elif error in errors.COORDINATOR_MOVED:
                self._timer.failed(now_ms(), self._draw())
                self._coordinator_known = False
            else:
                self._timer.failed(now_ms(), self._draw())

    # ------------------------------------------------------------ phase 5: leaving

    def _leave_for_poll_timeout(self) -> None:
        """max.poll.interval.ms passed without a poll: leave so the group can move on without us."""
        self._leave_group("max.poll.interval.ms exceeded")
        # A static member keeps its id (it does not send LeaveGroup); a dynamic one starts afresh.
        self._membership_lost("max.poll.interval.ms exceeded", keep_member_id=self.settings.group_instance_id is not None)

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

    def _send(self, connection: BrokerConnection, op: str, request: Any, *, timeout_s: float | None = None,
              **fields: object) -> Any:
        return self.requests.send(connection, op, request, timeout_s=timeout_s, **fields)

    # ------------------------------------------------------------ hooks for the protocol type

    def _protocol_name(self) -> str:
        raise NotImplementedError

    def _join_metadata(self) -> bytes:
        """This member's protocol metadata for the next JoinGroup (called under the lock)."""
        raise NotImplementedError

    def _perform_assignment(self, connection: BrokerConnection, protocol: str, members: Any) -> dict[str, bytes]:
        """The leader's job: every member's assignment bytes, from their metadata."""
        raise NotImplementedError

    def _on_join_prepare(self) -> None:
        """Before a JoinGroup round, on the polling thread."""

    def _prepare_in_background(self) -> bool:
        """Before a JoinGroup round, on the join worker (the polling thread goes on meanwhile); False when
        the membership was lost in it."""
        return True

    def _on_join_complete(self, outcome: JoinOutcome) -> None:
        """A finished join and sync, applied on the polling thread."""

    def _release_if_lost(self) -> None:
        """Before a fatal error surfaces: declare what was owned lost."""

