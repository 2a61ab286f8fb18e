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

Threads: as in Kafka 3.7, a rebalance moves on only on the application's thread, inside its calls into the
client (`poll_group`, `progress_join` from a commit): it prepares (every partition callback runs there), sends
the JoinGroup, reads its answer (the leader assigns there), sends the SyncGroup and applies the result; a busy
application holds its own join, and a busy leader the group's SyncGroup. Each rebalance is one
`modern.classic.join_round.JoinRound`; its requests block on threads of their own, which only store the answers
(and read the SyncGroup's, as Kafka's heartbeat thread may), so polling never blocks on the group. The heartbeat
thread. Each has its own connection, so none waits behind another's parked request. Errors on the background
threads never vanish: the next poll raises them.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

from kafka.protocol.consumer import LeaveGroupRequest

from modern.classic.heartbeat_thread import HeartbeatThread, now_ms
from modern.classic.join_round import JoinOutcome, JoinRound, RoundStep
from modern.classic.join_steps import JoinSteps
from modern.classic.membership_states import (
    HeartbeatTimer,
    Membership,
)
from modern.classic.settings import ClientSettings
from modern.client.connection import BrokerConnection, ConnectionFailed
from modern.client.coordinator_lookup import Coordinator, CoordinatorLookup, ExponentialBackoff
from modern.client.traced_requests import TracedRequests
from rebalance import events as ev
from rebalance.events import EventRecorder
from rebalance.metrics import RebalanceMetrics
from rebalance.types import Generation

LEAVE_VERSION = 3


__all__ = ["GroupMembership", "JoinOutcome", "now_ms"]


class GroupMembership(JoinSteps, HeartbeatThread):
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
        self._round: JoinRound | None = None          # the rebalance under way, or finished and not applied yet
        self._progressing = False                      # inside progress_join (a listener may commit from it)
        self._closing = threading.Event()
        # Set when the polling thread has something to act on (a membership change, a rebalance asked for,
        # an answer to read, a join finished): a poll waits on it instead of spinning; `wake_poll` also ends a
        # poll's fetch, as any answer ends Kafka's network poll (`tell_poll` does both).
        self.news = threading.Event()
        self.wake_poll: Callable[[], None] = lambda: None
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
            return self._round is not None or self._rejoin_reason is not None

    @property
    def joining(self) -> bool:
        """A rebalance is under way: the application's calls into the client move it on."""
        return self._round is not None

    def _set(self, membership: Membership) -> None:
        with self._lock:
            self._membership = membership
            self._wake.notify_all()
        self.tell_poll()

    def tell_poll(self) -> None:
        self.news.set()
        self.wake_poll()

    def request_rejoin(self, reason: str) -> None:
        with self._lock:
            self._rejoin_reason = self._rejoin_reason or reason
        self.tell_poll()

    def _membership_lost(self, reason: str, *, keep_member_id: bool = False) -> None:
        """The one place membership ends without a clean rebalance (fenced, removed, left on a poll
        timeout): no generation any more; the next poll declares the partitions lost and rejoins."""
        with self._lock:
            self._set(self._membership.lost(keep_member_id=keep_member_id))
            self._rejoin_reason = reason
            if self._round is not None and self._round.step is RoundStep.TO_JOIN:
                self._round.move(RoundStep.ENDED)   # a JoinGroup still due: the next poll starts over instead

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
        round_ = self._round
        if round_ is not None and round_.thread is not None:
            round_.thread.join(timeout=10)
        if leave and self.member_id:
            self._leave_group("close")
        for connection in (self._main, self._join, self._beat):
            if connection is not None:
                connection.close()

    # ------------------------------------------------------------ the application's thread

    def poll_group(self) -> bool:
        """Called on every consumer poll; never blocks on the group (like Java's poll(timeout) with the
        join's timer at 0).

        It notes the poll (max.poll.interval.ms), moves the rebalance under way on (`progress_join`),
        applies one that finished, and when a rebalance is needed prepares for it here and sends its
        JoinGroup. True when no rebalance is pending (Kafka's `ConsumerCoordinator.poll` returns false before
        its auto-commit while a join is needed or under way).
        """
        with self._lock:
            self._timer.polled(now_ms())
            fatal = self._fatal
        if fatal is not None:
            self._release_if_lost()
            raise fatal
        self.progress_join()
        finished = self._take_finished()
        if finished is not None:
            self._on_join_complete(finished)
        self._maybe_rejoin()
        return not self.rejoin_pending

    def _take_finished(self) -> JoinOutcome | None:
        """The rebalance that ended, if any: its outcome, when the member is still stable in its generation
        (Kafka's joinGroupIfNeeded applies nothing the heartbeat thread has reset meanwhile)."""
        with self._lock:
            round_ = self._round
            if round_ is None or not round_.over:
                return None
            self._round = None
            outcome = round_.outcome
            if outcome is None or self._membership.generation_if_stable() != outcome.generation:
                return None
            return outcome

    def _maybe_rejoin(self) -> None:
        with self._lock:
            reason = self._rejoin_reason
            if self._round is not None or reason is None or self._closing.is_set():
                return
        started = time.monotonic()
        self.recorder.emit(ev.REBALANCE_STARTED, self.member_name, trigger=reason, group=self.settings.group)
        self._on_join_prepare()   # partitions lost, or the pre-join commit and eager revocation
        with self._lock:
            self._rejoin_reason = None  # consumed: a reason after this starts another round
            round_ = self._round = JoinRound(started)
            prepare = self._background_preparation()
            if prepare is None:
                round_.join_again(not_before=0.0)
            else:
                round_.run(self._prepare_then_join, round_, prepare, name=f"prepare-{self.member_name}")
        self.progress_join()

    def _prepare_then_join(self, round_: JoinRound, prepare: Any) -> None:
        try:
            prepared = prepare()
        except BaseException as error:  # never vanish: the next poll raises it
            prepared = False
            with self._lock:
                self._fatal = error
        with self._lock:
            if round_.step is RoundStep.PREPARING:
                round_.move(RoundStep.TO_JOIN if prepared and not self._closing.is_set() else RoundStep.ENDED)
        self.tell_poll()

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

    def _background_preparation(self) -> Callable[[], bool] | None:
        """What must be done before the round's JoinGroup without holding the application's thread (run on the
        round's thread; False when the membership was lost in it), or None."""
        return None

    def _on_join_complete(self, outcome: JoinOutcome) -> None:
        """A finished join and sync, applied on the polling thread."""

    def _release_if_lost(self) -> None:
        """Before a fatal error surfaces: declare what was owned lost."""

