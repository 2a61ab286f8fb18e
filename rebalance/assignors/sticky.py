"""Sticky: balance first, then keep every partition where it already is.

Two algorithms, as in Kafka's AbstractStickyAssignor:
- identical subscriptions (the common case) use quotas: every member ends with
  floor(P/N) or ceil(P/N) partitions, keeps what it owns up to its quota, and the rest are
  dealt round-robin to the members below quota (`_assign_with_quotas`);
- otherwise a greedy fill plus balancing moves (`_assign_general`): every unassigned
  partition goes to the least-loaded member that can take it, then partitions move from a
  member to an eligible one with at least two fewer until no such move is left.

Where Kafka iterates a Java HashMap (member order when several members own more than
their quota) this code iterates members sorted by id, so results are deterministic.
"""

from __future__ import annotations

import heapq

from rebalance.assignors.base import Assignor, Group, Plan
from rebalance.assignors.ownership import Ownership, resolve_ownership
from rebalance.types import TopicPartition


class StickyAssignor(Assignor):
    name = "sticky"

    def plan(self, group: Group) -> Plan:
        ownership = resolve_ownership(group)
        if group.identical_subscriptions:
            return _assign_with_quotas(group, ownership)
        return _assign_general(group, ownership)


def _assign_with_quotas(group: Group, ownership: Ownership) -> dict[str, list[TopicPartition]]:
    members = group.member_ids_sorted
    total = len(group.all_partitions)
    min_quota, extra = divmod(total, len(members))
    max_quota = min_quota + (1 if extra else 0)
    members_at_max = 0  # members given more than min_quota so far; `extra` of them are allowed

    assignment: dict[str, list[TopicPartition]] = {m: [] for m in members}
    below_min: list[str] = []   # still need partitions to reach min_quota
    at_min: list[str] = []      # at min_quota, may take one more while members_at_max < extra

    # 1. Keep owned partitions: up to max_quota while members may still be at max, else min_quota.
    for member in members:
        owned = ownership.owned[member]
        if len(owned) < min_quota:
            assignment[member] = list(owned)
            below_min.append(member)
        elif len(owned) >= max_quota and members_at_max < extra:
            assignment[member] = owned[:max_quota]
            members_at_max += 1
            if members_at_max == extra:
                at_min.clear()
        else:
            assignment[member] = owned[:min_quota]
            if members_at_max < extra:
                at_min.append(member)

    kept = {tp for tps in assignment.values() for tp in tps}
    unassigned = [tp for tp in group.all_partitions if tp not in kept]

    # 2. Deal the rest round-robin over members below min_quota; then one each to members at min_quota.
    cursor = 0
    for tp in unassigned:
        from_below = bool(below_min)
        if from_below:
            if cursor >= len(below_min):
                cursor = 0
            member = below_min[cursor]
        elif at_min:
            member = at_min.pop(0)
        else:
            raise AssertionError("sticky: partitions left over with every member at quota")
        assignment[member].append(tp)
        size = len(assignment[member])
        if from_below and size == min_quota:
            below_min.pop(cursor)
            at_min.append(member)
        elif from_below:
            cursor += 1
        if size == max_quota and max_quota > min_quota:
            members_at_max += 1
            if members_at_max == extra:
                at_min.clear()
    return assignment


def _assign_general(group: Group, ownership: Ownership) -> dict[str, list[TopicPartition]]:
    subscribers = group.subscribers
    assignment: dict[str, list[TopicPartition]] = {m: [] for m in group.member_ids_sorted}
    owner: dict[TopicPartition, str] = {}

    # 1. Keep trusted claims on topics the member still subscribes to.
    for member, owned in ownership.owned.items():
        for tp in owned:
            if tp.topic in group.topics_of(member):
                assignment[member].append(tp)
                owner[tp] = member

    loads = _LoadIndex(group, assignment)

    def scarcity(tp: TopicPartition) -> tuple[int, str, int]:
        return (len(subscribers[tp.topic]), tp.topic, tp.partition)

    # 2. Place the rest, hardest first (fewest possible members), each on the least-loaded candidate.
    placed = sorted((tp for tp in group.all_partitions if tp not in owner), key=scarcity)
    for tp in placed:
        member = loads.least_loaded(tp.topic, hint=ownership.previous.get(tp))
        assignment[member].append(tp)
        owner[tp] = member
        loads.changed(member)

    # 3. Balance: move a partition to an eligible member with at least two fewer. First only
    #    newly placed partitions (moving them costs no stickiness), then any. Each move lowers
    #    the sum of squared loads, so both loops end.
    newly_placed = set(placed)
    kept = sorted((tp for tp in owner if tp not in newly_placed), key=scarcity)
    for candidates in (placed, placed + kept):
        movable = [tp for tp in candidates if len(subscribers[tp.topic]) > 1]
        moved = True
        while moved:
            moved = False
            for tp in movable:
                source = owner[tp]
                target = loads.least_loaded(tp.topic, hint=ownership.previous.get(tp))
                if len(assignment[target]) + 1 < len(assignment[source]):
                    assignment[source].remove(tp)
                    assignment[target].append(tp)
                    owner[tp] = target
                    loads.changed(source)
                    loads.changed(target)
                    moved = True
    return assignment


class _LoadIndex:
    """The least-loaded subscriber of a topic in O(log N): one heap per topic, stale entries skipped.

    Ties go to the hinted member (a previous owner) if it is among the least loaded, else to
    the first member by id.
    """

    def __init__(self, group: Group, assignment: dict[str, list[TopicPartition]]) -> None:
        self._group = group
        self._assignment = assignment
        self._rank = {m: i for i, m in enumerate(group.member_ids_sorted)}
        self._heaps = {
            topic: [(len(assignment[m]), self._rank[m], m) for m in members]
            for topic, members in group.subscribers.items()
        }
        for heap in self._heaps.values():
            heapq.heapify(heap)

    def least_loaded(self, topic: str, hint: str | None = None) -> str:
        heap = self._heaps[topic]
        while heap[0][0] != len(self._assignment[heap[0][2]]):
            heapq.heappop(heap)
        load, _, member = heap[0]
        if hint is not None and topic in self._group.topics_of(hint) and len(self._assignment[hint]) == load:
            return hint
        return member

    def changed(self, member: str) -> None:
        entry = (len(self._assignment[member]), self._rank[member], member)
        for topic in self._group.topics_of(member):
            heapq.heappush(self._heaps[topic], entry)
