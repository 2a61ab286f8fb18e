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
    partitions = sorted((topic, index) for topic, count in partition_counts.items() for index in range(count)
                        if any(topic in subscriptions[m] for m in members))
    eligible = {tp: [m for m in members if tp[0] in subscriptions[m]] for tp in partitions}
    share = {m: -(-sum(1 for tp in partitions if m in eligible[tp]) // max(1, _subscribers_of(m, eligible)))
             for m in members}
    result: dict[str, set[TopicPartition]] = {m: set() for m in members}
    unassigned = []
    for tp in partitions:
        keeper = next((m for m in members if tp in previous.get(m, ()) and m in eligible[tp]
                       and len(result[m]) < share[m]), None)
        if keeper is None:
            unassigned.append(tp)
        else:
            result[keeper].add(tp)
    for tp in unassigned:
        least = min(eligible[tp], key=lambda m: (len(result[m]), m))
        result[least].add(tp)
    _even_out(result, eligible)
    return {m: frozenset(tps) for m, tps in result.items()}


def _subscribers_of(member: str, eligible: Mapping[TopicPartition, list[str]]) -> int:
    """How many members share the topics this member takes (its fair share's denominator)."""
    sharing: set[str] = set()
    for candidates in eligible.values():
        if member in candidates:
            sharing.update(candidates)
    return len(sharing)


def _even_out(result: dict[str, set[TopicPartition]], eligible: Mapping[TopicPartition, list[str]]) -> None:
    """Move partitions from the most to the least loaded member while that narrows the gap."""
    while True:
        moved = False
        for tp, candidates in sorted(eligible.items()):
            owner = next(m for m in candidates if tp in result[m])
            least = min(candidates, key=lambda m: (len(result[m]), m))
            if len(result[owner]) - len(result[least]) > 1:
                result[owner].discard(tp)
                result[least].add(tp)
                moved = True
        if not moved:
            return


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
