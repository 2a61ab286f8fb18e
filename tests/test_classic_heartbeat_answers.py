"""The classic client's heartbeats while it rejoins, as Kafka 3.7's `AbstractCoordinator`:

- `HeartbeatThread.run` disables itself while `state.hasNotJoinedGroup()` (UNJOINED, PREPARING_REBALANCE): no
  heartbeat goes out while a JoinGroup is out; they start again from its answer (COMPLETING_REBALANCE);
- `HeartbeatResponseHandler` acts on ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID only if the generation has not
  changed since the heartbeat was sent (`generationUnchanged()`), and Kafka's one coordinator connection hands
  it the answer to a heartbeat sent before a JoinGroup ahead of that JoinGroup's answer. The lab's heartbeat has
  a connection of its own, so the answer to a generation-1 heartbeat can come back after the group has moved
  to generation 2 on the member's JoinGroup: it must not undo that join.

Against scripted coordinator connections (no broker).
"""

from __future__ import annotations

import time

from kafka.protocol.consumer import HeartbeatResponse

from modern.classic.membership_states import Membership, MembershipState
from modern.common import errors
from rebalance.types import Generation
from tests.test_modern_member import (
    TP,
    Recording,
    Scripted,
    commit_answer,
    join_answer,
    stable_member,
    sync_answer,
    wait_for,
)


def heartbeat_answer(error) -> HeartbeatResponse:
    return HeartbeatResponse[3](throttle_time_ms=0, error_code=error.errno)


def test_a_heartbeat_answered_for_the_generation_being_left_does_not_undo_the_join_in_flight():
    """Stable in generation 1, the member sends a heartbeat; a rebalance starts and its JoinGroup goes out; the
    heartbeat comes back ILLEGAL_GENERATION (the group moved to generation 2 on that JoinGroup) while the
    JoinGroup is out; the JoinGroup answers generation 2. The member goes on into generation 2, sends one
    JoinGroup and loses nothing (before: it rejoined, declared its partitions lost and abandoned generation 2)."""
    member = None
    beat = Scripted(Heartbeat=[heartbeat_answer(errors.ILLEGAL_GENERATION)])

    def join_answered_after_the_heartbeat():
        member._send_heartbeat(beat, sent_with, 1.0)    # the answer to the heartbeat sent in generation 1
        return join_answer(2)

    connection = Recording(OffsetCommit=[commit_answer(errors.NONE)] * 3,
                           JoinGroup=[join_answered_after_the_heartbeat, join_answer(3)],
                           SyncGroup=[sync_answer(), sync_answer()])
    member, hooks = stable_member(connection, generation=1, strategy="cooperative-sticky")
    member._beat = beat
    sent_with = member.generation
    member.request_rejoin("heartbeat: REBALANCE_IN_PROGRESS")
    wait_for(lambda: member.poll() and member.membership.state is MembershipState.STABLE, "the join to complete")
    assert beat.sent == ["Heartbeat"]
    assert not [call for call in hooks.calls if call[0] == "lose"], hooks.calls
    assert member.generation.generation_id == 2
    assert connection.sent.count("JoinGroup") == 1


def test_no_heartbeat_goes_out_while_a_join_group_is_out_and_they_start_again_from_its_answer():
    sent: list[int] = []

    class Beats(Scripted):
        def request(self, request, timeout_s=None):
            sent.append(request.generation_id)
            return heartbeat_answer(errors.NONE)

    member, _ = stable_member(Scripted(), generation=1, heartbeat_interval_ms=50)
    member._beat = Beats()
    member._timer.polled(10**12)   # never "not polled for max.poll.interval.ms" in this test
    member._set(member.membership.join_sent())
    member._heartbeat_thread.start()
    try:
        time.sleep(0.5)   # room for heartbeats that must not go out: ten intervals
        assert sent == [], "a heartbeat went out while the JoinGroup was out"
        member._set(Membership(state=MembershipState.PREPARING_REBALANCE, generation=member.generation).joined(
            Generation(2, "m-1", "range")))
        wait_for(lambda: 2 in sent, "a heartbeat of generation 2 once the JoinGroup is answered")
        assert set(sent) == {2}
    finally:
        member.close(leave=False)
    assert TP in member.owned


def test_a_rejoin_asked_for_while_the_member_rejoins_ends_with_that_rejoin():
    """Kafka's SyncGroupResponseHandler ends a successful sync with rejoinNeeded = false: a heartbeat answered
    REBALANCE_IN_PROGRESS while the member is already on its way into the rebalance (its round started, its
    JoinGroup not yet sent, so still stable in generation 1) asks for the rejoin under way, not for another.
    Before, the request outlived the round and the member rejoined as soon as it was stable: in a run of a
    thousand members on two cores, where a member's threads waited seconds for a CPU, each such member started
    the group's next rebalance (its subscription, carrying its new generation, read as changed metadata), round
    after round."""
    connection = Recording(OffsetCommit=[commit_answer(errors.NONE)] * 4, JoinGroup=[join_answer(2), join_answer(3)],
                           SyncGroup=[sync_answer(), sync_answer()])
    member, hooks = stable_member(connection, generation=1)
    beat = Scripted(Heartbeat=[heartbeat_answer(errors.REBALANCE_IN_PROGRESS)])
    looked_up = member.ensure_coordinator

    def answered_on_the_way_to_the_join_group():   # the round's thread, before its JoinGroup goes out
        if member._round is not None and not beat.sent:   # not the pre-join commit's look-up
            assert member.membership.state is MembershipState.STABLE
            member._send_heartbeat(beat, member.generation, 1.0)
        return looked_up()

    member.ensure_coordinator = answered_on_the_way_to_the_join_group
    member.request_rejoin("heartbeat: REBALANCE_IN_PROGRESS")
    wait_for(lambda: member.poll() and member.membership.state is MembershipState.STABLE, "the join to complete")
    for _ in range(5):
        member.poll()
    assert beat.sent == ["Heartbeat"]
    assert member.generation.generation_id == 2
    assert connection.sent.count("JoinGroup") == 1, connection.sent
