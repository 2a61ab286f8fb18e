"""Java's String.hashCode and Kafka's abs, where the lab must agree with the JVM bit for bit.

Two places depend on them: the coordinator lookup (`abs(groupId.hashCode) % 50`) and the
0.8 roundrobin assignor, which orders partitions by the hash of "[topic,partition]".
Java hashes UTF-16 code units with 32-bit wrap-around; Python's str is code points and
its ints never overflow, so both differences are handled here.
"""

from __future__ import annotations

INT_MIN = -(2**31)
OFFSETS_TOPIC_PARTITIONS = 50  # offsets.topic.num.partitions default


def _to_int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - 2**32 if value >= 2**31 else value


def java_string_hashcode(text: str) -> int:
    """`text.hashCode()` as the JVM computes it: h = 31*h + c over UTF-16 code units, signed 32-bit."""
    units = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return _to_int32(h)


def kafka_abs(n: int) -> int:
    """Kafka's Utils.abs: the absolute value, except abs(Integer.MIN_VALUE) is 0 rather than negative."""
    return 0 if n == INT_MIN else abs(n)


def coordinator_partition(group_id: str, partitions: int = OFFSETS_TOPIC_PARTITIONS) -> int:
    """The __consumer_offsets partition whose leader coordinates `group_id`."""
    if partitions <= 0:
        raise ValueError(f"partitions must be positive, got {partitions}")
    return kafka_abs(java_string_hashcode(group_id)) % partitions


def java_string_sort_key(text: str) -> bytes:
    """Sort key matching Java's String.compareTo (UTF-16 code unit order, not code point order)."""
    return text.encode("utf-16-be")
