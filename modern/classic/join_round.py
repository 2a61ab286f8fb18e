"""One rebalance of the classic client, from its start to the assignment applied (each attempt its own object,
as aiokafka's), and the steps it goes through, written down with their allowed moves:

    PREPARING ──pre-join commit done──> TO_JOIN ──the application sends JoinGroup──> JOINING ──answered──> JOIN_ANSWERED
                                          ^ ^                                                                │
                                          │ └── MEMBER_ID_REQUIRED, REBALANCE_IN_PROGRESS, retriable (backoff) ──┤
                                          │                                          the application reads it:│
                                          │                                          the leader assigns       v
                                          └────── SyncGroup: REBALANCE_IN_PROGRESS, retriable ────────── SYNCING
                                                                                                             │ answered
                                                                                                          SYNCED
    from any step: membership lost, fatal error, close ──> ENDED

As in Kafka 3.7, the JoinGroup is sent and its answer read (the leader's assignment included, and the SyncGroup
sent) only on the application's thread, when it calls into the client (`poll`, `commitSync`); Kafka's heartbeat
thread, disabled until the member has joined, never reads a JoinGroup answer. A request's own thread stands
for the network: it waits for the answer and stores it. It also reads the SyncGroup's answer, as Kafka's
heartbeat thread, enabled from the JoinGroup answer on, may. A SYNCED round is applied (the partition changes
and the listener) at the application's next poll. PREPARING is the cooperative pre-join auto-commit, on the
round's thread so that records keep flowing; the JoinGroup then waits for the application's next call (with
nothing to auto-commit there is no PREPARING: the JoinGroup goes out in the call that started the round).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from rebalance.types import Generation


class RoundStep(Enum):
    PREPARING = "preparing"              # the pre-join commit is out (cooperative)
    TO_JOIN = "to_join"                  # a JoinGroup is due at `not_before`: the application's next call sends it
    JOINING = "joining"                  # JoinGroup out
    JOIN_ANSWERED = "join_answered"      # its answer waits for the application's next call
    SYNCING = "syncing"                  # SyncGroup out
    SYNCED = "synced"                    # the assignment waits for the application's next poll
    ENDED = "ended"                      # given up: lost, fatal or closing; the polling thread starts over


R = RoundStep
# Every allowed move, in one place. Anything else is a bug and raises.
TRANSITIONS: dict[RoundStep, frozenset[RoundStep]] = {
    R.PREPARING: frozenset({R.TO_JOIN, R.ENDED}),
    R.TO_JOIN: frozenset({R.JOINING, R.ENDED}),
    R.JOINING: frozenset({R.JOIN_ANSWERED, R.ENDED}),
    R.JOIN_ANSWERED: frozenset({R.TO_JOIN, R.SYNCING, R.ENDED}),
    R.SYNCING: frozenset({R.TO_JOIN, R.SYNCED, R.ENDED}),
    R.SYNCED: frozenset({R.ENDED}),
    R.ENDED: frozenset(),
}


class IllegalRoundTransition(RuntimeError):
    pass


@dataclass(frozen=True, kw_only=True)
class JoinOutcome:
    """A finished join and sync, waiting for the polling thread to apply it."""

    generation: Generation
    leader: str
    assignment: bytes
    started: float     # monotonic seconds: when the rebalance began
    attempts: int


class JoinRound:
    """One rebalance under way. Its owner moves it under its own lock; the fields below the step are what
    the step needs: the answer not read yet, when a JoinGroup that failed may go again, the outcome."""

    def __init__(self, started: float) -> None:
        self.started = started               # monotonic seconds
        self.step = R.PREPARING
        self.attempts = 0                    # JoinGroups sent
        self.not_before = 0.0                # monotonic: a retried JoinGroup waits out its backoff
        self.answer: Any = None              # the JoinGroup's response, or the exception that ended it
        self.generation: Generation | None = None
        self.leader = ""
        self.outcome: JoinOutcome | None = None
        self.thread: threading.Thread | None = None

    def move(self, to: RoundStep) -> None:
        if to not in TRANSITIONS[self.step]:
            raise IllegalRoundTransition(f"{self.step.value} -> {to.value}")
        self.step = to

    def join_again(self, not_before: float) -> None:
        self.move(R.TO_JOIN)
        self.not_before = not_before

    def run(self, target: Callable[..., None], *args: Any, name: str) -> None:
        """A blocking step (a commit, a request) on a thread of its own."""
        self.thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self.thread.start()

    @property
    def over(self) -> bool:
        return self.step in (R.SYNCED, R.ENDED)
