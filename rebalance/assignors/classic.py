"""Range and RoundRobin as Kafka's Java client computes them (no rack awareness)."""

from __future__ import annotations

from itertools import cycle

from rebalance.assignors.base import Assignor, Group, Plan
from rebalance.types import TopicPartition


class RangeAssignor(Assignor):
    """Per topic: its subscribers in member order; the first `P % C` get one partition more.

    Each topic is split on its own, so with several topics the same first members get the
    extra partition every time: the imbalance the range strategy is known for.
    """

    name = "range"

    def plan(self, group: Group) -> Plan:
        result: dict[str, list[TopicPartition]] = {m: [] for m in group.members}
        for topic, members in group.subscribers.items():
            partitions = group.partitions_of(topic)
            per_member, extra = divmod(len(partitions), len(members))
            for i, member in enumerate(members):
                start = per_member * i + min(i, extra)
                length = per_member + (1 if i < extra else 0)
                result[member].extend(partitions[start : start + length])
        return result


class RoundRobinAssignor(Assignor):
    """All subscribed partitions in (topic, partition) order, dealt around the circle of members.

    A partition goes to the next member in the circle that subscribes to its topic, so with
    unequal subscriptions the result can be lopsided (seed 001 shows one).
    """

    name = "roundrobin"

    def plan(self, group: Group) -> Plan:
        result: dict[str, list[TopicPartition]] = {m: [] for m in group.members}
        circle = cycle(group.members)
        current = next(circle)
        for tp in group.all_partitions:
            while tp.topic not in group.topics_of(current):
                current = next(circle)
            result[current].append(tp)
            current = next(circle)
        return result
