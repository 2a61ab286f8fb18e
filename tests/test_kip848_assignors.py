"""The KIP-848 server-side assignors against Kafka's own unit tests, Java's iteration orders and
Kafka's movement figures.

Ported cases come from Kafka's group-coordinator module (package ...coordinator.group.assignor):
the homogeneous builder's tests (Kafka 4.0: `OptimizedUniformAssignmentBuilderTest`, later renamed
`UniformHomogeneousAssignmentBuilderTest`, whose expectations changed with KAFKA-18688 in 4.1),
`UniformHeterogeneousAssignmentBuilderTest`, `CommonAssignorTests` and `RangeAssignorTest`. They use
Kafka's test topic ids, so the lab walks topics in the same order as the JVM did; member ids A, B, C
come out of a Java HashMap in that order, the order Kafka's tests give them explicitly.
"""

from __future__ import annotations

import base64
import dataclasses
import itertools
import random
import uuid

import pytest

from modern.coordinator.assignors import ASSIGNORS, DEFAULT_ASSIGNOR, range_
from modern.coordinator.java_order import (
    java_order,
    member_map_order,
    partition_set_order,
    table_size_after_puts,
    table_size_for_copy,
    uuid_hashcode,
    uuid_sort_key,
)
from modern.coordinator.uniform import (
    _Group,
    _homogeneous,
    _quotas_in_walk_order,
    _quotas_kept_by_holders,
    uniform,
    uniform_41,
    uniform_heterogeneous,
)


def kafka_uuid(text: str) -> uuid.UUID:
    """Kafka's `Uuid.fromString`: url-safe base64 of the 16 bytes, without padding."""
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


# The topic ids of Kafka's assignor tests.
TOPIC_IDS = {
    "topic1": kafka_uuid("T1-A4s3VTwiI5CTbEp6POw"),
    "topic2": kafka_uuid("T2-B4s3VTwiI5YHbPp6YUe"),
    "topic3": kafka_uuid("T3-CU8fVTLCz5YMkLoDQsa"),
    "topic4": kafka_uuid("T4-Tw9fVTLCz5HbPp6YQsa"),
}
TID = TOPIC_IDS.__getitem__


def parts(**topics: list[int]) -> frozenset[tuple[str, int]]:
    return frozenset((topic, p) for topic, ps in topics.items() for p in ps)


def subs(*topics: str) -> frozenset[str]:
    return frozenset(topics)


def check_valid_and_balanced(subscriptions, counts, result) -> None:
    """Kafka's checkValidityAndBalance: each member only gets topics it subscribes to, no partition
    twice, every subscribed partition once, and sizes differ by one at most."""
    owned = [tp for m in result for tp in result[m]]
    assert len(owned) == len(set(owned))
    assert all(t in subscriptions[m] for m in result for t, _ in result[m])
    wanted = {(t, p) for t in counts if any(t in s for s in subscriptions.values()) for p in range(counts[t])}
    assert set(owned) == wanted
    sizes = [len(result[m]) for m in result]
    assert max(sizes) - min(sizes) <= 1


# ---------------------------------------------------------------- Java's iteration orders, as the JVM printed them


def test_member_map_order_is_javas_hashmap_order():
    # Java 17: `new HashMap<>()`, put in this order, then keySet() printed.
    assert member_map_order([f"member-{i}" for i in range(1, 14)]) == [
        "member-5", "member-6", "member-3", "member-13", "member-4", "member-12", "member-9", "member-11",
        "member-10", "member-7", "member-8", "member-1", "member-2"]
    assert member_map_order(["C1", "C2", "C3", "C4", "C5"]) == ["C3", "C4", "C5", "C1", "C2"]
    ids = ["4b1a0c9e-5c1f-4f3e-9a57-1f0e6f4c2d11", "0f3c5e7a-2b4d-4c6e-8a0b-9d1f3e5a7c92",
           "d2e4f6a8-1b3c-4d5e-9f70-8a1b2c3d4e5f", "77c1e2d3-4f5a-4b6c-8d9e-0a1b2c3d4e5f"]
    assert member_map_order(ids) == [ids[1], ids[0], ids[2], ids[3]]
    assert member_map_order(["A", "B", "C"]) == ["A", "B", "C"]  # why Kafka's tests can use TreeMaps


def test_partition_set_order_is_javas_hashset_order():
    assert partition_set_order([3, 17, 40, 5, 16]) == [16, 17, 3, 5, 40]   # `new HashSet<>(List.of(...))`
    assert partition_set_order([2, 0, 1]) == [0, 1, 2]


def test_table_sizes():
    assert [table_size_after_puts(n) for n in (0, 12, 13, 24, 25, 48, 49, 96, 97)] == [
        16, 16, 32, 32, 64, 64, 128, 128, 256]
    assert [table_size_for_copy(n) for n in (1, 12, 13, 24, 25)] == [16, 16, 32, 32, 64]


def test_kafka_uuid_hash_and_order():
    # Kafka's tests rely on these orders: topic3 before topic1 and topic2 before topic1 in a set.
    assert java_order(["topic1", "topic3"], lambda t: uuid_hashcode(TID(t)), 16) == ["topic3", "topic1"]
    assert java_order(["topic1", "topic2"], lambda t: uuid_hashcode(TID(t)), 16) == ["topic2", "topic1"]
    assert sorted(TOPIC_IDS, key=lambda t: uuid_sort_key(TID(t))) == ["topic1", "topic2", "topic3", "topic4"]
    assert uuid_sort_key(uuid.UUID(int=1 << 127)) < uuid_sort_key(uuid.UUID(int=1))  # signed, as Java compares


# ---------------------------------------------------------------- homogeneous, Kafka 4.0


def test_homogeneous_one_member_no_topic_subscription():
    assert uniform({"A": subs()}, {"topic1": 3}, {}, topic_id=TID) == {"A": frozenset()}


def test_homogeneous_one_member_subscribed_to_nonexistent_topic():
    # Kafka's builder throws here; its coordinator never gets that far, because it resolves topic
    # names to existing topic ids first. The lab's assignors get names, and skip the missing ones.
    assert uniform({"A": subs("topic2")}, {"topic1": 3}, {}, topic_id=TID) == {"A": frozenset()}


@pytest.mark.parametrize(("assignor", "expected"), [
    (uniform, {"A": parts(topic1=[0], topic3=[0, 1]), "B": parts(topic1=[1, 2])}),
    (uniform_41, {"A": parts(topic3=[0, 1]), "B": parts(topic1=[0, 1, 2])}),
])
def test_homogeneous_first_assignment_two_members_two_topics(assignor, expected):
    members = {"A": subs("topic1", "topic3"), "B": subs("topic1", "topic3")}
    result = assignor(members, {"topic1": 3, "topic3": 2}, {}, topic_id=TID)
    assert result == expected
    check_valid_and_balanced(members, {"topic1": 3, "topic3": 2}, result)


@pytest.mark.parametrize(("assignor", "expected"), [
    (uniform, {"A": parts(topic3=[0]), "B": parts(topic3=[1]), "C": frozenset()}),
    (uniform_41, {"A": frozenset(), "B": parts(topic3=[0]), "C": parts(topic3=[1])}),
])
def test_homogeneous_more_members_than_partitions(assignor, expected):
    members = {m: subs("topic3") for m in "ABC"}
    assert assignor(members, {"topic3": 2}, {}, topic_id=TID) == expected


@pytest.mark.parametrize("assignor", [uniform, uniform_41])
def test_homogeneous_validity_and_balance_for_a_large_sample(assignor):
    rng = random.Random(1)
    ids = {f"topic-{i}": uuid.UUID(int=rng.getrandbits(128)) for i in range(1, 101)}
    counts = dict.fromkeys(ids, 3)
    members = {f"member{i}": frozenset(ids) for i in range(1, 50)}
    check_valid_and_balanced(members, counts, assignor(members, counts, {}, topic_id=ids.__getitem__))


@pytest.mark.parametrize("assignor", [uniform, uniform_41])
def test_homogeneous_unbalanced_previous_assignment(assignor):
    # Upstream hands A its topics in written order (an insertion-ordered map: topic1, then topic2)
    # and expects A to give up topic2-1. The coordinator itself rebuilds a member's target as a
    # HashMap, where topic2 comes first; the lab follows the coordinator, so A keeps topic2 whole
    # and gives up topic1-1. Same counts, same balance: one partition moves from A to B.
    members = {"A": subs("topic1", "topic2"), "B": subs("topic1", "topic2")}
    previous = {"A": parts(topic1=[0, 1], topic2=[0, 1]), "B": parts(topic1=[2], topic2=[2])}
    result = assignor(members, {"topic1": 3, "topic2": 3}, previous, topic_id=TID)
    assert result == {"A": parts(topic1=[0], topic2=[0, 1]), "B": parts(topic1=[1, 2], topic2=[2])}
    assert len(previous["A"] - result["A"]) == 1 and previous["B"] <= result["B"]
    check_valid_and_balanced(members, {"topic1": 3, "topic2": 3}, result)


@pytest.mark.parametrize(("assignor", "expected"), [
    (uniform, {"A": parts(topic1=[0, 2, 3], topic2=[0, 3, 4]), "B": parts(topic1=[1, 4, 5], topic2=[1, 2])}),
    (uniform_41, {"A": parts(topic1=[0, 2], topic2=[0, 3, 4]), "B": parts(topic1=[1, 3, 4, 5], topic2=[1, 2])}),
])
def test_homogeneous_partitions_added(assignor, expected):
    members = {"A": subs("topic1", "topic2"), "B": subs("topic1", "topic2")}
    previous = {"A": parts(topic1=[0, 2], topic2=[0]), "B": parts(topic1=[1], topic2=[1, 2])}
    result = assignor(members, {"topic1": 6, "topic2": 5}, previous, topic_id=TID)
    assert result == expected
    check_valid_and_balanced(members, {"topic1": 6, "topic2": 5}, result)


@pytest.mark.parametrize("assignor", [uniform, uniform_41])
def test_homogeneous_one_member_added(assignor):
    # Upstream again gives A and B their topics in written order and expects C to get topic2-0 and
    # topic2-2. In the coordinator's order (topic2 first) A and B give up a topic1 partition
    # instead: C still gets one from each, and nobody else moves.
    members = {m: subs("topic1", "topic2") for m in "ABC"}
    previous = {"A": parts(topic1=[0, 2], topic2=[0]), "B": parts(topic1=[1], topic2=[1, 2])}
    result = assignor(members, {"topic1": 3, "topic2": 3}, previous, topic_id=TID)
    assert result == {"A": parts(topic1=[0], topic2=[0]), "B": parts(topic2=[1, 2]), "C": parts(topic1=[1, 2])}
    assert all(len(previous[m] - result[m]) == 1 and result[m] <= previous[m] for m in "AB")
    check_valid_and_balanced(members, {"topic1": 3, "topic2": 3}, result)


@pytest.mark.parametrize("assignor", [uniform, uniform_41])
def test_homogeneous_one_member_removed(assignor):
    members = {"A": subs("topic1", "topic2"), "B": subs("topic1", "topic2")}
    previous = {"A": parts(topic1=[0], topic2=[0]), "B": parts(topic1=[1], topic2=[1])}  # C held the rest
    result = assignor(members, {"topic1": 3, "topic2": 3}, previous, topic_id=TID)
    assert result == {"A": parts(topic1=[0], topic2=[0, 2]), "B": parts(topic1=[1, 2], topic2=[1])}


@pytest.mark.parametrize("assignor", [uniform, uniform_41])
def test_homogeneous_one_subscription_removed(assignor):
    members = {"A": subs("topic2"), "B": subs("topic2")}
    previous = {"A": parts(topic1=[0], topic2=[0]), "B": parts(topic1=[1], topic2=[1])}
    result = assignor(members, {"topic1": 2, "topic2": 2}, previous, topic_id=TID)
    assert result == {"A": parts(topic2=[0]), "B": parts(topic2=[1])}


def _in_walk_order(order, subscriptions, counts, previous, policy):
    """The homogeneous builder with the member walk forced to `order` (as Kafka's tests do with a
    LinkedHashMap)."""
    group = dataclasses.replace(_Group.of(subscriptions, counts, previous, TID), members=tuple(order))
    return group.result(_homogeneous(group, policy))


def test_kafka_41_is_stable_whatever_the_member_order():
    # CommonAssignorTests.testReassignmentStickiness (Kafka 4.2's tests, run on 4.1's builder):
    # a second computation from the first one's result changes nothing, in every member order.
    members = {m: subs("topic1", "topic2", "topic3") for m in "ABC"}
    counts = {"topic1": 2, "topic2": 5, "topic3": 7}
    first = uniform_41(members, counts, {}, topic_id=TID)
    for order in itertools.permutations("ABC"):
        assert _in_walk_order(order, members, counts, first, _quotas_kept_by_holders) == first


def test_kafka_40_moves_partitions_when_only_the_member_order_changes():
    # The same test fails on Kafka 4.0's builder, which is what KAFKA-18688 fixed: the extra
    # partition belongs to whoever comes first in the walk, not to whoever holds it.
    members = {m: subs("topic1", "topic2", "topic3") for m in "ABC"}
    counts = {"topic1": 2, "topic2": 5, "topic3": 7}
    first = uniform(members, counts, {}, topic_id=TID)
    again = [_in_walk_order(order, members, counts, first, _quotas_in_walk_order)
             for order in itertools.permutations("ABC")]
    assert again[0] == first and any(result != first for result in again)


# ---------------------------------------------------------------- heterogeneous (the same in 4.0 and 4.1)


@pytest.mark.parametrize("assignor", [uniform, uniform_41])
def test_heterogeneous_cases_from_kafka(assignor):
    def run(members, counts, previous=None):
        return assignor(members, counts, previous or {}, topic_id=TID)

    # two members, no topic subscription / only topics that do not exist (Kafka throws, see above)
    assert run({"A": subs(), "B": subs("topic2")}, {"topic1": 3}) == {"A": frozenset(), "B": frozenset()}
    # first assignment, two members two topics
    assert run({"A": subs("topic1", "topic3"), "B": subs("topic3")}, {"topic1": 3, "topic3": 6}) == {
        "A": parts(topic1=[0, 1, 2], topic3=[4]), "B": parts(topic3=[0, 1, 2, 3, 5])}
    # more members than partitions
    assert run({"A": subs("topic3"), "B": subs("topic3"), "C": subs("topic1")}, {"topic3": 1, "topic1": 2}) == {
        "A": parts(topic3=[0]), "B": frozenset(), "C": parts(topic1=[0, 1])}
    # two members, three topics, unbalanced previous assignment
    assert run({"A": subs("topic1"), "B": subs("topic1", "topic2"), "C": subs("topic1", "topic2", "topic3")},
               {"topic1": 6, "topic2": 4, "topic3": 4},
               {"A": parts(topic1=[0, 1, 2]), "B": parts(topic1=[3], topic2=[0]),
                "C": parts(topic1=[4, 5], topic2=[1, 2, 3], topic3=[0, 1, 2, 3])}) == {
        "A": parts(topic1=[0, 1, 2, 5]), "B": parts(topic1=[3], topic2=[0, 1, 2, 3]),
        "C": parts(topic1=[4], topic3=[0, 1, 2, 3])}
    # partitions added
    assert run({"A": subs("topic1", "topic3"), "B": subs("topic1", "topic2", "topic3", "topic4")},
               {"topic1": 6, "topic2": 5, "topic3": 3, "topic4": 3},
               {"A": parts(topic1=[0, 1, 2, 3], topic3=[0, 1]), "B": parts(topic2=[0, 1, 2], topic4=[0, 1, 2])}) == {
        "A": parts(topic1=[0, 1, 2, 3, 4, 5], topic3=[0, 1, 2]), "B": parts(topic2=[0, 1, 2, 3, 4], topic4=[0, 1, 2])}
    # one member added and partitions added
    assert run({"A": subs("topic1"), "B": subs("topic1", "topic2"), "C": subs("topic1", "topic2")},
               {"topic1": 6, "topic2": 7},
               {"A": parts(topic1=[0, 2], topic2=[0]), "B": parts(topic1=[1], topic2=[1, 2])}) == {
        "A": parts(topic1=[0, 2, 3, 4, 5]), "B": parts(topic1=[1], topic2=[1, 2, 6]),
        "C": parts(topic2=[0, 3, 4, 5])}
    # one member removed, three topics
    assert run({"A": subs("topic1", "topic3"), "B": subs("topic2")}, {"topic1": 3, "topic2": 8, "topic3": 3},
               {"A": parts(topic1=[0, 1, 2], topic3=[0, 1]), "B": parts(topic2=[3, 4, 5, 6])}) == {
        "A": parts(topic1=[0, 1, 2], topic3=[0, 1, 2]), "B": parts(topic2=range(8))}
    # one subscription removed
    assert run({"A": subs("topic1"), "B": subs("topic1", "topic2")}, {"topic1": 3, "topic2": 5},
               {"A": parts(topic1=[0, 2], topic2=[1, 3]), "B": parts(topic1=[1], topic2=[0, 2, 4])}) == {
        "A": parts(topic1=[0, 1, 2]), "B": parts(topic2=[0, 1, 2, 3, 4])}
    # a member without subscriptions
    assert run({"A": subs("topic1"), "B": subs()}, {"topic1": 3}) == {"A": parts(topic1=[0, 1, 2]), "B": frozenset()}


def test_heterogeneous_when_partitions_run_out_before_the_topic_is_balanced():
    # Kafka declares this group heterogeneous although both members subscribe to the same topics,
    # to drive the balancing loop into a topic whose least loaded members hold none of it.
    members = {m: subs("topic1", "topic2", "topic3") for m in "AB"}
    previous = {"A": parts(topic1=[0, 1], topic2=[0, 1], topic3=[0, 1])}
    result = uniform_heterogeneous(members, {"topic1": 2, "topic2": 2, "topic3": 2}, previous, topic_id=TID)
    assert result == {"A": parts(topic2=[0], topic3=[0, 1]), "B": parts(topic1=[0, 1], topic2=[1])}


@pytest.mark.parametrize("seed", range(30))
def test_heterogeneous_properties_on_random_groups(seed):
    """Every subscribed partition goes to exactly one subscriber; members that share exactly the
    same topics with nobody else end balanced within one; and a target computed again from itself
    (same members) stays as it is."""
    rng = random.Random(seed)
    counts = {name: rng.randint(1, 9) for name in ("t", "u", "v", "w")}
    members = {f"m{i}": frozenset(rng.sample(sorted(counts), rng.randint(1, 3))) for i in range(rng.randint(2, 7))}
    previous = uniform(members, counts, {})
    members.pop(sorted(members)[0])
    members["late"] = frozenset(rng.sample(sorted(counts), 2))
    result = uniform(members, counts, previous)
    owned = [tp for m in result for tp in result[m]]
    wanted = {(t, p) for t in counts if any(t in s for s in members.values()) for p in range(counts[t])}
    assert len(owned) == len(set(owned)) and set(owned) == wanted
    assert all(t in members[m] for m in result for t, _ in result[m])
    for topics in set(members.values()):
        if all(members[m] == topics for m in members if members[m] & topics):
            sizes = [len(result[m]) for m in members if members[m] == topics]
            assert max(sizes) - min(sizes) <= 1
    assert uniform(members, counts, result) == result


# ---------------------------------------------------------------- movement when one member joins a balanced group


def join_movement(assignor, partitions: int, members: int, trials: int, seed: int) -> float:
    """Mean partitions that change owner when one member joins a group balanced by the same
    assignor; member ids are random UUID strings, as the coordinator generates them."""
    rng = random.Random(seed)
    moved = 0
    for _ in range(trials):
        ids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(members + 1)]
        group = {m: frozenset({"t"}) for m in ids[:members]}
        before = assignor(group, {"t": partitions}, {})
        group[ids[-1]] = frozenset({"t"})   # the newcomer joins last, as Kafka puts it into the map
        after = assignor(group, {"t": partitions}, before)
        moved += sum(len(before[m] - after[m]) for m in before)
    return moved / trials


# (partitions, members, Kafka 4.0's mean over 200 trials as measured with a port of its algorithm)
KAFKA_40_JOIN_MOVES = [(50, 25, 1.90), (50, 50, 0.98), (50, 100, 0.49), (100, 50, 1.95)]


@pytest.mark.parametrize(("partitions", "members", "kafka"), KAFKA_40_JOIN_MOVES)
def test_uniform_moves_what_kafka_40_moves_when_a_member_joins(partitions, members, kafka):
    lab = join_movement(uniform, partitions, members, trials=200, seed=848)
    print(f"uniform P={partitions} N={members}: {lab:.3f} moved per join (Kafka 4.0: {kafka}, n = 200)")
    assert lab == pytest.approx(kafka, rel=0.10)


@pytest.mark.parametrize(("partitions", "members", "moved"), [(50, 25, 1), (50, 50, 0), (50, 100, 0), (100, 50, 1)])
def test_uniform_41_moves_only_what_the_newcomer_needs(partitions, members, moved):
    assert join_movement(uniform_41, partitions, members, trials=50, seed=848) == moved


# ---------------------------------------------------------------- range (KAFKA-16944): from scratch, static members first


def test_range_cases_from_kafka():
    same = {"A": subs("topic1", "topic3"), "B": subs("topic1", "topic3")}
    assert range_(same, {"topic1": 3, "topic3": 2}, {}) == {
        "A": parts(topic1=[0, 1], topic3=[0]), "B": parts(topic1=[2], topic3=[1])}
    assert range_({"A": subs("topic1", "topic2"), "B": subs("topic3"), "C": subs("topic2", "topic3")},
                  {"topic1": 3, "topic2": 3, "topic3": 2}, {}) == {
        "A": parts(topic1=[0, 1, 2], topic2=[0, 1]), "B": parts(topic3=[0]), "C": parts(topic2=[2], topic3=[1])}
    assert range_({m: subs("topic1", "topic3") for m in "ABC"}, {"topic1": 3, "topic3": 2}, {}) == {
        "A": parts(topic1=[0], topic3=[0]), "B": parts(topic1=[1], topic3=[1]), "C": parts(topic1=[2])}
    # ranges are recomputed, whatever the previous target: nothing is kept for its own sake
    two = {m: subs("topic1", "topic2") for m in "ABC"}
    previous = {"A": parts(topic1=[0, 1], topic2=[0, 1]), "B": parts(topic1=[2], topic2=[2])}
    assert range_(two, {"topic1": 3, "topic2": 3}, previous) == {
        "A": parts(topic1=[0], topic2=[0]), "B": parts(topic1=[1], topic2=[1]), "C": parts(topic1=[2], topic2=[2])}
    assert range_({"A": subs("topic1", "topic2"), "B": subs("topic1", "topic2"), "C": subs("topic1")},
                  {"topic1": 4, "topic2": 3}, previous) == {
        "A": parts(topic1=[0, 1], topic2=[0, 1]), "B": parts(topic1=[2], topic2=[2]), "C": parts(topic1=[3])}
    assert range_({"A": subs("topic1"), "B": subs("topic1", "topic2", "topic3"), "C": subs("topic2")},
                  {"topic1": 3, "topic2": 3, "topic3": 2}, {}) == {
        "A": parts(topic1=[0, 1]), "B": parts(topic1=[2], topic2=[0, 1], topic3=[0, 1]), "C": parts(topic2=[2])}


def test_range_static_members_keep_their_ranges_under_a_new_member_id():
    first = range_({"A": subs("topic1"), "B": subs("topic1")}, {"topic1": 3}, {},
                   instance_ids={"A": "instanceA", "B": "instanceB"})
    again = range_({"B": subs("topic1"), "memberA1": subs("topic1")}, {"topic1": 3}, first,
                   instance_ids={"memberA1": "instanceA", "B": "instanceB"})
    assert again["memberA1"] == first["A"] and again["B"] == first["B"]


def test_range_mixed_static_membership():
    instance_ids = {"A": "instanceA", "C": "instanceC"}
    members = {"A": subs("topic1"), "C": subs("topic1"), "B": subs("topic1")}
    first = range_(members, {"topic1": 5}, {}, instance_ids=instance_ids)
    assert first == {"A": parts(topic1=[0, 1]), "C": parts(topic1=[2, 3]), "B": parts(topic1=[4])}
    members = {"C": subs("topic1"), "B": subs("topic1"), "memberA1": subs("topic1")}
    again = range_(members, {"topic1": 5}, first, instance_ids={"memberA1": "instanceA", "C": "instanceC"})
    assert (again["memberA1"], again["B"], again["C"]) == (first["A"], first["B"], first["C"])


def test_the_group_hands_range_its_static_members():
    from tests.test_kip848_group import Sim

    sim = Sim()
    sim.beat("a", assignor="range")
    sim.beat("b", assignor="range", instance="i-b")
    sim.converge(["a", "b"])
    assert sim.group.target == {"b": parts(t=[0, 1, 2]), "a": parts(t=[3, 4, 5])}


# ---------------------------------------------------------------- the registry


def test_registry_names_and_the_default():
    assert DEFAULT_ASSIGNOR == "uniform" and list(ASSIGNORS) == ["uniform", "range", "uniform-4.1"]
    assert ASSIGNORS["uniform"] is uniform and ASSIGNORS["uniform-4.1"] is uniform_41


def test_a_partition_in_two_previous_targets_is_refused():
    with pytest.raises(ValueError, match="previous target of both 'A' and 'B'"):
        uniform({"A": subs("t"), "B": subs("t")}, {"t": 2}, {"A": parts(t=[0]), "B": parts(t=[0, 1])})


def test_partitions_that_no_longer_exist_are_left_out():
    result = uniform({"A": subs("t")}, {"t": 2}, {"A": parts(t=[0, 5], gone=[0])})
    assert result == {"A": parts(t=[0, 1])}
