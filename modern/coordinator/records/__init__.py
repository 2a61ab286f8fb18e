"""The records the group coordinator writes to `__consumer_offsets`, one module per kind.

Every key starts with an int16, its version, which tells the kinds apart, so one partition holds them all:
  0, 1        OffsetCommitKey -> OffsetCommitValue      `offset_commit.py`: an offset, whatever the group's kind
  2           GroupMetadataKey -> GroupMetadataValue    `classic_group.py`: a classic group and its members
  3, 5 to 8   the ConsumerGroup* keys and values        `consumer_group.py`: a consumer group, record by record
A null value (a tombstone) deletes its key. The schemas live in modern/coordinator/schemas/*.json, in the
same JSON form Kafka describes its messages with, and kafka-python's codec reads and writes them, so the
bytes are the ones a Kafka broker would store. Reading a partition back into groups is `replay.py`'s.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

SCHEMAS = "modern.coordinator.schemas"

_KEY_VERSION = struct.Struct(">h")


def key_version(key: bytes) -> int:
    """The int16 a key starts with: which kind of record it is."""
    return _KEY_VERSION.unpack_from(key)[0]


def compact(records: Iterable[tuple[bytes, bytes | None]]) -> list[tuple[bytes, bytes | None]]:
    """Log compaction: the last value of each key, in the order of those last writes."""
    latest: dict[bytes, bytes | None] = {}
    for key, value in records:
        latest.pop(key, None)
        latest[key] = value
    return list(latest.items())
