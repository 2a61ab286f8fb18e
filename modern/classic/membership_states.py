"""The classic client's membership, as pure values: its states with their allowed moves, and
heartbeat timing. No I/O and no clock reading; `modern.classic.abstract_coordinator` drives both.

    UNJOINED ──join sent──> PREPARING_REBALANCE ──JoinGroup answered──> COMPLETING_REBALANCE ──SyncGroup answered──> STABLE
                                ^       ^                                            │                                 │
                                │       └─ join sent again (SyncGroup answered ──────┘                                 │
                                │          REBALANCE_IN_PROGRESS, or failed)                                           │
                                └───────────────────────────── rejoin: join sent ──────────────────────────────────────┘
    from any state: membership lost ──> UNJOINED

Heartbeats are sent in COMPLETING_REBALANCE and STABLE, from the JoinGroup answer on, as
Kafka's client does: a leader busy computing a large assignment keeps its session, and so does a member whose
SyncGroup was answered REBALANCE_IN_PROGRESS until its application sends the next JoinGroup.
Commits are sent only in STABLE.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from modern.classic.settings import ClientSettings
from modern.client.coordinator_lookup import ExponentialBackoff
from modern.common import errors
from rebalance.types import NO_GENERATION, Generation


class MembershipState(Enum):
    UNJOINED = "unjoined"                            # no generation: not (or no longer) a member
    PREPARING_REBALANCE = "preparing_rebalance"      # JoinGroup sent, the join phase not over yet
    COMPLETING_REBALANCE = "completing_rebalance"    # JoinGroup answered, SyncGroup not yet
    STABLE = "stable"                                # SyncGroup answered: the assignment is ours


M = MembershipState
# Every allowed move, in one place. Anything else is a bug and raises.
TRANSITIONS: dict[MembershipState, frozenset[MembershipState]] = {
    M.UNJOINED: frozenset({M.PREPARING_REBALANCE, M.UNJOINED}),
    M.PREPARING_REBALANCE: frozenset({M.PREPARING_REBALANCE, M.COMPLETING_REBALANCE, M.UNJOINED}),  # retried join
    M.COMPLETING_REBALANCE: frozenset({M.STABLE, M.PREPARING_REBALANCE, M.UNJOINED}),
    M.STABLE: frozenset({M.PREPARING_REBALANCE, M.UNJOINED}),
}

# Errors that end the member: configuration problems no retry can fix (FENCED_INSTANCE_ID:
# another process took this static member's place; its partitions are declared lost first).
FATAL_ERRORS = frozenset({errors.INCONSISTENT_GROUP_PROTOCOL, errors.INVALID_SESSION_TIMEOUT,
                          errors.GROUP_MAX_SIZE_REACHED, errors.FENCED_INSTANCE_ID, errors.INVALID_GROUP_ID})
# Errors that mean "your membership is gone": the partitions are lost, not revoked.
MEMBERSHIP_ERRORS = frozenset({errors.UNKNOWN_MEMBER_ID, errors.ILLEGAL_GENERATION, errors.FENCED_INSTANCE_ID})
# A join attempt that ends with these is tried again at once, without backoff.
REJOIN_AT_ONCE = frozenset({errors.REBALANCE_IN_PROGRESS, errors.MEMBER_ID_REQUIRED})


class IllegalMembershipTransition(RuntimeError):
    pass


@dataclass(frozen=True, kw_only=True)
class Membership:
    """Where this member stands in its group. Replaced on every change, never edited."""

    state: MembershipState = M.UNJOINED
    generation: Generation = NO_GENERATION   # generation id, member id, protocol

    @property
    def member_id(self) -> str:
        return self.generation.member_id

    @property
    def rebalancing(self) -> bool:
        return self.state in (M.PREPARING_REBALANCE, M.COMPLETING_REBALANCE)

    @property
    def sends_heartbeats(self) -> bool:
        return self.state in (M.COMPLETING_REBALANCE, M.STABLE)

    def generation_if_stable(self) -> Generation | None:
        """The generation a commit may carry; None while not stable (Kafka sends no commit then)."""
        return self.generation if self.state is M.STABLE else None

    # ---------------------------------------------------------------- the moves

    def join_sent(self) -> Membership:
        return self._move(M.PREPARING_REBALANCE)

    def member_id_given(self, member_id: str) -> Membership:
        """MEMBER_ID_REQUIRED: the coordinator named us; the state does not change."""
        return replace(self, generation=Generation(NO_GENERATION.generation_id, member_id, None))

    def joined(self, generation: Generation) -> Membership:
        return self._move(M.COMPLETING_REBALANCE, generation)

    def synced(self) -> Membership:
        return self._move(M.STABLE)

    def lost(self, *, keep_member_id: bool) -> Membership:
        """Fenced, removed, or left: no generation any more. ILLEGAL_GENERATION keeps the member id
        (it is still known to the coordinator); UNKNOWN_MEMBER_ID and leaving drop it."""
        member_id = self.generation.member_id if keep_member_id else ""
        return self._move(M.UNJOINED, Generation(NO_GENERATION.generation_id, member_id, None))

    def _move(self, to: MembershipState, generation: Generation | None = None) -> Membership:
        if to not in TRANSITIONS[self.state]:
            raise IllegalMembershipTransition(f"{self.state.value} -> {to.value}")
        return Membership(state=to, generation=self.generation if generation is None else generation)


class HeartbeatTimer:
    """When the next heartbeat is due and whether the session or the poll interval ran out.

    Every method takes `now` (ms), like kafka-python's Heartbeat; a failure also takes the random draw
    for its backoff's jitter. As Kafka's `Heartbeat`: a sent heartbeat makes the next one due a heartbeat
    interval later; a failed one makes it due after `retry.backoff.ms` doubling with every failure up to
    `retry.backoff.max.ms`, within +-20 % (`failHeartbeat`); an answer resets that count (`receiveHeartbeat`).
    """

    def __init__(self, settings: ClientSettings, now: int) -> None:
        self.settings = settings
        self.backoff = ExponentialBackoff(settings.retry_backoff_ms, settings.retry_backoff_max_ms)
        self.last_receive = self.last_poll = self.last_reset = now
        self.next_heartbeat = now + settings.heartbeat_interval_ms
        self.failed_attempts = 0

    def sent(self, now: int) -> None:
        self.next_heartbeat = now + self.settings.heartbeat_interval_ms

    def received(self, now: int) -> None:
        self.last_receive = now
        self.failed_attempts = 0

    def failed(self, now: int, draw: float) -> None:
        """`draw` is a uniform number in [0, 1) (the caller's random source)."""
        self.next_heartbeat = now + int(self.backoff.backoff_ms(self.failed_attempts, draw))  # Java truncates
        self.failed_attempts += 1

    def polled(self, now: int) -> None:
        self.last_poll = now

    def reset(self, now: int) -> None:
        """A JoinGroup answered: session and heartbeat timers start again (Kafka's resetTimeouts, which leaves
        the failure count alone)."""
        self.last_reset = self.last_receive = now
        self.next_heartbeat = now + self.settings.heartbeat_interval_ms

    def reset_session(self, now: int) -> None:
        """A coordinator found (again): the session counts from now, as Kafka's resetSessionTimeout; the
        heartbeat timer is left alone, so a heartbeat that failed goes again when its backoff ends."""
        self.last_reset = now

    def time_to_next_heartbeat(self, now: int) -> int:
        return max(0, self.next_heartbeat - now)

    def session_remaining_ms(self, now: int) -> int:
        return self.settings.session_timeout_ms - (now - max(self.last_receive, self.last_reset))

    def session_expired(self, now: int) -> bool:
        return self.session_remaining_ms(now) < 0

    def poll_timeout_expired(self, now: int) -> bool:
        return now - self.last_poll > self.settings.max_poll_interval_ms
