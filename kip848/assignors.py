"""KIP-848's server-side assignors: the coordinator computes the target assignment itself.

An assignor maps (members' subscriptions, partition counts, the previous target) to a new
target. `uniform` (Kafka's default) balances partitions across members within one while keeping
partitions where they were; `range` cuts each topic into contiguous ranges in member-id order,
as the classic range assignor does. Both are deterministic: ties are broken by member id.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

TopicPartition = tuple[str, int]
Assignment = frozenset[TopicPartition]
Assignor = Callable[[Mapping[str, frozenset[str]], Mapping[str, int], Mapping[str, Assignment]], dict[str, Assignment]]


def uniform(subscriptions: Mapping[str, frozenset[str]], partition_counts: Mapping[str, int],
            previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Sticky and balanced: each member keeps what it had up to its fair share of the partitions
    it can take, and the rest go one by one to the least loaded subscriber."""
    members = sorted(subscriptions)
    subscribers = {topic: [m for m in members if topic in subscriptions[m]] for topic in partition_counts}
    partitions = sorted((topic, index) for topic, count in partition_counts.items() if subscribers[topic]
                        for index in range(count))
    share = _fair_shares(subscriptions, partition_counts, subscribers)
    previous_owner = {tp: m for m, owned in previous.items() if m in subscriptions for tp in owned}
    result: dict[str, set[TopicPartition]] = {m: set() for m in members}
    owner: dict[TopicPartition, str] = {}
    unassigned = []
    for tp in partitions:
        keeper = previous_owner.get(tp)
        if keeper is not None and tp[0] in subscriptions[keeper] and len(result[keeper]) < share[keeper]:
            result[keeper].add(tp)
            owner[tp] = keeper
        else:
            unassigned.append(tp)
    for tp in unassigned:
        least = min(subscribers[tp[0]], key=lambda m: (len(result[m]), m))
        result[least].add(tp)
        owner[tp] = least
    _even_out(result, owner, subscriptions)
    return {m: frozenset(tps) for m, tps in result.items()}


def _fair_shares(subscriptions: Mapping[str, frozenset[str]], partition_counts: Mapping[str, int],
                 subscribers: Mapping[str, list[str]]) -> dict[str, int]:
    """Per member: the partitions it can take divided by the members sharing those topics, rounded
    up. Computed once per distinct subscription (usually there is one)."""
    by_subscription: dict[frozenset[str], int] = {}
    for topics in set(subscriptions.values()):
        can_take = sum(partition_counts.get(t, 0) for t in topics)
        sharing = {m for t in topics for m in subscribers.get(t, ())}
        by_subscription[topics] = -(-can_take // max(1, len(sharing)))
    return {m: by_subscription[topics] for m, topics in subscriptions.items()}


def _even_out(result: dict[str, set[TopicPartition]], owner: dict[TopicPartition, str],
              subscriptions: Mapping[str, frozenset[str]]) -> None:
    """Move one partition at a time from a most loaded member to a least loaded one that can take
    it, while some pair differs by more than one: few moves, each found without scanning everything."""
    while True:
        by_load = sorted(result, key=lambda m: (len(result[m]), m))
        move = None
        for donor in reversed(by_load):
            for receiver in by_load:
                if len(result[donor]) - len(result[receiver]) <= 1:
                    break  # receivers only get more loaded from here on
                movable = sorted(tp for tp in result[donor] if tp[0] in subscriptions[receiver])
                if movable:
                    move = (donor, receiver, movable[-1])
                    break
            if move is not None or len(result[donor]) - len(result[by_load[0]]) <= 1:
                break
        if move is None:
            return
        donor, receiver, tp = move
        result[donor].discard(tp)
        result[receiver].add(tp)
        owner[tp] = receiver


def range_(subscriptions: Mapping[str, frozenset[str]], partition_counts: Mapping[str, int],
           previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Per topic, its subscribers in member-id order take contiguous ranges; the first ones one more."""
    result: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
    for topic, count in sorted(partition_counts.items()):
        takers = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if not takers:
            continue
        base, extra = divmod(count, len(takers))
        start = 0
        for position, member in enumerate(takers):
            size = base + (1 if position < extra else 0)
            result[member].update((topic, index) for index in range(start, start + size))
            start += size
    return {m: frozenset(tps) for m, tps in result.items()}


# Kafka's names; the first is the default (group.consumer.assignors).
ASSIGNORS: dict[str, Assignor] = {"uniform": uniform, "range": range_}
DEFAULT_ASSIGNOR = "uniform"
