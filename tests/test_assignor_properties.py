"""Property tests over random groups: validity, balance, stickiness against the optimal baseline,
cooperative safety and convergence, and independence from input order."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rebalance.assignors import cooperative_rounds, get_assignor, solve_optimal
from rebalance.assignors.base import Group
from rebalance.assignors.checks import balance_errors, moves, spread, validity_errors
from rebalance.assignors.legacy import legacy_range, legacy_roundrobin
from rebalance.types import Subscription, TopicPartition

EXAMPLES = 200
SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
EAGER = ("range", "roundrobin", "sticky", "optimal")


@st.composite
def groups(draw, identical: bool | None = None, with_history: bool = True):
    """(partitions per topic, subscriptions, previous owners) for a random group.

    The history is a previous assignment of a random earlier membership (some members
    gone, some new), as a real group would report it: unique claims, one generation.
    """
    topic_count = draw(st.integers(1, 4))
    topics = {f"t{i}": draw(st.integers(0, 9)) for i in range(topic_count)}
    member_count = draw(st.integers(1, 7))
    members = [f"m{i}" for i in range(member_count)]
    same = draw(st.booleans()) if identical is None else identical
    names = sorted(topics)
    if same:
        chosen = draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
        subscribed = {m: tuple(chosen) for m in members}
    else:
        subscribed = {m: tuple(draw(st.lists(st.sampled_from(names), min_size=1, unique=True))) for m in members}
    statics = {m: f"inst-{draw(st.integers(0, 99))}-{m}" for m in members if draw(st.integers(0, 3)) == 0}

    previous: dict[str, list[TopicPartition]] = {m: [] for m in members}
    if with_history and draw(st.booleans()):
        rng = random.Random(draw(st.integers(0, 2**32)))
        earlier = [m for m in members if rng.random() < 0.8] + [f"gone{i}" for i in range(rng.randint(0, 2))]
        for topic, count in topics.items():
            for p in range(count):
                takers = [m for m in earlier if m.startswith("gone") or topic in subscribed[m]]
                if takers and rng.random() < 0.9:
                    owner = rng.choice(takers)
                    if owner in previous:
                        previous[owner].append(TopicPartition(topic, p))
    generation = 1 if any(previous.values()) else -1
    subs = {
        m: Subscription(subscribed[m], tuple(previous[m]), generation, None, statics.get(m)) for m in members
    }
    return topics, subs, previous


def owners(strategy, topics, subs):
    return {m: list(a.partitions) for m, a in get_assignor(strategy).assign(topics, subs).items()}


@SETTINGS
@given(groups())
def test_every_eager_strategy_is_valid(group):
    topics, subs, _ = group
    for strategy in EAGER:
        assert validity_errors(topics, subs, owners(strategy, topics, subs)) == [], strategy


@SETTINGS
@given(groups(identical=True))
def test_identical_subscriptions_are_balanced(group):
    topics, subs, _ = group
    for strategy in ("roundrobin", "sticky", "optimal"):
        assert spread(owners(strategy, topics, subs)) <= 1, strategy
    # range balances each topic on its own
    result = owners("range", topics, subs)
    for topic in topics:
        per_topic = {m: [p for p in ps if p.topic == topic] for m, ps in result.items()}
        assert spread(per_topic) <= 1


@SETTINGS
@given(groups(identical=False))
def test_sticky_leaves_no_balancing_move_and_optimal_is_at_least_as_balanced(group):
    topics, subs, _ = group
    sticky = owners("sticky", topics, subs)
    assert balance_errors(subs, sticky) == []
    best = solve_optimal(Group.of(topics, subs))
    assert balance_errors(subs, best.assignment) == []
    assert best.load_squares <= sum(len(ps) ** 2 for ps in sticky.values())


@SETTINGS
@given(groups(identical=True))
def test_sticky_moves_exactly_as_few_as_optimal_with_identical_subscriptions(group):
    topics, subs, previous = group
    sticky = owners("sticky", topics, subs)
    best = solve_optimal(Group.of(topics, subs))
    assert moves(previous, sticky) == best.moves == moves(previous, best.assignment)


@SETTINGS
@given(groups(identical=False))
def test_optimal_is_a_lower_bound_for_equally_balanced_sticky(group):
    topics, subs, previous = group
    sticky = owners("sticky", topics, subs)
    best = solve_optimal(Group.of(topics, subs))
    if best.load_squares == sum(len(ps) ** 2 for ps in sticky.values()):
        assert best.moves <= moves(previous, sticky)


@SETTINGS
@given(groups())
def test_cooperative_never_hands_over_a_partition_someone_still_owns(group):
    topics, subs, previous = group
    rounds = cooperative_rounds(topics, subs)
    first = {m: set(a.partitions) for m, a in rounds[0].items()}
    claimed_by = {tp: m for m, tps in previous.items() for tp in tps}
    for member, partitions in first.items():
        for tp in partitions:
            assert claimed_by.get(tp, member) == member, f"{tp} moved from {claimed_by[tp]} to {member} in one round"
    # never more than one owner at a time: what a member keeps plus what is new is disjoint from others
    given = [tp for ps in first.values() for tp in ps]
    assert len(given) == len(set(given))


@SETTINGS
@given(groups(identical=True))
def test_cooperative_converges_within_two_rounds_with_identical_subscriptions(group):
    topics, subs, previous = group
    rounds = cooperative_rounds(topics, subs)
    assert len(rounds) <= 2
    final = {m: list(a.partitions) for m, a in rounds[-1].items()}
    assert validity_errors(topics, subs, final) == []
    assert moves(previous, final) == moves(previous, owners("sticky", topics, subs))


@SETTINGS
@given(groups(identical=False))
def test_cooperative_settles_valid_and_balanced_with_unequal_subscriptions(group):
    # Usually two rounds; a follow-up round may rebalance again (Kafka's own tests allow up to
    # four follow-ups), and every round still obeys the hand-over rule tested above.
    topics, subs, _ = group
    rounds = cooperative_rounds(topics, subs)
    final = {m: list(a.partitions) for m, a in rounds[-1].items()}
    assert validity_errors(topics, subs, final) == []
    assert balance_errors(subs, final) == []


@SETTINGS
@given(groups(), st.randoms(use_true_random=False))
def test_results_do_not_depend_on_the_order_members_are_listed(group, rng):
    topics, subs, _ = group
    shuffled_members = list(subs.items())
    rng.shuffle(shuffled_members)
    shuffled_topics = list(topics.items())
    rng.shuffle(shuffled_topics)
    for strategy in EAGER + ("cooperative-sticky",):
        a = get_assignor(strategy).assign(topics, subs)
        b = get_assignor(strategy).assign(dict(shuffled_topics), dict(shuffled_members))
        assert a == b, strategy


@st.composite
def legacy_groups(draw, identical: bool):
    topics = {f"t{i}": draw(st.integers(0, 12)) for i in range(draw(st.integers(1, 3)))}
    consumers = [f"g_host-{i}" for i in range(draw(st.integers(1, 6)))]
    if identical:
        chosen = draw(st.lists(st.sampled_from(sorted(topics)), min_size=1, unique=True))
        subs = {c: dict.fromkeys(chosen, draw(st.integers(1, 3))) for c in consumers}
    else:
        subs = {
            c: {t: draw(st.integers(1, 3)) for t in draw(st.lists(st.sampled_from(sorted(topics)), min_size=1, unique=True))}
            for c in consumers
        }
    return topics, subs


@SETTINGS
@given(legacy_groups(identical=False))
def test_legacy_range_is_valid_per_thread(group):
    topics, subs = group
    result = legacy_range(topics, subs)
    assert set(result) == {f"{c}-{i}" for c, ts in subs.items() for i in range(max(ts.values()))}
    seen = [tp for tps in result.values() for tp in tps]
    expected = {TopicPartition(t, p) for ts in subs.values() for t in ts for p in range(topics[t])}
    assert len(seen) == len(set(seen)) and set(seen) == expected
    for thread, tps in result.items():
        consumer, _, index = thread.rpartition("-")
        assert all(tp.topic in subs[consumer] and int(index) < subs[consumer][tp.topic] for tp in tps)


@SETTINGS
@given(legacy_groups(identical=True))
def test_legacy_roundrobin_deals_evenly_over_threads(group):
    topics, subs = group
    result = legacy_roundrobin(topics, subs)
    sizes = [len(tps) for tps in result.values()]
    assert max(sizes) - min(sizes) <= 1
    seen = [tp for tps in result.values() for tp in tps]
    assert len(seen) == len(set(seen)) == sum(topics[t] for t in next(iter(subs.values())))
