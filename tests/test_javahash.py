"""Java String.hashCode, Kafka's abs and the coordinator partition, against values the JVM prints."""

import pytest

from rebalance.javahash import (
    coordinator_partition,
    java_string_hashcode,
    java_string_sort_key,
    kafka_abs,
)

# (string, String.hashCode() as printed by Java 17)
JVM_HASHES = [
    ("", 0),
    ("group-id", 506313513),
    ("my-group", -1906497762),
    ("consumer-group", -1738392088),
    ("polygenelubricants", -(2**31)),
    ("[t0,0]", -1581112286),
    ("[t1,2]", -1581082433),
    ("[orders,10]", 458862962),
    ("[orders,2]", -1093576553),
    ("é", 233),
    ("a\U0001f600", 1866116),  # a character outside the BMP counts as two UTF-16 code units
]


@pytest.mark.parametrize(("text", "expected"), JVM_HASHES)
def test_hashcode_matches_the_jvm(text, expected):
    assert java_string_hashcode(text) == expected


@pytest.mark.parametrize(
    ("group", "partition"),
    [("", 0), ("group-id", 13), ("my-group", 12), ("consumer-group", 38), ("polygenelubricants", 0)],
)
def test_coordinator_partition_vectors(group, partition):
    assert coordinator_partition(group) == partition


def test_masking_or_python_abs_would_be_wrong():
    # The two tempting shortcuts give different answers: the reason kafka_abs exists.
    assert (java_string_hashcode("my-group") & 0x7FFFFFFF) % 50 == 36
    assert abs(java_string_hashcode("polygenelubricants")) % 50 == 48


def test_kafka_abs():
    assert kafka_abs(-(2**31)) == 0
    assert kafka_abs(-5) == 5
    assert kafka_abs(7) == 7


def test_coordinator_partition_rejects_a_bad_partition_count():
    with pytest.raises(ValueError, match="partitions"):
        coordinator_partition("g", 0)


def test_sort_key_follows_java_compare_to():
    # Java: "\uFF5E".compareTo("\uD83D\uDE00") > 0 (code units); Python's str order says the opposite.
    assert "\uff5e" < "\U0001f600"
    assert java_string_sort_key("\uff5e") > java_string_sort_key("\U0001f600")
    assert sorted(["c-2", "c-10", "c-1"], key=java_string_sort_key) == ["c-1", "c-10", "c-2"]
