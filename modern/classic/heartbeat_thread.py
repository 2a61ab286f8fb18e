"""The heartbeat thread's half of the classic client's group membership (Kafka's
`AbstractCoordinator.HeartbeatThread`): heartbeats every heartbeat.interval.ms from the JoinGroup answer on,
a failed one retried after its backoff, the coordinator looked up again when it stops answering, LeaveGroup
when the application has not polled within max.poll.interval.ms. It never touches a join: it is disabled while
the member has not joined, as Kafka's.

`GroupMembership` (`modern.classic.abstract_coordinator`) is the other half and owns the fields named below.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kafka.protocol.consumer import HeartbeatRequest

from modern.classic.membership_states import MEMBERSHIP_ERRORS, HeartbeatTimer, Membership, MembershipState
from modern.classic.settings import ClientSettings
from modern.client.connection import BrokerConnection, ConnectionFailed
from modern.common import errors
from modern.common.errors import GroupError
from rebalance.types import Generation

HEARTBEAT_VERSION = 3


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class HeartbeatThread:
    """The heartbeat thread's methods; the fields and methods below are `GroupMembership`'s."""

    settings: ClientSettings
    generation: Generation
    _membership: Membership
    _timer: HeartbeatTimer
    _draw: Callable[[], float]
    _coordinator_known: bool
    _beat: BrokerConnection | None
    _fatal: BaseException | None
    _lock: threading.RLock
    _wake: threading.Condition
    _closing: threading.Event
    ensure_coordinator: Callable[[], BrokerConnection]
    request_rejoin: Callable[[str], None]
    _membership_lost: Callable[..., None]
    _leave_for_poll_timeout: Callable[[], None]
    _send: Callable[..., Any]

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
