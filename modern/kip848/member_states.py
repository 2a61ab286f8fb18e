"""The KIP-848 client's member states and their allowed moves, as pure values (no I/O, no clock).

Kafka's client names them in `clients/.../consumer/internals/MemberState.java`, each with the states it
may be entered from (`MemberState`'s static block; `AbstractMembershipManager.transitionTo` refuses any
other move). `KAFKA_PREVIOUS_STATES` writes that table down as Kafka has it; the lab's member
(`modern.kip848.membership_manager` drives it) moves through a subset, `PREVIOUS_STATES`:

    UNSUBSCRIBED --start()--> JOINING --answer--> STABLE or RECONCILING (the target differs from what it owns)
    STABLE --an answer with a new target--> RECONCILING --the polling thread acknowledges--> ACKNOWLEDGING
    ACKNOWLEDGING --the acknowledging heartbeat goes out--> STABLE (target reached) or RECONCILING
    JOINING, RECONCILING, ACKNOWLEDGING, STABLE --FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID--> FENCED
    FENCED --the polling thread declared its partitions lost--> JOINING
    JOINING, RECONCILING, ACKNOWLEDGING, STABLE --close()--> PREPARE_LEAVING --partitions given up--> LEAVING
    LEAVING --the leave heartbeat (epoch -1, or -2 for a static member) sent or skipped--> UNSUBSCRIBED
    PREPARE_LEAVING --fenced--> LEAVING --> UNSUBSCRIBED (no leave heartbeat); FENCED --close()--> UNSUBSCRIBED
    any but FENCED and STOPPED --a refusal no retry can cure, or the heartbeat thread failing--> FATAL

The lab leaves out STALE: its member never leaves on an expired max.poll.interval.ms. It adds STOPPED,
which Kafka's client has no need for: the member was abandoned (as a SIGKILL: no commit, no revocation,
no leave heartbeat) and its heartbeat thread has stopped. Every state but FATAL may move there.
A move to the state one is already in is always allowed, as in `transitionTo`.
"""

from __future__ import annotations

from enum import Enum


class ClientMemberState(Enum):
    """A member's state as its client sees it (the coordinator keeps its own per-member state)."""

    UNSUBSCRIBED = "unsubscribed"        # not in the group: no heartbeats
    JOINING = "joining"                  # heartbeats with epoch 0 until an answer gives it an epoch
    RECONCILING = "reconciling"          # has a target it does not own yet: the polling thread works on it
    ACKNOWLEDGING = "acknowledging"      # a reconciliation step done: the next heartbeat goes now and reports it
    STABLE = "stable"                    # owns its whole target: heartbeats on the interval
    FENCED = "fenced"                    # out of the group: its partitions are lost, then it joins again
    PREPARE_LEAVING = "prepare_leaving"  # closing: commits and revokes while still heartbeating
    LEAVING = "leaving"                  # the leave heartbeat is about to go
    FATAL = "fatal"                      # a refusal no retry can cure: nothing is sent any more
    STALE = "stale"                      # Kafka's: left on an expired poll timer (never entered here)
    STOPPED = "stopped"                  # the lab's: abandoned, the heartbeat thread stopped


S = ClientMemberState

# Kafka trunk's MemberState: for each state, the states it may be entered from.
KAFKA_PREVIOUS_STATES: dict[ClientMemberState, frozenset[ClientMemberState]] = {
    S.STABLE: frozenset({S.JOINING, S.ACKNOWLEDGING, S.RECONCILING}),
    S.RECONCILING: frozenset({S.STABLE, S.JOINING, S.ACKNOWLEDGING, S.RECONCILING}),
    S.ACKNOWLEDGING: frozenset({S.RECONCILING}),
    S.FATAL: frozenset({S.JOINING, S.STABLE, S.RECONCILING, S.ACKNOWLEDGING, S.PREPARE_LEAVING, S.LEAVING,
                        S.UNSUBSCRIBED}),
    S.FENCED: frozenset({S.JOINING, S.STABLE, S.RECONCILING, S.ACKNOWLEDGING, S.PREPARE_LEAVING, S.LEAVING}),
    S.JOINING: frozenset({S.FENCED, S.UNSUBSCRIBED, S.STALE}),
    S.PREPARE_LEAVING: frozenset({S.JOINING, S.STABLE, S.RECONCILING, S.ACKNOWLEDGING, S.UNSUBSCRIBED}),
    S.LEAVING: frozenset({S.PREPARE_LEAVING}),
    S.UNSUBSCRIBED: frozenset({S.PREPARE_LEAVING, S.LEAVING, S.FENCED}),
    S.STALE: frozenset({S.LEAVING}),
}

KAFKA_STATES = frozenset(S) - {S.STOPPED}
LAB_STATES = frozenset(S) - {S.STALE}

# The lab's table: Kafka's moves between the states the lab uses, and the lab's STOPPED.
PREVIOUS_STATES: dict[ClientMemberState, frozenset[ClientMemberState]] = {
    state: KAFKA_PREVIOUS_STATES.get(state, frozenset()) & LAB_STATES for state in LAB_STATES}
PREVIOUS_STATES[S.STOPPED] = LAB_STATES - {S.FATAL, S.STOPPED}

# What each state means for the threads.
HEARTBEAT_NOW = frozenset({S.JOINING, S.ACKNOWLEDGING})                      # Kafka's shouldHeartbeatNow, but
HEARTBEAT_ON_INTERVAL = frozenset({S.RECONCILING, S.STABLE, S.PREPARE_LEAVING})  # LEAVING: close() sends it
HEARTBEATING = HEARTBEAT_NOW | HEARTBEAT_ON_INTERVAL
RECONCILES = frozenset({S.RECONCILING, S.ACKNOWLEDGING, S.STABLE})           # has an epoch and stays
IN_GROUP = RECONCILES | {S.PREPARE_LEAVING}                                  # has an epoch: may commit


class IllegalMemberTransition(RuntimeError):
    pass


def check_transition(current: ClientMemberState, to: ClientMemberState) -> None:
    """Raise unless the lab's table allows moving from `current` to `to`."""
    if to is not current and current not in PREVIOUS_STATES.get(to, frozenset()):
        raise IllegalMemberTransition(f"{current.value} -> {to.value}")
