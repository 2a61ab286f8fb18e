"""The 0.8.2 assignors: thread ids, string order of threads, roundrobin in JVM hash order."""

import pytest

from rebalance.assignors.legacy import legacy_assign, legacy_range, legacy_roundrobin, thread_ids
from rebalance.types import TopicPartition


def parts(topic, *numbers):
    return [TopicPartition(topic, n) for n in numbers]


def test_thread_ids():
    assert thread_ids("g_host-1700000000000-1a2b3c4d", 2) == [
        "g_host-1700000000000-1a2b3c4d-0",
        "g_host-1700000000000-1a2b3c4d-1",
    ]


def test_range_over_threads_of_several_consumers():
    result = legacy_range({"t0": 5}, {"g_c1": {"t0": 2}, "g_c2": {"t0": 1}})
    assert result == {"g_c1-0": parts("t0", 0, 1), "g_c1-1": parts("t0", 2, 3), "g_c2-0": parts("t0", 4)}


def test_range_sorts_threads_as_strings():
    # eleven streams: "c-10" sorts between "c-1" and "c-2", so it gets partition 2
    result = legacy_range({"t0": 11}, {"c": {"t0": 11}})
    assert result["c-10"] == parts("t0", 2)
    assert result["c-2"] == parts("t0", 3)


def test_range_per_topic_with_different_subscribers():
    result = legacy_range({"a": 3, "b": 2}, {"g_x": {"a": 1, "b": 1}, "g_y": {"a": 1}})
    assert result == {"g_x-0": parts("a", 0, 1) + parts("b", 0, 1), "g_y-0": parts("a", 2)}


def test_more_threads_than_partitions_leaves_threads_idle():
    result = legacy_range({"t0": 1}, {"g_a": {"t0": 1}, "g_b": {"t0": 1}})
    assert result == {"g_a-0": parts("t0", 0), "g_b-0": []}


def test_roundrobin_follows_jvm_hash_order():
    # Java sorts "[topic,partition]" by hashCode as:
    # [orders,0..9], [audit,0], [audit,1], [audit,2], [orders,10], [orders,11]
    result = legacy_roundrobin({"orders": 12, "audit": 3}, {"g_a": {"orders": 1, "audit": 1}, "g_b": {"orders": 1, "audit": 1}})
    assert result["g_a-0"] == sorted(parts("orders", 0, 2, 4, 6, 8, 11) + parts("audit", 0, 2))
    assert result["g_b-0"] == sorted(parts("orders", 1, 3, 5, 7, 9, 10) + parts("audit", 1))


def test_roundrobin_allows_different_stream_counts_per_consumer():
    # 0.8.2 requires the same thread set for every topic, not the same count for every consumer
    result = legacy_roundrobin({"t0": 3, "t1": 3}, {"g_a": {"t0": 2, "t1": 2}, "g_b": {"t0": 1, "t1": 1}})
    assert sorted(result) == ["g_a-0", "g_a-1", "g_b-0"]
    assert sum(len(v) for v in result.values()) == 6


@pytest.mark.parametrize(
    "subscriptions",
    [
        {"g_a": {"t0": 1}, "g_b": {"t0": 1, "t1": 1}},          # different topics
        {"g_a": {"t0": 1, "t1": 2}, "g_b": {"t0": 1, "t1": 1}},  # one consumer, two stream counts
    ],
)
def test_roundrobin_rejects_unequal_subscriptions(subscriptions):
    with pytest.raises(ValueError, match="same topics"):
        legacy_roundrobin({"t0": 2, "t1": 2}, subscriptions)


@pytest.mark.parametrize(
    ("topics", "subscriptions", "message"),
    [
        ({"t0": 1}, {}, "no consumers"),
        ({"t0": -2}, {"g_a": {"t0": 1}}, "invalid partition count"),
        ({"t0": 1}, {"g_a": {"t9": 1}}, "unknown topic 't9'"),
        ({"t0": 1}, {"g_a": {"t0": 0}}, "stream count"),
    ],
)
def test_bad_input(topics, subscriptions, message):
    for strategy in ("range", "roundrobin"):
        with pytest.raises(ValueError, match=message):
            legacy_assign(strategy, topics, subscriptions)


def test_unknown_strategy():
    with pytest.raises(ValueError, match="range or roundrobin"):
        legacy_assign("sticky", {"t0": 1}, {"g_a": {"t0": 1}})
