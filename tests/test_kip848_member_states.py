"""The KIP-848 client's member states: the table against Kafka trunk's `MemberState`, the one setter that
refuses an illegal move, and the moves the heartbeat side makes (against stub connections, no broker)."""

from __future__ import annotations

import pytest

from modern.common import errors
from modern.common.consumer_group_messages import ConsumerGroupHeartbeatResponse
from modern.kip848.member import Kip848Member
from modern.kip848.member_states import (
    KAFKA_PREVIOUS_STATES,
    KAFKA_STATES,
    LAB_STATES,
    PREVIOUS_STATES,
    ClientMemberState,
    IllegalMemberTransition,
    check_transition,
)
from modern.kip848.membership_manager import MembershipManager
from rebalance.member import MemberConfig
from rebalance.topic_ids import topic_id
from rebalance.types import TopicPartition
from tests.test_modern_member import Scripted

S = ClientMemberState
TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)
ALLOWED = sorted(((before, after) for after, befores in PREVIOUS_STATES.items() for before in befores),
                 key=lambda move: (move[0].value, move[1].value))


def heartbeats(state: ClientMemberState, owned: frozenset = frozenset()) -> MembershipManager:
    """The heartbeat side of a member put in `state` (epoch 3, coordinator known); no thread started."""
    member = Kip848Member(MemberConfig(group="g", topics=("t",), member_name="m", bootstrap="127.0.0.1:1"))
    member._owned = owned
    beats = member.membership
    beats._state, beats._epoch = state, 3
    beats._coordinator, beats._coordinator_known = ("stub", 1), True
    return beats


def answer(error=errors.NONE, *, epoch: int = 3, assigned: tuple[int, ...] | None = None):
    cls = ConsumerGroupHeartbeatResponse[1]
    assignment = None if assigned is None else cls.Assignment(
        topic_partitions=[cls.Assignment.TopicPartitions(topic_id=topic_id("t"), partitions=list(assigned))])
    return cls(throttle_time_ms=0, error_code=error.errno, error_message=None, member_id="m", member_epoch=epoch,
               heartbeat_interval_ms=5000, assignment=assignment)


# ------------------------------------------------------------ the table


def test_the_lab_table_is_kafkas_between_the_states_it_uses_plus_its_own_stopped():
    assert set(KAFKA_PREVIOUS_STATES) == KAFKA_STATES        # Kafka gives every state its previous states
    assert S.STALE not in LAB_STATES and S.STOPPED in LAB_STATES
    for state in LAB_STATES - {S.STOPPED}:
        assert PREVIOUS_STATES[state] == KAFKA_PREVIOUS_STATES.get(state, frozenset()) & LAB_STATES, state
    assert PREVIOUS_STATES[S.STOPPED] == LAB_STATES - {S.FATAL, S.STOPPED}
    assert not any(S.FATAL in befores for after, befores in PREVIOUS_STATES.items() if after is not S.FATAL)


@pytest.mark.parametrize(("before", "after"), ALLOWED, ids=[f"{b.value}->{a.value}" for b, a in ALLOWED])
def test_every_allowed_move_goes_through_the_setter(before, after):
    beats = heartbeats(before)
    beats.news.clear()
    beats._set_state(after)
    assert beats.snapshot().state is after
    assert beats.news.is_set()                      # every move tells the polling thread


@pytest.mark.parametrize(("before", "after"), [
    (S.STABLE, S.ACKNOWLEDGING),       # only a reconciliation step is acknowledged
    (S.STABLE, S.LEAVING),             # leaving passes through PREPARE_LEAVING
    (S.STABLE, S.JOINING),             # a member in the group joins again only after fencing
    (S.UNSUBSCRIBED, S.STABLE),
    (S.FENCED, S.FATAL),
    (S.FATAL, S.JOINING),              # FATAL is the end
    (S.FATAL, S.STOPPED),
    (S.STOPPED, S.JOINING),
    (S.LEAVING, S.STALE),              # the lab never goes stale
])
def test_an_illegal_move_raises_and_leaves_the_state_alone(before, after):
    with pytest.raises(IllegalMemberTransition):
        check_transition(before, after)
    beats = heartbeats(before)
    with pytest.raises(IllegalMemberTransition, match=f"{before.value} -> {after.value}"):
        beats._set_state(after)
    assert beats.snapshot().state is before


def test_staying_in_a_state_is_always_allowed():
    for state in LAB_STATES:
        check_transition(state, state)


# ------------------------------------------------------------ the moves the heartbeat side makes


def test_a_new_target_is_reconciled_acknowledged_at_once_and_stable_once_reported():
    beats = heartbeats(S.STABLE, owned=frozenset({TP0}))
    beats._target = frozenset({TP0})
    beats._on_answer(answer(assigned=(0, 1)), None)
    assert beats.snapshot().state is S.RECONCILING            # the target moved past what it owns
    assert beats.reconciling()
    beats._owned = lambda: frozenset({TP0, TP1})              # the polling thread took t-1
    beats.ack_now()
    assert beats.snapshot().state is S.ACKNOWLEDGING
    beats._main = beats._beat = Scripted(ConsumerGroupHeartbeat=[answer(epoch=4)])
    beats._beat_once()                                        # the acknowledgement, sent without waiting
    assert beats._beat.sent == ["ConsumerGroupHeartbeat"]
    assert beats.snapshot().state is S.STABLE and beats.member_epoch == 4


def test_an_acknowledgement_short_of_the_target_leaves_the_member_reconciling():
    beats = heartbeats(S.ACKNOWLEDGING, owned=frozenset())
    beats._target = frozenset({TP0})
    beats._main = beats._beat = Scripted(ConsumerGroupHeartbeat=[answer()])
    beats._beat_once()
    assert beats.snapshot().state is S.RECONCILING


def test_fencing_then_rejoining():
    beats = heartbeats(S.STABLE)
    beats._on_answer(answer(errors.FENCED_MEMBER_EPOCH), None)
    snapshot = beats.snapshot()
    assert (snapshot.state, snapshot.member_epoch, snapshot.target) == (S.FENCED, 0, None)
    assert not beats.reconciling()                            # a fenced member reconciles nothing
    beats.rejoin()
    assert beats.snapshot().state is S.JOINING


def test_fenced_while_preparing_to_leave_leaves_without_a_leave_heartbeat():
    beats = heartbeats(S.STABLE)
    beats.prepare_leaving()
    assert beats.snapshot().state is S.PREPARE_LEAVING
    beats._on_answer(answer(errors.UNKNOWN_MEMBER_ID), None)
    assert beats.snapshot().state is S.UNSUBSCRIBED
    connected = []
    beats._connect = lambda host, port: connected.append(port)
    beats.leave()
    assert connected == [] and beats.snapshot().state is S.UNSUBSCRIBED


def test_leaving_sends_epoch_minus_one_then_unsubscribes():
    beats = heartbeats(S.STABLE)
    beats.prepare_leaving()
    stub = Scripted(ConsumerGroupHeartbeat=[answer(epoch=-1)])
    beats._connect = lambda host, port: stub
    beats.leave()
    assert stub.sent == ["ConsumerGroupHeartbeat"] and beats.snapshot().state is S.UNSUBSCRIBED


def test_an_abandoned_member_stops_but_a_fatal_one_stays_fatal():
    beats = heartbeats(S.RECONCILING)
    beats.stop()
    assert beats.snapshot().state is S.STOPPED
    beats = heartbeats(S.STABLE)
    beats._on_answer(answer(errors.UNSUPPORTED_ASSIGNOR), None)
    assert beats.snapshot().state is S.FATAL and beats.snapshot().fatal is not None
    beats.stop()
    assert beats.snapshot().state is S.FATAL
