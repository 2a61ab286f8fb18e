"""How many partitions change owner when a group is scaled, per strategy (seed 002, scenario 1).

The group starts from scratch with `before` members on one topic; then it becomes `after`
members: the first ones stay and report what they own, the newcomers own nothing (when
scaling down, the last members leave). Sticky strategies see the owned partitions;
cooperative-sticky plays out its rounds and is scored on where partitions end up. `optimal` has no start of
its own: it starts where sticky does, and its count is the fewest moves any strategy could make from there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rebalance.assignors import cooperative_rounds, get_assignor
from rebalance.types import Subscription, TopicPartition

SCENARIO_STRATEGIES = ("range", "roundrobin", "sticky", "cooperative-sticky", "optimal")
BASELINE = "optimal"          # the fewest moves possible, a min-cost flow (rebalance/assignors/optimal.py) ...
BASELINE_START = "sticky"     # ... from the group sticky and cooperative-sticky start from, so they compare

Owners = dict[str, tuple[TopicPartition, ...]]


@dataclass(frozen=True)
class Change:
    partition: TopicPartition
    source: str | None
    target: str | None


@dataclass(frozen=True)
class Movement:
    strategy: str
    before: Owners
    rounds: tuple[Owners, ...]   # one per rebalance round; the last is where the group settles

    @property
    def after(self) -> Owners:
        return self.rounds[-1]

    @property
    def changes(self) -> list[Change]:
        old, new = _owner_map(self.before), _owner_map(self.after)
        return [
            Change(tp, old.get(tp), new.get(tp))
            for tp in sorted(set(old) | set(new))
            if old.get(tp) != new.get(tp)
        ]


def member_names(count: int) -> list[str]:
    """C1..Cn as in seed 002, zero-padded past nine so that string order is numeric order."""
    width = len(str(count)) if count >= 10 else 1
    return [f"C{i:0{width}d}" for i in range(1, count + 1)]


def scale_movement(
    strategy: str, *, partitions: int, before: int, after: int, topic: str = "t0"
) -> Movement:
    if partitions < 0:
        raise ValueError(f"--partitions must be >= 0, got {partitions}")
    if before < 1 or after < 1:
        raise ValueError(f"member counts must be >= 1, got {before} -> {after}")
    names = member_names(max(before, after))
    topics = {topic: partitions}
    assignor = get_assignor(strategy)
    # The baseline has no start of its own: it counts the fewest moves from where the sticky strategies start.
    starter = get_assignor(BASELINE_START if strategy == BASELINE else strategy)
    start = starter.assign(topics, {m: Subscription((topic,)) for m in names[:before]})
    first = _owners(start)
    # The starting group settled in generation 1; stayers report it with what they own.
    subscriptions = {
        m: Subscription((topic,), first.get(m, ()), 1 if m in first else -1) for m in names[:after]
    }
    if strategy == "cooperative-sticky":
        rounds = tuple(_owners(r) for r in cooperative_rounds(topics, subscriptions))
    else:
        rounds = (_owners(assignor.assign(topics, subscriptions)),)
    return Movement(strategy, first, rounds)


def scale_all(
    strategies: Sequence[str], *, partitions: int, before: int, after: int, topic: str = "t0"
) -> list[Movement]:
    return [scale_movement(s, partitions=partitions, before=before, after=after, topic=topic) for s in strategies]


def _owners(result) -> Owners:
    return {m: tuple(a.partitions) for m, a in result.items()}


def _owner_map(owners: Owners) -> dict[TopicPartition, str]:
    return {tp: m for m, tps in owners.items() for tp in tps}
