"""What every assignor shares: the validated input (`Group`), the member order, the base class.

An assignor is a pure function of (partitions per topic, member subscriptions): no I/O,
no clock, no randomness, so the same input always gives the same assignment, whichever
process computes it (the leader in classic runs, every member in legacy runs).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property
from typing import ClassVar

from rebalance.javahash import java_string_sort_key
from rebalance.types import Assignment, Subscription, TopicPartition


class RebalanceProtocol(StrEnum):
    """How members give up partitions (KIP-429): all at once, or only what actually moves."""

    EAGER = "eager"
    COOPERATIVE = "cooperative"


@dataclass(frozen=True)
class Group:
    """An assignor's input, checked once. Build it with `Group.of(...)`, which raises ValueError on bad input."""

    partitions_per_topic: Mapping[str, int]
    subscriptions: Mapping[str, Subscription]

    @classmethod
    def of(cls, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]) -> Group:
        counts = _check_topics(partitions_per_topic)
        subs = _check_subscriptions(subscriptions, counts)
        return cls(counts, subs)

    @cached_property
    def members(self) -> tuple[str, ...]:
        """Kafka's member order: static members by instance id first, then dynamic members by member id."""
        return tuple(sorted(self.subscriptions, key=lambda m: member_sort_key(m, self.subscriptions[m])))

    @cached_property
    def member_ids_sorted(self) -> tuple[str, ...]:
        """Plain member id order (what the sticky assignors sort by)."""
        return tuple(sorted(self.subscriptions, key=java_string_sort_key))

    def topics_of(self, member: str) -> frozenset[str]:
        return self._topic_sets[member]

    @cached_property
    def _topic_sets(self) -> dict[str, frozenset[str]]:
        return {m: frozenset(s.topics) for m, s in self.subscriptions.items()}

    @cached_property
    def subscribed_topics(self) -> tuple[str, ...]:
        """Topics at least one member subscribes to, sorted."""
        return tuple(sorted({t for s in self._topic_sets.values() for t in s}))

    @cached_property
    def subscribers(self) -> dict[str, tuple[str, ...]]:
        """Topic -> its subscribers, in Kafka's member order."""
        result: dict[str, list[str]] = {t: [] for t in self.subscribed_topics}
        for member in self.members:
            for topic in self.topics_of(member):
                result[topic].append(member)
        return {t: tuple(ms) for t, ms in result.items()}

    def partitions_of(self, topic: str) -> list[TopicPartition]:
        return [TopicPartition(topic, p) for p in range(self.partitions_per_topic[topic])]

    @cached_property
    def all_partitions(self) -> tuple[TopicPartition, ...]:
        """Every partition of a subscribed topic, in (topic, partition) order."""
        return tuple(tp for topic in self.subscribed_topics for tp in self.partitions_of(topic))

    @cached_property
    def identical_subscriptions(self) -> bool:
        return len(set(self._topic_sets.values())) == 1


def member_sort_key(member_id: str, subscription: Subscription) -> tuple[int, bytes]:
    if subscription.group_instance_id is not None:
        return (0, java_string_sort_key(subscription.group_instance_id))
    return (1, java_string_sort_key(member_id))


def _check_topics(partitions_per_topic: Mapping[str, int]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for topic, count in partitions_per_topic.items():
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"topic names must be non-empty strings, got {topic!r}")
        if isinstance(count, bool) or not isinstance(count, int):
            raise ValueError(f"topic {topic!r}: partition count must be an integer, got {count!r}")
        if count < 0:
            raise ValueError(f"topic {topic!r} has a negative partition count ({count})")
        counts[topic] = count
    return counts


def _check_subscriptions(
    subscriptions: Mapping[str, Subscription], counts: Mapping[str, int]
) -> dict[str, Subscription]:
    if not subscriptions:
        raise ValueError("no members to assign to")
    instance_owner: dict[str, str] = {}
    for member, sub in subscriptions.items():
        if not isinstance(member, str) or not member:
            raise ValueError(f"member ids must be non-empty strings, got {member!r}")
        if not isinstance(sub, Subscription):
            raise ValueError(f"member {member!r}: expected a Subscription, got {type(sub).__name__}")
        for topic in sub.topics:
            if topic not in counts:
                known = ", ".join(sorted(counts)) or "none"
                raise ValueError(f"member {member!r} is subscribed to unknown topic {topic!r} (known: {known})")
        for tp in sub.owned_partitions:
            if tp.topic not in counts or not 0 <= tp.partition < counts[tp.topic]:
                size = f"{tp.topic!r} has {counts[tp.topic]} partitions" if tp.topic in counts else "unknown topic"
                raise ValueError(f"member {member!r} owns partition {tp}, which does not exist ({size})")
        instance = sub.group_instance_id
        if instance is not None:
            if instance in instance_owner:
                raise ValueError(f"members {instance_owner[instance]!r} and {member!r} share instance id {instance!r}")
            instance_owner[instance] = member
    return dict(subscriptions)


Plan = Mapping[str, Iterable[TopicPartition]]


def _check_plan(name: str, group: Group, plan: Mapping[str, tuple[TopicPartition, ...]]) -> None:
    """Catch a broken (custom) assignor here rather than as two members consuming one partition."""
    seen: set[TopicPartition] = set()
    for member, partitions in plan.items():
        if member not in group.subscriptions:
            raise ValueError(f"assignor {name!r} assigned partitions to {member!r}, which is not a member")
        for tp in partitions:
            if tp in seen:
                raise ValueError(f"assignor {name!r} assigned {tp} twice")
            if tp.topic not in group.topics_of(member) or not 0 <= tp.partition < group.partitions_per_topic[tp.topic]:
                raise ValueError(f"assignor {name!r} gave {member!r} {tp}, which it cannot have")
            seen.add(tp)


class Assignor(ABC):
    """Base class of the lab's assignors; a custom one subclasses it and implements `plan`.

    `name` is the protocol name a member sends in JoinGroup; `rebalance_protocol` tells the
    client whether it may keep partitions through a rebalance (cooperative) or not (eager).
    """

    name: ClassVar[str]
    rebalance_protocol: ClassVar[RebalanceProtocol] = RebalanceProtocol.EAGER

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        group = Group.of(partitions_per_topic, subscriptions)
        plan = {member: tuple(partitions) for member, partitions in self.plan(group).items()}
        _check_plan(self.name, group, plan)
        return {member: Assignment(plan.get(member, ())) for member in group.subscriptions}

    @abstractmethod
    def plan(self, group: Group) -> Plan:
        """Member id -> partitions. Members left out get nothing."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} ({self.rebalance_protocol})>"
