"""KIP-848's server-side assignors: the coordinator computes the target assignment itself.

An assignor maps (members' subscriptions, partition counts, the previous target) to a new target;
keyword arguments carry what some assignors read besides: `instance_ids` (member -> instance id,
static members only) and `topic_id` (topic name -> topic id).

- `uniform` (Kafka's default) is Kafka 4.0's, computed as Kafka computes it, in Kafka's orders
  (`modern/coordinator/uniform.py`); `uniform-4.1` is the stickier homogeneous algorithm Kafka ships from 4.1 on.
- `range` (KAFKA-16944, Kafka 3.9 and 4.x) is recomputed from scratch every time, keeping nothing:
  per topic, its subscribers take contiguous ranges in a fixed member order, static members first
  by instance id, then the others by member id; the first P mod N of them one partition more.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from modern.coordinator.uniform import uniform, uniform_41
from rebalance.javahash import java_string_sort_key
from rebalance.topic_ids import topic_id as lab_topic_id

TopicPartition = tuple[str, int]
Assignment = frozenset[TopicPartition]


class Assignor(Protocol):
    def __call__(self, subscriptions: Mapping[str, frozenset[str]], partition_counts: Mapping[str, int],
                 previous: Mapping[str, Assignment], *, topic_id: Callable = lab_topic_id,
                 instance_ids: Mapping[str, str] | None = None) -> dict[str, Assignment]: ...


def range_(subscriptions: Mapping[str, frozenset[str]], partition_counts: Mapping[str, int],
           previous: Mapping[str, Assignment], *, topic_id: Callable = lab_topic_id,
           instance_ids: Mapping[str, str] | None = None) -> dict[str, Assignment]:
    """Per topic, its subscribers in range order take contiguous ranges; the first ones one more.
    `previous` and `topic_id` are not read: the result depends only on who subscribes to what."""
    order = range_order(subscriptions, instance_ids or {})
    result: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
    for topic, count in sorted(partition_counts.items()):
        takers = [m for m in order if topic in subscriptions[m]]
        if not takers:
            continue
        base, extra = divmod(count, len(takers))
        start = 0
        for position, member in enumerate(takers):
            size = base + (1 if position < extra else 0)
            result[member].update((topic, index) for index in range(start, start + size))
            start += size
    return {m: frozenset(tps) for m, tps in result.items()}


def range_order(members: Mapping[str, object], instance_ids: Mapping[str, str]) -> list[str]:
    """Static members first, by instance id; then the others by member id (Java string order)."""
    static = sorted((m for m in members if instance_ids.get(m)), key=lambda m: java_string_sort_key(instance_ids[m]))
    dynamic = sorted((m for m in members if not instance_ids.get(m)), key=java_string_sort_key)
    return static + dynamic


# Kafka's names; the first is the default (group.consumer.assignors). `uniform-4.1` is the lab's name
# for Kafka 4.1's uniform, so that the two releases can be compared side by side.
ASSIGNORS: dict[str, Assignor] = {"uniform": uniform, "range": range_, "uniform-4.1": uniform_41}
DEFAULT_ASSIGNOR = "uniform"
