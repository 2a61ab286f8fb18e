"""The worked examples of seed 001 and seed 002 (scenario 1), bad input, and the registry."""

import pytest

from rebalance.assignors import (
    ASSIGNOR_NAMES,
    Assignor,
    RebalanceProtocol,
    cooperative_rounds,
    get_assignor,
)
from rebalance.assignors.movement import SCENARIO_STRATEGIES, scale_movement
from rebalance.types import Subscription, TopicPartition


def tps(text: str) -> set[TopicPartition]:
    """"t0p0 t1p2" -> {t0-0, t1-2}, the seed's own notation."""
    result = set()
    for word in text.split():
        topic, _, number = word.rpartition("p")
        result.add(TopicPartition(topic, int(number)))
    return result


def run(strategy, topics, subscriptions):
    return {m: set(a.partitions) for m, a in get_assignor(strategy).assign(topics, subscriptions).items()}


def same_topics(*members, topics):
    return {m: Subscription(tuple(topics)) for m in members}


# --- seed 001 ---------------------------------------------------------------------------------

def test_range_two_members_four_partitions_each():
    result = run("range", {"t0": 4, "t1": 4}, same_topics("C0", "C1", topics=["t0", "t1"]))
    assert result == {"C0": tps("t0p0 t0p1 t1p0 t1p1"), "C1": tps("t0p2 t0p3 t1p2 t1p3")}


def test_range_three_partitions_each_favours_the_first_member_per_topic():
    result = run("range", {"t0": 3, "t1": 3}, same_topics("C0", "C1", topics=["t0", "t1"]))
    assert result == {"C0": tps("t0p0 t0p1 t1p0 t1p1"), "C1": tps("t0p2 t1p2")}


def test_roundrobin_identical_subscriptions():
    result = run("roundrobin", {"t0": 3, "t1": 3}, same_topics("C0", "C1", topics=["t0", "t1"]))
    assert result == {"C0": tps("t0p0 t0p2 t1p1"), "C1": tps("t0p1 t1p0 t1p2")}


def test_roundrobin_unequal_subscriptions_is_lopsided():
    subs = {"C0": Subscription(("t0",)), "C1": Subscription(("t0", "t1")), "C2": Subscription(("t0", "t1", "t2"))}
    result = run("roundrobin", {"t0": 1, "t1": 2, "t2": 3}, subs)
    assert result == {"C0": tps("t0p0"), "C1": tps("t1p0"), "C2": tps("t1p1 t2p0 t2p1 t2p2")}


STICKY_TOPICS = {"t0": 2, "t1": 2, "t2": 2, "t3": 2}
STICKY_FIRST = {"C0": tps("t0p0 t1p1 t3p0"), "C1": tps("t0p1 t2p0 t3p1"), "C2": tps("t1p0 t2p1")}


def test_sticky_first_assignment():
    result = run("sticky", STICKY_TOPICS, same_topics("C0", "C1", "C2", topics=STICKY_TOPICS))
    assert result == STICKY_FIRST


def test_sticky_after_a_member_leaves_keeps_every_placement():
    subs = {m: Subscription(tuple(STICKY_TOPICS), tuple(sorted(STICKY_FIRST[m])), 1) for m in ("C0", "C2")}
    result = run("sticky", STICKY_TOPICS, subs)
    assert result["C0"] >= STICKY_FIRST["C0"] and result["C2"] >= STICKY_FIRST["C2"]
    assert result["C0"] | result["C2"] == tps("t0p0 t0p1 t1p0 t1p1 t2p0 t2p1 t3p0 t3p1")
    assert len(result["C0"]) == len(result["C2"]) == 4
    # roundrobin, by contrast, deals everything again (the seed's counter-example)
    rr = run("roundrobin", STICKY_TOPICS, same_topics("C0", "C2", topics=STICKY_TOPICS))
    assert rr == {"C0": tps("t0p0 t1p0 t2p0 t3p0"), "C2": tps("t0p1 t1p1 t2p1 t3p1")}


# --- seed 002, scenario 1: 10 partitions, 4 -> 5 members ----------------------------------------

@pytest.mark.parametrize(
    ("strategy", "moved"),
    [("range", 7), ("roundrobin", 6), ("sticky", 2), ("cooperative-sticky", 2), ("optimal", 2)],
)
def test_seed_002_scenario_1_partitions_moved(strategy, moved):
    movement = scale_movement(strategy, partitions=10, before=4, after=5)
    assert len(movement.changes) == moved
    assert all(len(movement.after[m]) == 2 for m in movement.after)


def test_seed_002_cooperative_moves_over_two_rounds_and_nothing_lands_early():
    movement = scale_movement("cooperative-sticky", partitions=10, before=4, after=5)
    first, second = movement.rounds
    assert first["C5"] == ()                       # round 1 only revokes
    assert sum(len(v) for v in first.values()) == 8
    assert set(second["C5"]) == {c.partition for c in movement.changes}


def test_scenario_strategies_are_the_seed_table():
    assert SCENARIO_STRATEGIES == ("range", "roundrobin", "sticky", "cooperative-sticky", "optimal")


# --- bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("strategy", ASSIGNOR_NAMES + ("legacy-range", "legacy-roundrobin"))
@pytest.mark.parametrize(
    ("topics", "subs", "message"),
    [
        ({"t0": 1}, {}, "no members"),
        ({"t0": -1}, {"C0": Subscription(("t0",))}, "negative partition count"),
        ({"t0": 1}, {"C0": Subscription(("t9",))}, "unknown topic 't9'"),
        ({"t0": 1}, {"C0": Subscription(("t0",), (TopicPartition("t0", 3),))}, "t0-3, which does not exist"),
        ({"t0": 1}, {"C0": Subscription(("t0",), (TopicPartition("zz", 0),))}, "zz-0, which does not exist"),
    ],
)
def test_bad_input_names_the_problem(strategy, topics, subs, message):
    with pytest.raises(ValueError, match=message):
        get_assignor(strategy).assign(topics, subs)


def test_two_members_with_one_instance_id_is_rejected():
    subs = {m: Subscription(("t0",), group_instance_id="same") for m in ("a", "b")}
    with pytest.raises(ValueError, match="share instance id"):
        get_assignor("range").assign({"t0": 2}, subs)


def test_every_member_is_present_even_with_nothing():
    subs = {"C0": Subscription(("t0",)), "C1": Subscription(("t0",)), "C2": Subscription(())}
    for name in ASSIGNOR_NAMES:
        result = get_assignor(name).assign({"t0": 1}, subs)
        assert set(result) == {"C0", "C1", "C2"}
        assert result["C2"].partitions == ()


# --- registry --------------------------------------------------------------------------------

def test_wire_names_and_protocols():
    for name in ASSIGNOR_NAMES:
        assignor = get_assignor(name)
        assert assignor.name == name
        expected = "cooperative" if name == "cooperative-sticky" else "eager"
        assert assignor.rebalance_protocol == expected
        assert assignor.rebalance_protocol in (RebalanceProtocol.EAGER, RebalanceProtocol.COOPERATIVE)


class EverythingToTheFirst(Assignor):
    """A custom assignor for the import-path test: everything goes to the first member in Kafka order."""

    name = "everything-to-first"

    def plan(self, group):
        return {group.members[0]: group.all_partitions}


def test_custom_assignor_by_import_path():
    assignor = get_assignor(f"{__name__}:EverythingToTheFirst")
    assert assignor.name == "everything-to-first"
    subs = {"b": Subscription(("t0",)), "a": Subscription(("t0",), group_instance_id="i")}
    result = assignor.assign({"t0": 2}, subs)
    assert result["a"].partitions == (TopicPartition("t0", 0), TopicPartition("t0", 1))  # static sorts first
    assert result["b"].partitions == ()


@pytest.mark.parametrize(
    ("name", "message"),
    [("nope", "unknown assignor"), ("no_such_module_x:Thing", "cannot import"), (f"{__name__}:Missing", "has no")],
)
def test_bad_assignor_names(name, message):
    with pytest.raises(ValueError, match=message):
        get_assignor(name)


def test_cooperative_rounds_settle_in_one_round_when_nothing_moves():
    subs = same_topics("C0", "C1", topics=["t0"])
    assert len(cooperative_rounds({"t0": 4}, subs)) == 1


def test_optimal_refuses_a_network_beyond_its_limit_quickly():
    subs = {f"m{i:05d}": Subscription(("t0",)) for i in range(8000)}
    with pytest.raises(ValueError, match="too large for the optimal solver"):
        get_assignor("optimal").assign({"t0": 8000}, subs)


class GivesEverythingTwice(Assignor):
    name = "broken"

    def plan(self, group):
        return {m: group.all_partitions for m in group.members}


def test_a_broken_custom_assignor_is_caught():
    subs = {"a": Subscription(("t0",)), "b": Subscription(("t0",))}
    with pytest.raises(ValueError, match="assigned t0-0 twice"):
        get_assignor(f"{__name__}:GivesEverythingTwice").assign({"t0": 1}, subs)
