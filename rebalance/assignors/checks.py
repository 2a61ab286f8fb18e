"""Properties any assignment can be checked against (used by the tests; handy for experiments).

- valid: every partition of a subscribed topic has exactly one owner, and owners subscribe to it;
- balanced (Kafka's definition, from its sticky assignor tests): no member holds a partition
  that a member with at least two fewer partitions could take instead;
- moves: how many partitions changed owner between two assignments.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from rebalance.types import Subscription, TopicPartition

Owners = Mapping[str, Iterable[TopicPartition]]


def validity_errors(
    partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription], assignment: Owners
) -> list[str]:
    errors = []
    if set(assignment) != set(subscriptions):
        errors.append(f"members differ: assigned {sorted(assignment)} vs subscribed {sorted(subscriptions)}")
    counts = Counter(tp for tps in assignment.values() for tp in tps)
    subscribed = {t for s in subscriptions.values() for t in s.topics}
    expected = {TopicPartition(t, p) for t in subscribed for p in range(partitions_per_topic[t])}
    errors += [f"{tp} assigned {n} times" for tp, n in counts.items() if n > 1]
    errors += [f"{tp} not assigned" for tp in sorted(expected - set(counts))]
    errors += [f"{tp} does not belong to a subscribed topic" for tp in sorted(set(counts) - expected)]
    for member, tps in assignment.items():
        topics = set(subscriptions[member].topics) if member in subscriptions else set()
        errors += [f"{tp} given to {member}, which does not subscribe to {tp.topic}" for tp in tps if tp.topic not in topics]
    return errors


def balance_errors(subscriptions: Mapping[str, Subscription], assignment: Owners) -> list[str]:
    sizes = {m: len(list(tps)) for m, tps in assignment.items()}
    errors = []
    for rich, tps in assignment.items():
        for tp in tps:
            for poor, size in sizes.items():
                if size + 1 < sizes[rich] and tp.topic in subscriptions[poor].topics:
                    errors.append(f"{tp} could move from {rich} ({sizes[rich]}) to {poor} ({size})")
                    break
    return errors


def spread(assignment: Owners) -> int:
    """max - min partitions per member."""
    sizes = [len(list(tps)) for tps in assignment.values()]
    return max(sizes) - min(sizes) if sizes else 0


def owner_map(assignment: Owners) -> dict[TopicPartition, str]:
    return {tp: member for member, tps in assignment.items() for tp in tps}


def moves(before: Owners, after: Owners) -> int:
    """Partitions whose owner in `before` no longer holds them in `after`."""
    now = owner_map(after)
    return sum(1 for tp, member in owner_map(before).items() if now.get(tp) != member)
