"""The classic group state machine driven by a simulated clock: every case of Kafka's rules."""

from __future__ import annotations

import itertools

import pytest

from modern.common import errors
from modern.coordinator.classic_group import (
    TRANSITIONS,
    ClassicGroup,
    ClassicGroupState,
    GroupConfig,
    Heartbeat,
    HeartbeatResult,
    JoinGroup,
    JoinResult,
    LeaveResult,
    LeavingMember,
    SyncGroup,
    SyncResult,
)
from modern.coordinator.offset_metadata_manager import OffsetCommit, commit_to_classic_group
from modern.coordinator.records.offset_commit import OffsetAndMetadata

S = ClassicGroupState


class Sim:
    """A group plus a clock that only moves when told; parked replies are collected by token."""

    def __init__(self, delay_ms: int = 3000, **config) -> None:
        counter = itertools.count(1)
        self.now = 0
        self.group = ClassicGroup(
            "g",
            GroupConfig(initial_rebalance_delay_ms=delay_ms, **config),
            new_member_id=lambda prefix: f"{prefix}-{next(counter)}",
        )
        self.replies: dict[object, object] = {}
        self.stored = 0

    def _take(self, out) -> None:
        self.stored += out.store_group
        for token, result in out.replies:
            self.replies[token] = result

    def join(self, token, member_id="", *, client="c", protocols=(("range", b"r"),), instance=None,
             v4=False, v9=False, session=10_000, rebalance=30_000) -> JoinResult | None:
        request = JoinGroup(
            member_id=member_id, client_id=client, session_timeout_ms=session, rebalance_timeout_ms=rebalance,
            protocol_type="consumer", protocols=tuple(protocols), group_instance_id=instance,
            require_known_member_id=v4 or v9, supports_skip_assignment=v9,
        )
        self._take(self.group.handle_join(request, self.now, token))
        return self.replies.get(token)

    def sync(self, token, member_id, generation, assignments=None, instance=None, protocol_name=None):
        request = SyncGroup(member_id=member_id, generation_id=generation, assignments=assignments or {},
                            group_instance_id=instance, protocol_name=protocol_name)
        self._take(self.group.handle_sync(request, self.now, token))
        return self.replies.get(token)

    def heartbeat(self, member_id, generation, instance=None) -> object:
        out = self.group.handle_heartbeat(Heartbeat(member_id=member_id, generation_id=generation,
                                                    group_instance_id=instance), self.now)
        self._take(out)
        return out.replies[0][1].error

    def commit(self, member_id, generation, offsets=None) -> object:
        offsets = offsets or {("t", 0): OffsetAndMetadata(5)}
        error, _ = commit_to_classic_group(self.group, OffsetCommit(member_id=member_id, generation_id=generation,
                                                                    offsets=offsets), self.now)
        return error

    def leave(self, member_id, instance=None) -> LeaveResult:
        out = self.group.handle_leave([LeavingMember(member_id=member_id, group_instance_id=instance)], self.now)
        self._take(out)
        return out.replies[0][1]

    def keep_alive(self, member_ids, generation, until_ms: int, every_ms: int = 3000) -> None:
        """Advance to `until_ms` while the given members heartbeat like a client would."""
        while self.now + every_ms <= until_ms:
            self.advance(self.now + every_ms)
            for member_id in member_ids:
                if member_id in self.group.members:
                    self.heartbeat(member_id, generation)
        self.advance(until_ms)

    def advance(self, to_ms: int) -> None:
        """Move the clock to `to_ms`, running tick() at every deadline on the way."""
        while (deadline := self.group.next_deadline()) is not None and deadline <= to_ms:
            self.now = max(self.now, deadline)
            self._take(self.group.tick(self.now))
        self.now = to_ms

    def stable_group(self, *names: str, instance_of=None):
        """Members join at t=0, the delay passes, the first syncs as leader: returns ids and generation."""
        instance_of = instance_of or {}
        for name in names:
            self.join(name, client=name, instance=instance_of.get(name))
        while any(name not in self.replies for name in names):  # each arrival in the delay extends it
            self.advance(self.now + 3000)
        results = {name: self.replies[name] for name in names}
        generation = results[names[0]].generation_id
        leader = results[names[0]].leader
        ids = {name: r.member_id for name, r in results.items()}
        leader_name = next(n for n, i in ids.items() if i == leader)
        self.sync(("sync", leader_name), leader, generation, {i: f"a-{n}".encode() for n, i in ids.items()})
        for name in names:
            if name != leader_name:
                self.sync(("sync", name), ids[name], generation)
        assert self.group.state is S.STABLE
        return ids, generation


def test_transition_table_is_kafkas():
    assert TRANSITIONS[S.EMPTY] == {S.PREPARING_REBALANCE, S.DEAD}
    assert TRANSITIONS[S.PREPARING_REBALANCE] == {S.COMPLETING_REBALANCE, S.EMPTY, S.DEAD}
    assert TRANSITIONS[S.COMPLETING_REBALANCE] == {S.PREPARING_REBALANCE, S.STABLE, S.DEAD}
    assert TRANSITIONS[S.STABLE] == {S.PREPARING_REBALANCE, S.DEAD}
    assert TRANSITIONS[S.DEAD] == set()


def test_illegal_transition_raises():
    sim = Sim()
    with pytest.raises(AssertionError):
        sim.group._transition(S.STABLE, 0, "test")


# ---------------------------------------------------------------- initial delay


def test_initial_join_waits_the_delay_even_when_everyone_is_there():
    sim = Sim()
    assert sim.join("a", client="a") is None
    assert sim.group.state is S.PREPARING_REBALANCE
    sim.advance(2999)
    assert "a" not in sim.replies  # never completed early
    sim.advance(3000)
    result = sim.replies["a"]
    assert result.error is errors.NONE and result.generation_id == 1
    assert sim.group.state is S.COMPLETING_REBALANCE


def test_initial_delay_extends_while_members_arrive():
    sim = Sim()
    sim.join("a", client="a")
    sim.advance(1000)
    sim.join("b", client="b")       # arrived during the first delay: one more delay
    sim.advance(5999)
    assert "a" not in sim.replies and "b" not in sim.replies
    sim.advance(6000)
    assert sim.replies["a"].generation_id == sim.replies["b"].generation_id == 1
    assert sim.replies["a"].leader == sim.replies["a"].member_id     # the first member leads
    assert len(sim.replies["a"].members) == 2 and sim.replies["b"].members == ()  # only the leader sees members


def test_initial_delay_is_bounded_by_the_rebalance_timeout():
    sim = Sim()
    for step in range(10):  # a member every second, forever
        sim.now = step * 1000
        sim.join(f"m{step}", client=f"m{step}", rebalance=5000)
        sim.advance(sim.now + 999)
    # 3000 (first delay) + min(3000, 2000 left) = 5000: completed then, whoever was there.
    assert sim.replies["m0"].error is errors.NONE
    assert sim.group.generation_id == 1
    assert all(sim.replies[f"m{i}"].generation_id == 1 for i in range(5))


def test_initial_delay_is_waited_in_full_even_beyond_the_rebalance_timeout():
    """Kafka's InitialDelayedJoin starts with the whole group.initial.rebalance.delay.ms, whatever the
    rebalance timeout; only the extensions are bounded by it."""
    sim = Sim()
    sim.join("a", client="a", rebalance=1000)
    sim.advance(2999)
    assert "a" not in sim.replies
    sim.advance(3000)
    assert sim.replies["a"].generation_id == 1


def test_initial_delay_extends_only_on_the_groups_first_join():
    """Kafka marks a newcomer as extending the delay only while the group is at generation 0: an empty group
    that had generations before waits one delay, however many members arrive in it."""
    sim = Sim()
    ids, gen = sim.stable_group("a", "b")
    sim.leave(ids["a"])
    sim.leave(ids["b"])
    assert sim.group.state is S.EMPTY and sim.group.generation_id == gen + 1
    start = sim.now
    sim.join("c", client="c")
    sim.advance(start + 1000)
    sim.join("d", client="d")                    # arrives during the delay: no extension now
    sim.advance(start + 3000)
    assert sim.replies["c"].generation_id == sim.replies["d"].generation_id == gen + 2


# ---------------------------------------------------------------- join phase after the first


def test_rejoin_completes_as_soon_as_all_known_members_rejoin():
    sim = Sim()
    ids, gen = sim.stable_group("a", "b")
    sim.now += 100
    sim.join("a2", ids["a"], client="a")           # the leader rejoining starts a rebalance
    assert sim.group.state is S.PREPARING_REBALANCE
    assert sim.heartbeat(ids["b"], gen) is errors.REBALANCE_IN_PROGRESS
    sim.join("b2", ids["b"], client="b")
    assert sim.replies["a2"].generation_id == gen + 1 == sim.replies["b2"].generation_id  # no timer needed


def test_members_that_do_not_rejoin_are_dropped_at_the_rebalance_timeout():
    sim = Sim()
    ids, gen = sim.stable_group("a", "b")
    sim.join("a2", ids["a"], client="a", rebalance=30_000)
    start = sim.now
    sim.keep_alive([ids["b"]], gen, start + 29_999)      # alive, but never rejoins
    assert "a2" not in sim.replies
    sim.advance(start + 30_000)
    assert sim.replies["a2"].generation_id == gen + 1
    assert list(sim.group.members) == [ids["a"]]


def test_follower_with_unchanged_metadata_in_stable_gets_current_generation_without_rebalance():
    sim = Sim()
    ids, gen = sim.stable_group("a", "b")
    result = sim.join("b2", ids["b"], client="b")
    assert result.error is errors.NONE and result.generation_id == gen
    assert sim.group.state is S.STABLE


def test_follower_with_changed_metadata_triggers_rebalance():
    sim = Sim()
    ids, gen = sim.stable_group("a", "b")
    assert sim.join("b2", ids["b"], client="b", protocols=(("range", b"other"),)) is None
    assert sim.group.state is S.PREPARING_REBALANCE


def test_member_id_required_for_v4_then_rejoin_with_it():
    sim = Sim()
    first = sim.join("a", client="client-a", v4=True)
    assert first.error is errors.MEMBER_ID_REQUIRED
    assert first.member_id.startswith("client-a-")
    assert sim.group.state is S.EMPTY and not sim.group.members
    assert sim.join("a2", first.member_id, client="client-a", v4=True) is None
    sim.advance(3000)
    assert sim.replies["a2"].member_id == first.member_id and sim.replies["a2"].error is errors.NONE


def test_pending_member_id_expires_after_session_timeout():
    sim = Sim()
    first = sim.join("a", client="a", v4=True, session=10_000)
    sim.advance(10_000)
    assert sim.join("a2", first.member_id, client="a") .error is errors.UNKNOWN_MEMBER_ID


def test_unknown_member_id_on_join():
    sim = Sim()
    sim.stable_group("a")
    assert sim.join("x", "nobody", client="x").error is errors.UNKNOWN_MEMBER_ID


def test_invalid_session_timeout():
    sim = Sim()
    assert sim.join("a", session=5999).error is errors.INVALID_SESSION_TIMEOUT
    assert sim.join("b", session=1_800_001).error is errors.INVALID_SESSION_TIMEOUT


# ---------------------------------------------------------------- protocols


def test_inconsistent_group_protocol_on_join():
    sim = Sim()
    sim.stable_group("a")
    assert sim.join("x", protocols=(("roundrobin", b""),)).error is errors.INCONSISTENT_GROUP_PROTOCOL
    assert sim.join("y", protocols=()).error is errors.INCONSISTENT_GROUP_PROTOCOL


def test_protocol_vote_takes_the_most_preferred_common_protocol():
    sim = Sim()
    sim.join("a", client="a", protocols=(("range", b""), ("roundrobin", b""), ("sticky", b"")))
    sim.join("b", client="b", protocols=(("roundrobin", b""), ("range", b"")))
    sim.join("c", client="c", protocols=(("roundrobin", b""), ("sticky", b""), ("range", b"")))
    sim.advance(6000)
    assert sim.replies["a"].protocol_name == "roundrobin"   # two votes against one
    leader_members = sim.replies["a"].members
    assert [m.metadata for m in leader_members] == [b"", b"", b""]


def test_sync_with_another_protocol_name_is_inconsistent():
    sim = Sim()
    sim.join("a", client="a")
    sim.advance(3000)
    a = sim.replies["a"]
    result = sim.sync("s", a.member_id, a.generation_id, protocol_name="roundrobin")
    assert result.error is errors.INCONSISTENT_GROUP_PROTOCOL


# ---------------------------------------------------------------- sync and heartbeat


def test_heartbeat_in_completing_rebalance_answers_none_and_followers_wait_for_the_leader():
    sim = Sim()
    sim.join("a", client="a")
    sim.join("b", client="b")
    sim.advance(6000)
    a, b = sim.replies["a"], sim.replies["b"]
    assert sim.group.state is S.COMPLETING_REBALANCE
    assert sim.heartbeat(b.member_id, b.generation_id) is errors.NONE
    assert sim.sync("sb", b.member_id, b.generation_id) is None       # parked
    sim.sync("sa", a.member_id, a.generation_id, {a.member_id: b"for-a"})  # b missing from the plan
    assert sim.group.state is S.STABLE
    assert sim.replies["sa"] == SyncResult(error=errors.NONE, protocol_type="consumer",
                                           protocol_name="range", assignment=b"for-a")
    assert sim.replies["sb"].assignment == b""                       # missing means empty
    assert sim.stored == 1                                            # GroupMetadata written once


def test_sync_in_preparing_rebalance_answers_rebalance_in_progress():
    sim = Sim()
    ids, gen = sim.stable_group("a", "b")
    sim.join("a2", ids["a"], client="a")
    assert sim.sync("s", ids["b"], gen).error is errors.REBALANCE_IN_PROGRESS


def test_parked_follower_sync_is_released_when_a_rebalance_starts():
    sim = Sim()
    sim.join("a", client="a")
    sim.join("b", client="b")
    sim.advance(6000)
    b = sim.replies["b"]
    sim.sync("sb", b.member_id, b.generation_id)
    sim.join("c", client="c")
    assert sim.replies["sb"].error is errors.REBALANCE_IN_PROGRESS


def test_illegal_generation_and_unknown_member_on_heartbeat():
    sim = Sim()
    ids, gen = sim.stable_group("a")
    assert sim.heartbeat(ids["a"], gen - 1) is errors.ILLEGAL_GENERATION
    assert sim.heartbeat("stranger", gen) is errors.UNKNOWN_MEMBER_ID
    assert sim.heartbeat(ids["a"], gen) is errors.NONE


def test_heartbeat_on_empty_group_is_unknown_member():
    sim = Sim()
    assert sim.heartbeat("x", 0) is errors.UNKNOWN_MEMBER_ID


def test_validation_order_unknown_member_before_generation():
    sim = Sim()
    ids, gen = sim.stable_group("a")
    assert sim.heartbeat("stranger", gen + 7) is errors.UNKNOWN_MEMBER_ID
    assert sim.sync("s", "stranger", gen + 7, protocol_name="other").error is errors.UNKNOWN_MEMBER_ID
    assert sim.sync("s2", ids["a"], gen + 7, protocol_name="other").error is errors.ILLEGAL_GENERATION


def test_dead_group_answers_coordinator_not_available():
    sim = Sim()
    ids, gen = sim.stable_group("a")
    sim.group.unload(sim.now)
    assert sim.group.state is S.DEAD
    assert sim.heartbeat(ids["a"], gen) is errors.COORDINATOR_NOT_AVAILABLE
    assert sim.join("x").error is errors.COORDINATOR_NOT_AVAILABLE
    assert sim.sync("s", ids["a"], gen).error is errors.COORDINATOR_NOT_AVAILABLE
    assert sim.commit(ids["a"], gen) is errors.COORDINATOR_NOT_AVAILABLE


def test_unload_answers_parked_requests_not_coordinator():
    sim = Sim()
    sim.join("a", client="a")
    sim._take(sim.group.unload(0))
    assert sim.replies["a"].error is errors.NOT_COORDINATOR


# ---------------------------------------------------------------- sessions and timeouts


def test_session_expiry_removes_the_member_and_rebalances():
    sim = Sim()
    ids, gen = sim.stable_group("a", "b")
    start = sim.now
    for t in range(start + 3000, start + 12_000, 3000):
        sim.advance(t)
        sim.heartbeat(ids["a"], gen)      # only a keeps its session
    sim.advance(start + 10_000)
    assert ids["b"] not in sim.group.members
    assert sim.group.state is S.PREPARING_REBALANCE


def test_next_deadline_is_the_earliest_live_session_not_one_a_later_heartbeat_replaced():
    sim = Sim()
    ids, gen = sim.stable_group("a", "b")
    start = sim.now
    sim.now = start + 4000
    sim.heartbeat(ids["a"], gen)
    sim.heartbeat(ids["b"], gen)
    sim.now = start + 8000
    sim.heartbeat(ids["a"], gen)
    # every earlier session entry was replaced: the clock is next needed when b's session (renewed at +4 s) ends
    assert sim.group.next_deadline() == start + 4000 + 10_000
    assert sim.group.next_deadline() == sim.group.members[ids["b"]].session_deadline_ms
    sim.advance(start + 4000 + 10_000)
    assert ids["b"] not in sim.group.members and ids["a"] in sim.group.members


def test_member_waiting_for_its_join_answer_does_not_expire():
    sim = Sim()
    ids, gen = sim.stable_group("a", "b")
    sim.join("c", client="c", session=10_000, rebalance=60_000)       # a rebalance; a and b must rejoin
    sim.join("a2", ids["a"], client="a", session=10_000, rebalance=60_000)
    start = sim.now
    sim.keep_alive([ids["b"]], gen, start + 50_000)                   # b heartbeats but never rejoins
    assert ids["a"] in sim.group.members and "a2" not in sim.replies  # parked for 50 s, session 10 s
    sim.keep_alive([ids["b"]], gen, start + 60_000)
    assert sim.replies["a2"].generation_id == gen + 1 and sim.replies["c"].generation_id == gen + 1
    assert ids["b"] not in sim.group.members


def test_leader_leaving_hands_leadership_to_the_next_member():
    sim = Sim()
    ids, gen = sim.stable_group("a", "b", "c")
    assert sim.group.leader_id == ids["a"]
    result = sim.leave(ids["a"])
    assert result.members[0][1] is errors.NONE
    assert sim.group.leader_id == ids["b"]
    sim.join("b2", ids["b"], client="b")
    sim.join("c2", ids["c"], client="c")
    assert sim.replies["b2"].leader == ids["b"] and len(sim.replies["b2"].members) == 2


def test_last_member_leaving_empties_the_group():
    sim = Sim()
    ids, gen = sim.stable_group("a")
    sim.leave(ids["a"])
    assert sim.group.state is S.EMPTY and sim.group.generation_id == gen + 1
    assert sim.leave("nobody").members[0][1] is errors.UNKNOWN_MEMBER_ID


def test_member_that_never_syncs_is_evicted_after_the_rebalance_timeout():
    sim = Sim()
    sim.join("a", client="a", rebalance=20_000)
    sim.join("b", client="b", rebalance=20_000, session=30_000)
    sim.advance(6000)
    a = sim.replies["a"]
    sim.sync("sa", a.member_id, a.generation_id, {a.member_id: b"x"})
    sim.keep_alive([a.member_id, sim.replies["b"].member_id], a.generation_id, 6000 + 19_999)
    assert len(sim.group.members) == 2
    sim.advance(6000 + 20_000)
    assert list(sim.group.members) == [a.member_id]
    assert sim.group.state is S.PREPARING_REBALANCE


# ---------------------------------------------------------------- static membership


def test_static_member_rejoining_in_stable_causes_no_rebalance_and_fences_its_old_id():
    sim = Sim()
    ids, gen = sim.stable_group("a", "b", instance_of={"b": "inst-b"})
    assert ids["b"].startswith("inst-b-")
    result = sim.join("b-again", client="b", instance="inst-b")          # restarted: unknown member id
    assert result.error is errors.NONE and result.generation_id == gen
    assert result.member_id != ids["b"]
    assert sim.group.state is S.STABLE and sim.group.generation_id == gen
    assert sim.sync("sb", result.member_id, gen, instance="inst-b").assignment == b"a-b"  # kept its assignment
    assert sim.heartbeat(ids["b"], gen, instance="inst-b") is errors.FENCED_INSTANCE_ID
    assert sim.heartbeat(result.member_id, gen, instance="inst-b") is errors.NONE


def test_static_member_rejoining_with_new_metadata_but_the_same_protocol_causes_no_rebalance():
    sim = Sim()
    ids, gen = sim.stable_group("a", "b", instance_of={"b": "inst-b"})
    result = sim.join("b-again", client="b", instance="inst-b", protocols=(("range", b"new owned partitions"),))
    assert result.error is errors.NONE and result.generation_id == gen
    assert sim.group.state is S.STABLE


def test_static_member_that_changes_the_chosen_protocol_rebalances():
    sim = Sim()
    both = (("range", b""), ("roundrobin", b""))
    sim.join("a", client="a", protocols=both)
    sim.join("b", client="b", protocols=both, instance="inst-b")
    sim.advance(6000)
    a = sim.replies["a"]
    sim.sync("sa", a.member_id, a.generation_id, {})
    assert sim.group.protocol_name == "range"
    assert sim.join("b-again", client="b", instance="inst-b", protocols=(("roundrobin", b""),)) is None
    assert sim.group.state is S.PREPARING_REBALANCE


def test_static_member_is_kept_when_it_does_not_rejoin_in_time():
    sim = Sim()
    ids, gen = sim.stable_group("a", "b", instance_of={"b": "inst-b"})
    sim.join("a2", ids["a"], client="a", rebalance=30_000)
    start = sim.now
    sim.keep_alive([ids["b"]], gen, start + 30_000)
    assert sim.replies["a2"].generation_id == gen + 1
    assert ids["b"] in sim.group.members       # only a session timeout removes a static member


def test_completing_a_join_refreshes_every_session_static_members_that_did_not_rejoin_included():
    """Kafka's onCompleteJoin reschedules the heartbeat expiry of every member it keeps, a static member
    that did not rejoin included: its session counts from the end of the join phase."""
    sim = Sim()
    ids, gen = sim.stable_group("a", "b", instance_of={"b": "inst-b"})
    sim.join("a2", ids["a"], client="a", rebalance=30_000)
    start = sim.now
    sim.keep_alive([ids["b"]], gen, start + 29_000)     # heartbeats (its last at +27 s), never rejoins
    sim.advance(start + 30_000)
    assert sim.replies["a2"].generation_id == gen + 1
    assert sim.group.members[ids["b"]].session_deadline_ms == start + 30_000 + 10_000
    sim.advance(start + 37_001)                          # 10 s after its last heartbeat: still a member
    assert ids["b"] in sim.group.members and sim.group.state is S.COMPLETING_REBALANCE


# ---------------------------------------------------------------- offset commits


def test_zombie_commit_is_fenced_with_illegal_generation():
    sim = Sim()
    ids, gen = sim.stable_group("a", "b")
    assert sim.commit(ids["b"], gen) is errors.NONE
    # b stalls (a long GC pause): its session runs out, a new generation starts without it.
    sim.keep_alive([ids["a"]], gen, sim.now + 10_000)
    assert ids["b"] not in sim.group.members
    sim.join("a2", ids["a"], client="a")
    new_gen = sim.replies["a2"].generation_id
    assert sim.commit(ids["b"], gen) is errors.UNKNOWN_MEMBER_ID      # b was dropped
    assert sim.commit(ids["a"], gen) is errors.ILLEGAL_GENERATION     # a with its old generation
    assert sim.commit(ids["a"], new_gen) is errors.REBALANCE_IN_PROGRESS  # CompletingRebalance
    sim.sync("s", ids["a"], new_gen, {ids["a"]: b""})
    assert sim.commit(ids["a"], new_gen) is errors.NONE


def test_commit_rules_by_state():
    sim = Sim()
    assert sim.commit("", -1) is errors.NONE                 # manual assignment on an empty group
    ids, gen = sim.stable_group("a", "b")
    assert sim.commit("", -1) is errors.UNKNOWN_MEMBER_ID    # group in use: name yourself
    sim.join("a2", ids["a"], client="a")                      # PreparingRebalance
    assert sim.commit(ids["b"], gen) is errors.NONE          # the current generation is still accepted
    assert sim.group.offsets[("t", 0)].offset == 5


def test_commit_output_carries_the_offsets_to_store():
    sim = Sim()
    _, committed = commit_to_classic_group(sim.group, OffsetCommit(offsets={("t", 1): OffsetAndMetadata(9, "m")}),
                                           1234)
    assert committed[("t", 1)].offset == 9 and committed[("t", 1)].commit_timestamp_ms == 1234


def test_transitions_are_reported():
    sim = Sim()
    out = sim.group.handle_join(JoinGroup(session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                                          protocol_type="consumer", protocols=(("range", b""),)), 0, "t")
    assert [(t.from_state, t.to_state) for t in out.transitions] == [(S.EMPTY, S.PREPARING_REBALANCE)]


def test_group_max_size():
    sim = Sim(max_size=1)
    sim.join("a", client="a")
    assert sim.join("b", client="b").error is errors.GROUP_MAX_SIZE_REACHED


def test_a_full_group_refuses_a_newcomer_before_handing_out_a_member_id():
    sim = Sim(max_size=1)
    sim.stable_group("a")
    refused = sim.join("b", client="b", v4=True)
    assert refused.error is errors.GROUP_MAX_SIZE_REACHED and refused.member_id == ""
    assert not sim.group.pending_members


def test_while_rebalancing_max_size_counts_the_members_already_waiting_to_join():
    # a and b are stable at the limit; a rejoins, then newcomer c arrives before b rejoins:
    # one member is waiting, so c gets in, and b, rejoining last, is the one pushed out.
    sim = Sim(max_size=2)
    ids, gen = sim.stable_group("a", "b")
    sim.join("a2", ids["a"], client="a")
    first = sim.join("c", client="c", v4=True)
    assert first.error is errors.MEMBER_ID_REQUIRED
    assert sim.join("c2", first.member_id, client="c", v4=True) is None      # accepted and parked
    late = sim.join("b2", ids["b"], client="b")
    assert late.error is errors.GROUP_MAX_SIZE_REACHED
    assert ids["b"] not in sim.group.members
    assert sim.replies["a2"].generation_id == gen + 1                      # the phase ends without b
    assert {m.member_id for m in sim.replies["a2"].members} == {ids["a"], first.member_id}


def test_unknown_instance_id_is_an_unknown_member():
    sim = Sim()
    ids, gen = sim.stable_group("a", "b", instance_of={"b": "inst-b"})
    assert sim.heartbeat(ids["a"], gen, instance="inst-ghost") is errors.UNKNOWN_MEMBER_ID
    assert sim.sync("s", ids["a"], gen, instance="inst-ghost").error is errors.UNKNOWN_MEMBER_ID
    assert sim.join("j", ids["a"], client="a", instance="inst-ghost").error is errors.UNKNOWN_MEMBER_ID
    error, _ = commit_to_classic_group(sim.group, OffsetCommit(member_id=ids["a"], generation_id=gen,
                                                               group_instance_id="inst-ghost",
                                                               offsets={("t", 0): OffsetAndMetadata(1)}), sim.now)
    assert error is errors.UNKNOWN_MEMBER_ID
    assert sim.heartbeat(ids["b"], gen, instance="inst-b") is errors.NONE


def _static_leader_group(sim: Sim):
    ids, gen = sim.stable_group("a", "b", instance_of={"a": "inst-a", "b": "inst-b"})
    assert sim.group.leader_id == ids["a"]
    return ids, gen


def test_static_leader_rejoining_a_stable_group_below_v9_is_told_the_old_leader_id():
    sim = Sim()
    ids, gen = _static_leader_group(sim)
    result = sim.join("a-again", client="a", instance="inst-a", v4=True)
    assert result.error is errors.NONE and result.generation_id == gen
    assert result.member_id != ids["a"] and sim.group.leader_id == result.member_id
    assert result.leader == ids["a"]                  # not its own id: it does not compute an assignment
    assert result.members == () and not result.skip_assignment


def test_static_leader_rejoining_a_stable_group_on_v9_skips_the_assignment():
    sim = Sim()
    ids, gen = _static_leader_group(sim)
    result = sim.join("a-again", client="a", instance="inst-a", v9=True)
    assert result.leader == result.member_id and result.skip_assignment
    assert {m.member_id for m in result.members} == {result.member_id, ids["b"]}


def test_describe_shows_member_data_only_when_stable():
    sim = Sim()
    ids, gen = sim.stable_group("a", "b")
    stable = sim.group.describe()
    assert stable.state is S.STABLE and stable.protocol_name == "range"
    assert {m.assignment for m in stable.members} == {b"a-a", b"a-b"}
    assert all(m.metadata == b"r" for m in stable.members)
    sim.join("a2", ids["a"], client="a")                                   # PreparingRebalance
    rebalancing = sim.group.describe()
    assert rebalancing.state is S.PREPARING_REBALANCE and rebalancing.protocol_name == ""
    assert [m.member_id for m in rebalancing.members] == [ids["a"], ids["b"]]
    assert all(m.metadata == b"" and m.assignment == b"" for m in rebalancing.members)


def test_results_are_typed():
    sim = Sim()
    out = sim.group.handle_heartbeat(Heartbeat(member_id="x", generation_id=0), 0)
    assert isinstance(out.replies[0][1], HeartbeatResult)


def test_a_retried_join_releases_the_parked_one():
    sim = Sim()
    ids, gen = sim.stable_group("a", "b")
    sim.join("a2", ids["a"], client="a")          # parked: b has not rejoined
    sim.join("a3", ids["a"], client="a")          # the client retried on a new connection
    assert sim.replies["a2"].error is errors.REBALANCE_IN_PROGRESS
    sim.join("b2", ids["b"], client="b")
    assert sim.replies["a3"].generation_id == gen + 1
