"""The Kafka 0.8.2 ZooKeeper consumer's assignors, over consumer threads.

In 0.8 a consumer registers `{topic: stream count}`; each stream is a thread with id
`<consumerIdString>-<i>`, and partitions are owned by threads. Every consumer runs the
same computation on what it read from ZooKeeper and keeps only its own threads' share;
here the whole group's result is returned.

- range (the 0.8 default), per topic: the topic's threads sorted as strings (so "c-10"
  sorts before "c-2"), partitions by number; n = P / T, the first P % T threads get one more.
- roundrobin: needs every topic to have the same set of threads (all consumers subscribe
  to the same topics, each with one stream count for all its topics); all partitions
  sorted by the Java hashCode of "[topic,partition]" and dealt in a circle over the
  sorted threads.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import cycle

from rebalance.assignors.base import Assignor, Group, Plan
from rebalance.javahash import java_string_hashcode, java_string_sort_key
from rebalance.types import TopicPartition

LegacySubscriptions = Mapping[str, Mapping[str, int]]   # consumerIdString -> {topic: stream count}


def thread_ids(consumer_id: str, streams: int) -> list[str]:
    return [f"{consumer_id}-{i}" for i in range(streams)]


def legacy_range(
    partitions_per_topic: Mapping[str, int], subscriptions: LegacySubscriptions
) -> dict[str, list[TopicPartition]]:
    result, threads_per_topic = _prepare(partitions_per_topic, subscriptions)
    for topic, threads in threads_per_topic.items():
        count = partitions_per_topic[topic]
        per_thread, extra = divmod(count, len(threads))
        for i, thread in enumerate(threads):
            start = per_thread * i + min(i, extra)
            length = per_thread + (1 if i < extra else 0)
            result[thread].extend(TopicPartition(topic, p) for p in range(start, start + length))
    return _sorted(result)


def legacy_roundrobin(
    partitions_per_topic: Mapping[str, int], subscriptions: LegacySubscriptions
) -> dict[str, list[TopicPartition]]:
    result, threads_per_topic = _prepare(partitions_per_topic, subscriptions)
    if not threads_per_topic:
        return result
    first_topic, first_threads = next(iter(threads_per_topic.items()))
    for topic, threads in threads_per_topic.items():
        if set(threads) != set(first_threads):
            raise ValueError(
                "legacy roundrobin needs every consumer to subscribe to the same topics with the same "
                f"stream count for each of its topics; topic {topic!r} has threads {sorted(threads)}, "
                f"topic {first_topic!r} has {sorted(first_threads)}"
            )
    partitions = [TopicPartition(t, p) for t in threads_per_topic for p in range(partitions_per_topic[t])]
    # Scala's sortWith is stable; exact hash ties (vanishingly rare) fall back to (topic, partition).
    partitions.sort(key=lambda tp: (java_string_hashcode(f"[{tp.topic},{tp.partition}]"), tp))
    for tp, thread in zip(partitions, cycle(first_threads), strict=False):
        result[thread].append(tp)
    return _sorted(result)


def legacy_assign(
    strategy: str, partitions_per_topic: Mapping[str, int], subscriptions: LegacySubscriptions
) -> dict[str, list[TopicPartition]]:
    """`partition.assignment.strategy` as 0.8.2 names it: "range" or "roundrobin"."""
    if strategy == "range":
        return legacy_range(partitions_per_topic, subscriptions)
    if strategy == "roundrobin":
        return legacy_roundrobin(partitions_per_topic, subscriptions)
    raise ValueError(f"unknown legacy strategy {strategy!r}; choose range or roundrobin")


def _prepare(
    partitions_per_topic: Mapping[str, int], subscriptions: LegacySubscriptions
) -> tuple[dict[str, list[TopicPartition]], dict[str, list[str]]]:
    """Check the input; return every thread with an empty list, and each topic's sorted threads."""
    if not subscriptions:
        raise ValueError("no consumers to assign to")
    for topic, count in partitions_per_topic.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"topic {topic!r} has an invalid partition count ({count!r})")
    result: dict[str, list[TopicPartition]] = {}
    threads_per_topic: dict[str, list[str]] = {}
    for consumer, streams_per_topic in subscriptions.items():
        if not isinstance(consumer, str) or not consumer:
            raise ValueError(f"consumer ids must be non-empty strings, got {consumer!r}")
        for topic, streams in streams_per_topic.items():
            if topic not in partitions_per_topic:
                known = ", ".join(sorted(partitions_per_topic)) or "none"
                raise ValueError(f"consumer {consumer!r} is subscribed to unknown topic {topic!r} (known: {known})")
            if isinstance(streams, bool) or not isinstance(streams, int) or streams < 1:
                raise ValueError(f"consumer {consumer!r}: stream count for {topic!r} must be >= 1, got {streams!r}")
            for thread in thread_ids(consumer, streams):
                result.setdefault(thread, [])
                threads_per_topic.setdefault(topic, []).append(thread)
    for topic in threads_per_topic:
        threads_per_topic[topic].sort(key=java_string_sort_key)
    return result, dict(sorted(threads_per_topic.items()))


def _sorted(result: dict[str, list[TopicPartition]]) -> dict[str, list[TopicPartition]]:
    return {thread: sorted(tps) for thread, tps in sorted(result.items(), key=lambda kv: java_string_sort_key(kv[0]))}


class _LegacyAdapter(Assignor):
    """A legacy strategy behind the common Assignor interface: one stream per topic, owned ignored."""

    strategy: str

    def plan(self, group: Group) -> Plan:
        streams = {m: dict.fromkeys(sorted(group.topics_of(m)), 1) for m in group.members}
        by_thread = legacy_assign(self.strategy, group.partitions_per_topic, streams)
        return {m: by_thread.get(f"{m}-0", []) for m in group.members}


class LegacyRangeAssignor(_LegacyAdapter):
    name = "legacy-range"
    strategy = "range"


class LegacyRoundRobinAssignor(_LegacyAdapter):
    name = "legacy-roundrobin"
    strategy = "roundrobin"
