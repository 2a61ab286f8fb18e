"""JoinGroup and SyncGroup, the steps of a `modern.classic.join_round.JoinRound`: the join's half of the
classic client's group membership (Kafka's `AbstractCoordinator.joinGroupIfNeeded` with its JoinGroup and
SyncGroup response handlers).

`progress_join` runs on the application's thread only, from its calls into the client: it sends a JoinGroup
that is due and reads a JoinGroup's answer, the leader computing the assignment there, then hands the SyncGroup
to the round's thread. A request blocks on the round's thread, which stores the JoinGroup's answer for the
application and reads the SyncGroup's itself. Errors: MEMBER_ID_REQUIRED and REBALANCE_IN_PROGRESS send the
JoinGroup again at once, a membership error or a fatal one ends the round, anything else sends it again after
retry.backoff.ms (Kafka's `joinGroupIfNeeded`).

`GroupMembership` (`modern.classic.abstract_coordinator`) is the other half and owns the fields named below.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kafka.protocol.consumer import JoinGroupRequest, SyncGroupRequest

from modern.classic.heartbeat_thread import now_ms
from modern.classic.join_round import JoinOutcome, JoinRound, RoundStep
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
from modern.common import errors
from modern.common.errors import ErrorClass, GroupError
from rebalance import events as ev
from rebalance.events import EventRecorder
from rebalance.metrics import RebalanceMetrics
from rebalance.types import Generation

# Versions this client speaks (the coordinator serves these and more).
JOIN_VERSION = 5            # v4: MEMBER_ID_REQUIRED, v5: group.instance.id
SYNC_VERSION = 3
JOIN_TIMEOUT_LAPSE_MS = 5_000   # Kafka's JOIN_GROUP_TIMEOUT_LAPSE


class JoinSteps:
    """The join's methods; the fields and methods below are `GroupMembership`'s."""

    protocol_type: str
    settings: ClientSettings
    recorder: EventRecorder
    member_name: str
    metrics: RebalanceMetrics
    member_id: str
    tell_poll: Callable[[], None]
    _membership: Membership
    _round: JoinRound | None
    _progressing: bool
    _fatal: BaseException | None
    _timer: HeartbeatTimer
    _join: BrokerConnection | None
    _lock: threading.RLock
    _closing: threading.Event
    _set: Callable[[Membership], None]
    _membership_lost: Callable[..., None]
    _coordinator_unknown: Callable[[], None]
    ensure_coordinator: Callable[[], BrokerConnection]
    _send: Callable[..., Any]
    _protocol_name: Callable[[], str]
    _join_metadata: Callable[[], bytes]
    _perform_assignment: Callable[[BrokerConnection, str, Any], dict[str, bytes]]

    def progress_join(self) -> None:
        """Move the rebalance under way on as far as the application's thread can without waiting: send a
        JoinGroup that is due, read a JoinGroup answer (the leader computes the assignment here) and send the
        SyncGroup. Called from the application's calls into the client only (poll, commit), as Kafka handles
        these inside them; everything that waits for an answer runs on the round's thread."""
        with self._lock:
            if self._progressing:
                return   # a listener committing from inside a step
            self._progressing = True
        try:
            while not self._closing.is_set():
                with self._lock:
                    round_ = self._round
                    if round_ is None:
                        return
                    if round_.step is RoundStep.TO_JOIN and time.monotonic() >= round_.not_before:
                        round_.move(RoundStep.JOINING)
                        round_.attempts += 1
                        round_.run(self._join_group, round_, name=f"join-{self.member_name}")
                        return
                    if round_.step is not RoundStep.JOIN_ANSWERED:
                        return   # a commit, a JoinGroup or a SyncGroup is out, a backoff runs, or it is over
                    answer, round_.answer = round_.answer, None
                self._read_join_answer(round_, answer)
        finally:
            with self._lock:
                self._progressing = False

    def _join_group(self, round_: JoinRound) -> None:
        """The round's thread: find the coordinator, send the JoinGroup and keep its answer (or the broken
        connection) for the application's next call."""
        try:
            answer: Any = self._send_join_group()
        except ConnectionFailed as failure:
            answer = failure
        except BaseException as error:  # never vanish: the next poll raises it
            self._round_broke(round_, error)
            return
        with self._lock:
            round_.answer = answer
            round_.move(RoundStep.JOIN_ANSWERED)
        self.tell_poll()

    def _send_join_group(self) -> Any:
        self.ensure_coordinator()
        # As Java's: JoinGroup waits out the rebalance timeout plus 5 s (never less than request.timeout.ms).
        timeout_s = max(self.settings.request_timeout_ms,
                        self.settings.effective_rebalance_timeout_ms + JOIN_TIMEOUT_LAPSE_MS) / 1000
        with self._lock:  # built for each request, as Kafka's metadata(): the generation and owned partitions now
            self._set(self._membership.join_sent())
            metadata = self._join_metadata()
            connection = self._join
        sent = time.monotonic()
        answer = self._send(connection, "JoinGroup", JoinGroupRequest[JOIN_VERSION](
            group_id=self.settings.group,
            session_timeout_ms=self.settings.session_timeout_ms,
            rebalance_timeout_ms=self.settings.effective_rebalance_timeout_ms,
            member_id=self.member_id,
            group_instance_id=self.settings.group_instance_id,
            protocol_type=self.protocol_type,
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name=self._protocol_name(), metadata=metadata)],
        ), timeout_s=timeout_s)
        if errors.for_code(answer.error_code) is errors.NONE:
            self.metrics.join_completed((time.monotonic() - sent) * 1000)
        return answer

    def _round_broke(self, round_: JoinRound, error: BaseException) -> None:
        with self._lock:
            self._fatal = error
            if not round_.over:
                round_.move(RoundStep.ENDED)
        self.tell_poll()

    def _read_join_answer(self, round_: JoinRound, answer: Any) -> None:
        """On the application's thread: a JoinGroup's answer, as Kafka's JoinGroupResponseHandler reads it."""
        if isinstance(answer, ConnectionFailed):
            self._join_failed(round_, None)
            return
        error = errors.for_code(answer.error_code)
        if error is errors.MEMBER_ID_REQUIRED:
            with self._lock:  # the coordinator's id for us: rejoin with it at once
                self._set(self._membership.member_id_given(answer.member_id))
                round_.join_again(not_before=0.0)
            return
        if error is not errors.NONE:
            self._join_failed(round_, GroupError(error, "JoinGroup"))
            return
        generation = Generation(answer.generation_id, answer.member_id, answer.protocol_name)
        with self._lock:  # heartbeats start here: a leader busy assigning keeps its session
            if self._membership.state is not MembershipState.PREPARING_REBALANCE:
                # Lost while the JoinGroup was out (an earlier heartbeat or commit was fenced): the answer is
                # void; the polling thread declares the partitions lost and joins afresh.
                self.metrics.rebalance_failed()
                round_.move(RoundStep.ENDED)
                return
            self._set(self._membership.joined(generation))
            self._timer.reset(now_ms())
            round_.generation, round_.leader = generation, answer.leader
        plan: dict[str, bytes] = {}
        try:
            if answer.leader == answer.member_id:
                plan = self._perform_assignment(self._join, answer.protocol_name, answer.members)
        except (GroupError, ConnectionFailed) as failure:
            self._join_failed(round_, failure if isinstance(failure, GroupError) else None)
            return
        with self._lock:
            round_.move(RoundStep.SYNCING)
            round_.run(self._sync_group, round_, generation, plan, name=f"sync-{self.member_name}")

    def _sync_group(self, round_: JoinRound, generation: Generation, plan: dict[str, bytes]) -> None:
        """The round's thread: the SyncGroup and its answer (read here, as Kafka's heartbeat thread may)."""
        try:
            self._sync_and_read(round_, generation, plan)
        except BaseException as error:  # never vanish: the next poll raises it
            self._round_broke(round_, error)
        finally:
            self.tell_poll()

    def _sync_and_read(self, round_: JoinRound, generation: Generation, plan: dict[str, bytes]) -> None:
        sent = time.monotonic()
        try:
            sync = self._send(self._join, "SyncGroup", SyncGroupRequest[SYNC_VERSION](
                group_id=self.settings.group,
                generation_id=generation.generation_id,
                member_id=generation.member_id,
                group_instance_id=self.settings.group_instance_id,
                assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                             for m, a in plan.items()],
            ), timeout_s=self.settings.request_timeout_ms / 1000)   # the plain request timeout, as Java's
        except ConnectionFailed:
            self._join_failed(round_, None)
            return
        error = errors.for_code(sync.error_code)
        if error is not errors.NONE:
            self._join_failed(round_, GroupError(error, "SyncGroup"))
            return
        self.metrics.sync_completed((time.monotonic() - sent) * 1000)
        with self._lock:
            if self._membership.generation != generation:  # lost meanwhile (heartbeat thread)
                self.metrics.rebalance_failed()
                round_.move(RoundStep.ENDED)
                return
            self._set(self._membership.synced())
            # Kafka's SyncGroupResponseHandler ends a successful sync with rejoinNeeded = false: a rejoin asked for
            # while this one was under way (a heartbeat answered REBALANCE_IN_PROGRESS before the JoinGroup went
            # out) was asking for this rebalance, not for another.
            self._rejoin_reason = None
            round_.outcome = JoinOutcome(generation=generation, leader=round_.leader, assignment=bytes(sync.assignment),
                                         started=round_.started, attempts=round_.attempts)
            round_.move(RoundStep.SYNCED)

    def _join_failed(self, round_: JoinRound, failure: GroupError | None) -> None:
        """A JoinGroup or SyncGroup that did not succeed (`failure` None: the connection broke): the round ends
        (membership lost, fatal) or sends a JoinGroup again, at once or after retry.backoff.ms."""
        self.metrics.rebalance_failed()
        if failure is None:
            self._coordinator_unknown()
            error = errors.COORDINATOR_NOT_AVAILABLE
        else:
            error = failure.error
            try:
                self._check_group_error(failure.api, error)
            except GroupError:
                pass   # its effects (membership lost, coordinator unknown) are what is wanted here
        with self._lock:
            if error in FATAL_ERRORS:
                self.recorder.emit(ev.REBALANCE_FAILED, self.member_name, error=errors.name_of(error),
                                   attempts=round_.attempts)
                self._fatal = failure
                round_.move(RoundStep.ENDED)
            elif error in MEMBERSHIP_ERRORS or self._closing.is_set():
                round_.move(RoundStep.ENDED)   # the polling thread declares the partitions lost and starts over
            else:
                backoff_s = 0.0 if error in REJOIN_AT_ONCE else self.settings.retry_backoff_ms / 1000
                round_.join_again(not_before=time.monotonic() + backoff_s)
        self.tell_poll()

    def _check_group_error(self, api: str, error: ErrorClass) -> None:
        if error is errors.NONE:
            return
        if error in MEMBERSHIP_ERRORS:
            self._membership_lost(f"{api}: {errors.name_of(error)}",
                                  keep_member_id=error is errors.ILLEGAL_GENERATION)
        elif error in errors.COORDINATOR_MOVED:
            self._coordinator_unknown()   # COORDINATOR_LOAD_IN_PROGRESS: tried again at the same broker
        raise GroupError(error, api)
