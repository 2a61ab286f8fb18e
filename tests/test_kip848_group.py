"""KIP-848's consumer group driven by a hand-moved clock: epochs, reconciliation, timeouts, errors."""

from __future__ import annotations

import pytest

from modern.common import errors
from modern.coordinator.assignors import range_, uniform
from modern.coordinator.consumer_group import (
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerGroupState,
    HeartbeatRequest,
    MemberState,
)
from modern.coordinator.offset_metadata_manager import member_epoch_error
from modern.coordinator.records import consumer_group as records

TOPICS = {"t": 6}


class Sim:
    """A group, a clock that only moves when told, and each member's view of what it owns."""

    def __init__(self, topics=None, **config) -> None:
        self.now = 0
        self.topics = dict(topics or TOPICS)
        self.group = ConsumerGroup("g", ConsumerGroupConfig(**config))
        self.epoch: dict[str, int] = {}
        self.owned: dict[str, frozenset] = {}
        self.records: list[records.Record] = []

    def beat(self, member, *, epoch=None, subscribe=None, assignor=None, owned=None, instance=None,
             rebalance_timeout=10_000):
        epoch = self.epoch.get(member, 0) if epoch is None else epoch
        joining = epoch == 0
        request = HeartbeatRequest(
            member_id=member, member_epoch=epoch, instance_id=instance, member_id_from_client=True,
            rebalance_timeout_ms=rebalance_timeout if joining else -1,
            subscribed_topics=tuple(subscribe or ("t",)) if joining or subscribe else None,
            server_assignor=assignor, owned=None if joining else (self.owned.get(member, frozenset())
                                                                    if owned is None else owned))
        out = self.group.heartbeat(request, self.topics, self.now)
        self.records.extend(out.records)
        result = out.result
        if result.error is errors.NONE and epoch >= 0:
            self.epoch[member] = result.member_epoch
            if result.assignment is not None:
                # a client revokes at once and takes only what it is given
                self.owned[member] = result.assignment
        return result

    def converge(self, members, rounds=6):
        for _ in range(rounds):
            for member in members:
                self.beat(member)

    def state(self, member) -> MemberState:
        return self.group.members[member].state

    def assert_disjoint_and_complete(self, members):
        owned = [tp for m in members for tp in self.owned[m]]
        assert len(owned) == len(set(owned))
        assert set(owned) == {("t", p) for p in range(self.topics["t"])}


def test_first_member_gets_everything_at_epoch_one():
    sim = Sim()
    result = sim.beat("a")
    assert result.error is errors.NONE
    assert result.member_epoch == 1
    assert result.assignment == frozenset(("t", p) for p in range(6))
    assert sim.group.group_epoch == sim.group.assignment_epoch == 1
    assert sim.group.state() is ConsumerGroupState.STABLE


def test_v0_join_gets_a_member_id_from_the_coordinator():
    sim = Sim()
    out = sim.group.heartbeat(HeartbeatRequest(member_id="", member_epoch=0, rebalance_timeout_ms=1000,
                                               subscribed_topics=("t",)), TOPICS, 0)
    assert out.result.error is errors.NONE and len(out.result.member_id) == 36


def test_second_member_waits_until_the_first_revokes():
    sim = Sim()
    sim.beat("a")
    joined = sim.beat("b")
    assert joined.member_epoch == 2 and joined.assignment == frozenset()   # nothing released yet
    assert sim.state("b") is MemberState.UNRELEASED_PARTITIONS
    answer = sim.beat("a", owned=sim.owned["a"])                            # told to revoke three
    assert sim.state("a") is MemberState.UNREVOKED_PARTITIONS
    assert answer.member_epoch == 1 and len(answer.assignment) == 3       # epoch held back
    answer = sim.beat("a")                                                 # acks by reporting what it owns
    assert answer.member_epoch == 2 and sim.state("a") is MemberState.STABLE
    answer = sim.beat("b")
    assert len(answer.assignment) == 3 and sim.state("b") is MemberState.STABLE
    sim.assert_disjoint_and_complete(["a", "b"])
    assert sim.group.state() is ConsumerGroupState.STABLE


def test_a_partition_is_never_owned_twice_while_converging():
    sim = Sim(topics={"t": 12})
    members = ["a", "b", "c", "d", "e"]
    for step, member in enumerate(members):
        sim.beat(member)
        for _ in range(4):
            for m in members[:step + 1]:
                sim.beat(m)
                owners = [tp for x in members[:step + 1] for tp in sim.group.members[x].assigned
                          | sim.group.members[x].pending_revocation]
                assert len(owners) == len(set(owners))
    sim.assert_disjoint_and_complete(members)
    assert sorted(len(sim.owned[m]) for m in members) == [2, 2, 2, 3, 3]


def test_leaving_moves_only_the_leavers_partitions():
    sim = Sim()
    sim.beat("a")
    sim.beat("b")
    sim.beat("c")
    sim.converge(["a", "b", "c"])
    before = {m: sim.owned[m] for m in "abc"}
    left = sim.beat("c", epoch=-1)
    assert left.member_epoch == -1
    sim.converge(["a", "b"])
    for m in "ab":
        assert before[m] <= sim.owned[m]               # never revoked
    sim.assert_disjoint_and_complete(["a", "b"])


def test_a_leave_moves_the_group_epoch_and_the_next_heartbeat_computes_the_target_once():
    """Kafka's consumerGroupFenceMember writes the member's removal and a new group epoch, no target: two
    members leaving one after the other cost one target assignment, computed at the next heartbeat."""
    sim = Sim(topics={"t": 8})
    for member in "abcd":
        sim.beat(member)
    sim.converge(list("abcd"))
    computed = sim.group.assignment_epoch
    sim.beat("c", epoch=-1)
    sim.beat("d", epoch=-1)
    assert sim.group.group_epoch == computed + 2
    assert sim.group.assignment_epoch == computed, "no target computed on a leave"
    assert sim.group.state() is ConsumerGroupState.ASSIGNING
    targets = len([r for r in sim.records if r.record_type == records.TARGET_METADATA])
    sim.beat("a")
    assert sim.group.assignment_epoch == computed + 2
    assert len([r for r in sim.records if r.record_type == records.TARGET_METADATA]) == targets + 1
    sim.converge(["a", "b"])
    sim.assert_disjoint_and_complete(["a", "b"])


def test_next_deadline_follows_the_sessions_as_heartbeats_move_them():
    sim = Sim(session_timeout_ms=45_000)
    for member in "abc":
        sim.beat(member)
    sim.converge(list("abc"))    # no revocation under way: only the sessions' deadlines are left
    assert sim.group.next_deadline() == 45_000
    for now, member in ((1_000, "a"), (2_000, "b")):
        sim.now = now
        sim.beat(member)
    assert sim.group.next_deadline() == 45_000          # c's session, untouched
    sim.now = 3_000
    sim.beat("c")
    assert sim.group.next_deadline() == 46_000          # a's, moved by its heartbeat at 1 s
    sim.beat("c", epoch=-1)
    sim.beat("a", epoch=-1)
    assert sim.group.next_deadline() == 47_000


def test_session_timeout_expires_the_member_and_frees_its_partitions():
    sim = Sim(session_timeout_ms=45_000)
    sim.beat("a")
    sim.beat("b")
    sim.converge(["a", "b"])
    assert sim.group.next_deadline() == 45_000
    sim.now = 30_000
    sim.beat("a")
    sim.now = 45_000
    out = sim.group.tick(sim.now)
    assert "b" not in sim.group.members
    assert any(r.record_type == records.MEMBER_METADATA and r.value is None for r in out.records)
    sim.beat("a")
    assert len(sim.owned["a"]) == 6
    assert sim.beat("b").error is errors.UNKNOWN_MEMBER_ID


def test_rebalance_timeout_fences_a_member_that_does_not_revoke():
    sim = Sim()
    sim.beat("a", rebalance_timeout=5_000)
    sim.now = 1_000
    sim.beat("b")
    sim.beat("a")                                  # told to revoke; it never acknowledges
    assert sim.state("a") is MemberState.UNREVOKED_PARTITIONS
    sim.now = 5_999
    sim.group.tick(sim.now)
    assert "a" in sim.group.members
    sim.now = 6_000
    sim.group.tick(sim.now)
    assert "a" not in sim.group.members
    sim.beat("b")
    assert len(sim.owned["b"]) == 6


def test_epochs_fence_and_tolerate_a_lost_answer():
    sim = Sim()
    sim.beat("a")
    assert sim.beat("a", epoch=5).error is errors.FENCED_MEMBER_EPOCH
    sim.beat("b")
    sim.converge(["a", "b"])
    sim.beat("c")
    sim.converge(["a", "b", "c"])
    a = sim.group.members["a"]
    assert (a.member_epoch, a.previous_epoch) == (3, 2)
    # a retry from the previous epoch owning nothing beyond the assignment is answered normally
    assert sim.beat("a", epoch=2).error is errors.NONE
    assert sim.beat("a", epoch=2, owned=frozenset(("t", p) for p in range(6))).error is errors.FENCED_MEMBER_EPOCH
    assert sim.beat("a", epoch=1).error is errors.FENCED_MEMBER_EPOCH


def test_static_member_leaves_and_returns_without_moving_partitions():
    sim = Sim()
    sim.beat("a", instance="i-a")
    sim.beat("b")
    sim.converge(["a", "b"])
    epoch = sim.group.group_epoch
    kept = sim.owned["a"]
    assert sim.beat("a", epoch=-2, instance="i-a").member_epoch == -2
    assert sim.group.members["a"].assigned == kept               # held while it is away
    back = sim.beat("a3", epoch=0, instance="i-a")
    assert back.error is errors.NONE and back.assignment == kept and back.member_epoch == sim.epoch["b"]
    assert "a" not in sim.group.members
    assert sim.group.group_epoch == epoch                        # nothing moved
    assert sim.beat("a2", instance="i-b").error is errors.NONE   # another instance joins as usual
    assert sim.group.group_epoch == epoch + 1


def test_a_static_member_returning_to_a_changed_group_reconciles():
    sim = Sim()
    sim.beat("a", instance="i-a")
    sim.beat("b")
    sim.converge(["a", "b"])
    kept = sim.owned["a"]
    sim.beat("a", epoch=-2, instance="i-a")
    sim.beat("c")                                   # joins while a is away: the target changes
    back = sim.beat("a3", epoch=0, instance="i-a")
    assert back.member_epoch < sim.group.assignment_epoch and back.assignment < kept
    assert sim.state("a3") is MemberState.UNREVOKED_PARTITIONS
    sim.converge(["a3", "b", "c"])
    sim.assert_disjoint_and_complete(["a3", "b", "c"])


def test_a_commit_from_any_other_epoch_is_stale_never_fenced():
    """Kafka's ConsumerGroup.validateMemberEpoch (3.7 and trunk): a commit whose epoch differs from the
    member's, older or newer, gets STALE_MEMBER_EPOCH."""
    sim = Sim()
    sim.beat("a")
    epoch = sim.epoch["a"]
    assert [member_epoch_error(sim.group, "a", e) for e in (epoch - 1, epoch, epoch + 1, epoch + 5)] == [
        errors.STALE_MEMBER_EPOCH, errors.NONE, errors.STALE_MEMBER_EPOCH, errors.STALE_MEMBER_EPOCH]


def test_a_static_member_leaving_while_revoking_releases_what_it_was_revoking():
    """Kafka's consumerGroupStaticMemberGroupLeave writes the member at epoch -2 with no partitions
    pending revocation: the member that waits for them gets them without waiting for the session."""
    sim = Sim()
    sim.beat("a", instance="i-a")
    sim.beat("b")                                  # b waits for three of a's partitions
    sim.beat("a", owned=sim.owned["a"])            # a is told to revoke them
    pending = sim.group.members["a"].pending_revocation
    assert len(pending) == 3 and sim.state("b") is MemberState.UNRELEASED_PARTITIONS
    assert sim.beat("a", epoch=-2, instance="i-a").member_epoch == -2
    assert sim.group.members["a"].pending_revocation == frozenset()
    answer = sim.beat("b")
    assert answer.assignment == pending and sim.state("b") is MemberState.STABLE


def test_unreleased_instance_id_while_the_static_member_is_active():
    sim = Sim()
    sim.beat("a", instance="i-a")
    assert sim.beat("x", instance="i-a").error is errors.UNRELEASED_INSTANCE_ID


@pytest.mark.parametrize(("request_fields", "error"), [
    ({"member_epoch": 0, "rebalance_timeout_ms": -1, "subscribed_topics": ("t",)}, errors.INVALID_REQUEST),
    ({"member_epoch": 0, "rebalance_timeout_ms": 100, "subscribed_topics": None}, errors.INVALID_REQUEST),
    ({"member_epoch": -3}, errors.INVALID_REQUEST),
    ({"member_epoch": 0, "rebalance_timeout_ms": 100, "subscribed_topics": ("t",), "server_assignor": "sticky"},
     errors.UNSUPPORTED_ASSIGNOR),
    ({"member_epoch": 3}, errors.UNKNOWN_MEMBER_ID),
])
def test_refusals(request_fields, error):
    sim = Sim()
    out = sim.group.heartbeat(HeartbeatRequest(member_id="m", member_id_from_client=True, **request_fields),
                              TOPICS, 0)
    assert out.result.error is error
    assert "m" not in sim.group.members


def test_group_max_size():
    sim = Sim(max_size=2)
    sim.beat("a")
    sim.beat("b")
    assert sim.beat("c").error is errors.GROUP_MAX_SIZE_REACHED


def test_partition_growth_moves_the_group_epoch():
    sim = Sim()
    sim.beat("a")
    sim.topics["t"] = 8
    result = sim.beat("a")
    assert result.member_epoch == 2 and len(result.assignment) == 8


def test_assignor_choice_and_commit_epochs():
    sim = Sim(topics={"t": 4})
    sim.beat("a", assignor="range")
    sim.beat("b", assignor="range")
    sim.converge(["a", "b"])
    assert sim.group.assignor_name() == "range"
    assert sim.owned["a"] == {("t", 0), ("t", 1)}
    assert member_epoch_error(sim.group, "a", sim.epoch["a"]) is errors.NONE
    assert member_epoch_error(sim.group, "a", sim.epoch["a"] - 1) is errors.STALE_MEMBER_EPOCH
    assert member_epoch_error(sim.group, "a", sim.epoch["a"] + 1) is errors.STALE_MEMBER_EPOCH
    assert member_epoch_error(sim.group, "zz", 1) is errors.UNKNOWN_MEMBER_ID


def test_uniform_is_sticky_and_balanced():
    subs = {m: frozenset({"t"}) for m in "abc"}
    first = uniform(subs, {"t": 7}, {})
    assert sorted(len(p) for p in first.values()) == [2, 2, 3]
    subs["d"] = frozenset({"t"})
    second = uniform(subs, {"t": 7}, first)
    moved = sum(len(first[m] - second[m]) for m in "abc")
    assert moved == 1 and sorted(len(p) for p in second.values()) == [1, 2, 2, 2]


def test_range_splits_each_topic_in_member_order():
    subs = {"b": frozenset({"t"}), "a": frozenset({"t", "u"})}
    result = range_(subs, {"t": 3, "u": 2}, {})
    assert result["a"] == {("t", 0), ("t", 1), ("u", 0), ("u", 1)}
    assert result["b"] == {("t", 2)}


def test_records_replay_into_the_same_group():
    from modern.coordinator.records.consumer_group import encode, is_consumer_group_record
    from modern.coordinator.replay import replay_consumer_groups
    from rebalance.topic_ids import topic_id

    sim = Sim(topics={"t": 6, "u": 2})
    sim.beat("a", instance="i-a")
    sim.beat("b", subscribe=("t", "u"), assignor="range")
    sim.beat("a")                                   # a is now revoking: UNREVOKED_PARTITIONS
    sim.beat("c", epoch=0)
    sim.beat("c", epoch=-1)                         # gone again: its records are tombstones
    stored = [encode(record, topic_id) for record in sim.records]
    assert all(is_consumer_group_record(key) for key, _ in stored)
    restored = replay_consumer_groups(stored, sim.topics, topic_id, sim.group.config, now_ms=1_000)["g"]
    original = sim.group
    assert (restored.group_epoch, restored.assignment_epoch) == (original.group_epoch, original.assignment_epoch)
    assert restored.members == original.members
    assert restored.target == {m: p for m, p in original.target.items()}
    assert restored.owners == original.owners
    assert restored.partition_counts == original.partition_counts
    assert restored.session_deadlines == {m: 1_000 + 45_000 for m in original.members}
    assert set(restored.rebalance_deadlines) == {"a"}


@pytest.mark.parametrize("seed", range(20))
def test_assignors_give_every_subscribed_partition_to_exactly_one_subscriber(seed):
    import random

    rng = random.Random(seed)
    topics = {name: rng.randint(1, 7) for name in "tuvw"}
    subs = {f"m{i}": frozenset(rng.sample(sorted(topics), rng.randint(1, 3))) for i in range(rng.randint(1, 6))}
    previous = uniform(subs, topics, {})
    subs.pop(sorted(subs)[0])
    subs["late"] = frozenset(rng.sample(sorted(topics), 2))
    for assignor in (uniform, range_):
        result = assignor(subs, topics, previous)
        owners = [tp for owned in result.values() for tp in owned]
        wanted = {(t, p) for t, count in topics.items() if any(t in s for s in subs.values()) for p in range(count)}
        assert len(owners) == len(set(owners)) and set(owners) == wanted
        assert all(tp[0] in subs[m] for m, owned in result.items() for tp in owned)
    identical = {m: frozenset({"t"}) for m in subs}
    sizes = [len(p) for p in uniform(identical, topics, previous).values()]
    assert max(sizes) - min(sizes) <= 1
