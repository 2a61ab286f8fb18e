"""Which previous ownership claims a sticky assignor may trust.

Members report what they own in their subscriptions, together with the generation in
which they got it. Kafka trusts only the claims of the highest generation present:
- a member reporting an older generation (it missed a rebalance) loses its claims;
- when any member reports a generation, members reporting none lose theirs;
- a partition claimed by two members of that same generation is kept by neither.
The lower-generation claims are remembered as hints (`previous`): when nothing else
decides, a partition goes back to the member that had it before.

Unlike Kafka, the outcome here does not depend on the order the members are listed in.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from rebalance.assignors.base import Group
from rebalance.types import TopicPartition


@dataclass(frozen=True)
class Ownership:
    owned: dict[str, list[TopicPartition]]        # trusted claims, in each member's reported order
    doubly_claimed: frozenset[TopicPartition]      # same generation, several claimants: nobody keeps it
    previous: dict[TopicPartition, str]            # the best older claim, a tie-breaking hint only

    def owner_of(self) -> dict[TopicPartition, str]:
        return {tp: member for member, tps in self.owned.items() for tp in tps}


def resolve_ownership(group: Group) -> Ownership:
    subs = group.subscriptions
    subscribed = set(group.subscribed_topics)
    generations = [s.generation for s in subs.values() if s.generation >= 0]
    top = max(generations, default=-1)

    def trusted(member: str) -> bool:
        return subs[member].generation == top

    claims = Counter(
        tp for m in group.member_ids_sorted if trusted(m) for tp in dict.fromkeys(subs[m].owned_partitions)
    )
    doubly = frozenset(tp for tp, n in claims.items() if n > 1)

    owned: dict[str, list[TopicPartition]] = {}
    previous: dict[TopicPartition, tuple[int, str]] = {}
    for member in group.member_ids_sorted:
        sub = subs[member]
        reported = [tp for tp in dict.fromkeys(sub.owned_partitions) if tp.topic in subscribed]
        if trusted(member):
            owned[member] = [tp for tp in reported if tp not in doubly]
        else:
            owned[member] = []
            for tp in reported:
                best = previous.get(tp)
                if best is None or sub.generation > best[0]:
                    previous[tp] = (sub.generation, member)
    return Ownership(owned, doubly, {tp: member for tp, (_, member) in previous.items()})


def raw_claims(group: Group) -> dict[TopicPartition, set[str]]:
    """Every member that reports owning each partition, whatever its generation."""
    claims: dict[TopicPartition, set[str]] = {}
    for member, sub in group.subscriptions.items():
        for tp in sub.owned_partitions:
            claims.setdefault(tp, set()).add(member)
    return claims
