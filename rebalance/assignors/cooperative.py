"""Cooperative-sticky (KIP-429): the sticky result, minus every partition that changes owner.

In an eager rebalance every member drops everything before the assignment is computed.
In a cooperative one members keep their partitions through the rebalance, so a partition
must never be handed to its new owner while its old owner may still be consuming it.
The assignor therefore withholds, in the first round, each partition that changes owner
(someone else reports owning it) or that two members of the current generation both
claim; the old owner revokes it after the sync and rejoins at once, and the follow-up
round gives the freed partitions to their new owners.

With identical subscriptions the follow-up round never moves anything else, so the group
settles in two rounds. With unequal ones a follow-up round may rebalance once more
(Kafka's own tests allow up to four follow-ups); each round obeys the same rule.

`cooperative_rounds` plays those rounds out without any protocol, for the CLI and the tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from rebalance.assignors.base import Group, Plan, RebalanceProtocol
from rebalance.assignors.ownership import raw_claims, resolve_ownership
from rebalance.assignors.sticky import StickyAssignor
from rebalance.types import Assignment, Subscription, TopicPartition


class CooperativeStickyAssignor(StickyAssignor):
    name = "cooperative-sticky"
    rebalance_protocol = RebalanceProtocol.COOPERATIVE

    def plan(self, group: Group) -> Plan:
        target = super().plan(group)
        claims = raw_claims(group)
        contested = resolve_ownership(group).doubly_claimed
        return {
            member: [tp for tp in partitions if not _withheld(tp, member, claims, contested)]
            for member, partitions in target.items()
        }


def _withheld(
    tp: TopicPartition, member: str, claims: Mapping[TopicPartition, set[str]], contested: frozenset
) -> bool:
    """True when another member may still be consuming `tp`: it is new to `member` and someone else
    reports owning it, or several members of the current generation claim it (nobody can tell who has it).

    A member that keeps a partition keeps it even if a member of an older generation also
    claims it: that one missed a rebalance and has already lost it, as in Kafka.
    """
    claimants = claims.get(tp, set())
    return (member not in claimants and bool(claimants)) or tp in contested


def cooperative_rounds(
    partitions_per_topic: Mapping[str, int],
    subscriptions: Mapping[str, Subscription],
    *,
    max_rounds: int = 5,
) -> list[dict[str, Assignment]]:
    """The assignments of successive cooperative rounds, until a round makes nobody revoke anything.

    Round 1 uses `subscriptions` as given. Before each follow-up round every member revokes
    what it owned but was not given, then rejoins reporting its new assignment as owned,
    one generation later. Usually one round (nothing moves) or two (something moves).
    """
    assignor = CooperativeStickyAssignor()
    current = dict(subscriptions)
    rounds: list[dict[str, Assignment]] = []
    for _ in range(max_rounds):
        result = assignor.assign(partitions_per_topic, current)
        rounds.append(result)
        revoked = {m: set(s.owned_partitions) - set(result[m].partitions) for m, s in current.items()}
        if not any(revoked.values()):
            return rounds
        generation = max(s.generation for s in current.values()) + 1
        current = {
            m: replace(s, owned_partitions=result[m].partitions, generation=max(generation, 1))
            for m, s in current.items()
        }
    raise RuntimeError(f"cooperative-sticky did not settle within {max_rounds} rounds")
