"""The order in which Java's HashMap and HashSet hand back their keys, where Kafka's assignor reads it.

Kafka's `uniform` assignor walks members, topics and partitions in whatever order the Java
collections holding them iterate, and the result depends on that order: in Kafka 4.0 the first
P mod N members of the walk are the ones allowed one partition more. To give the same answers the
lab has to walk in the same order, so this module reproduces it.

How a Java hash table iterates: it is an array of 2^k buckets. A key with hash code `h` lives in
bucket `(h ^ (h >>> 16)) & (2^k - 1)`: the hash's high half folded onto its low half, then its
low k bits. Iteration goes bucket by bucket from 0; keys sharing a bucket come in the order they
were inserted. So three things decide the order: each key's `hashCode()`, the number of buckets,
and, for keys that share a bucket, insertion order.

The number of buckets depends on how the table was built:
- filled one `put` at a time from `new HashMap<>()`: 16 buckets, doubled whenever the entries
  exceed three quarters of them (`table_size_after_puts`);
- copied whole, `new HashSet<>(collection)`: on Java 21, the JVM of Kafka's own images, room for
  max(n, 12) entries at a load of 0.75, rounded up to a power of two (`table_size_for_copy`).

Not reproduced: a bucket holding eight or more keys in a table of 64 or more is turned into a tree
(vanishingly rare for random ids); and where keys share a bucket the caller's order stands in for
the insertion order Kafka happened to have.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterable
from typing import TypeVar

from rebalance.javahash import java_string_hashcode

K = TypeVar("K")

_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF


def bucket(hash_code: int, table_size: int) -> int:
    """The bucket of a key with this (signed 32-bit) hash code, in a table of `table_size` buckets."""
    h = hash_code & _MASK32
    return (h ^ (h >> 16)) & (table_size - 1)


def table_size_after_puts(entries: int) -> int:
    """Buckets of a `new HashMap<>()` after `entries` puts: 16, doubled past three quarters full."""
    size = 16
    while entries > size * 3 // 4:
        size *= 2
    return size


def table_size_for_copy(entries: int) -> int:
    """Buckets of `new HashSet<>(collection)` of `entries` elements (Java 19 and later)."""
    needed = -(-max(entries, 12) * 4 // 3)  # ceil(max(n, 12) / 0.75)
    size = 1
    while size < needed:
        size *= 2
    return size


def java_order(keys: Iterable[K], hash_code: Callable[[K], int], table_size: int) -> list[K]:
    """`keys` in the order a Java hash table of `table_size` buckets iterates them.

    Keys that share a bucket keep their order in `keys` (Python's sort is stable), standing in
    for the order they were inserted in."""
    return sorted(keys, key=lambda key: bucket(hash_code(key), table_size))


def uuid_hashcode(topic_id: uuid.UUID) -> int:
    """Kafka's `Uuid.hashCode()`: the two 64-bit halves xor-ed, then that folded to 32 bits."""
    both = ((topic_id.int >> 64) ^ topic_id.int) & _MASK64
    return ((both >> 32) ^ both) & _MASK32


def uuid_sort_key(topic_id: uuid.UUID) -> tuple[int, int]:
    """Kafka's `Uuid.compareTo`: the most significant half first, each compared as a signed long."""
    def signed(half: int) -> int:
        return half - (1 << 64) if half >> 63 else half
    return signed(topic_id.int >> 64), signed(topic_id.int & _MASK64)


@functools.lru_cache(maxsize=1 << 16)
def _member_id_hashcode(member_id: str) -> int:
    """A group's member ids come back at every computation: hash each one once."""
    return java_string_hashcode(member_id)


def member_map_order(member_ids: Iterable[str]) -> list[str]:
    """The coordinator's member map (`TargetAssignmentBuilder` fills a `new HashMap<>()` with
    every member, the newcomers last) as the assignor walks it."""
    ids = list(member_ids)
    return java_order(ids, _member_id_hashcode, table_size_after_puts(len(ids)))


def partition_set_order(partitions: Iterable[int]) -> list[int]:
    """A member's partitions of one topic as it holds them: a `HashSet<Integer>` rebuilt from the
    target-assignment record. An Integer's hash is its value, so partitions below the table size
    come out ascending; larger ones interleave by remainder."""
    ordered = sorted(partitions)  # ascending stands in for the record's order within a bucket
    size = table_size_for_copy(len(ordered))
    if not ordered or ordered[-1] < size:
        return ordered            # one partition per bucket, in bucket order
    return java_order(ordered, lambda p: p, size)
