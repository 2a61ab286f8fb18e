"""Offset commit records: one committed offset of a group, whatever its kind.

  key v0/v1 OffsetCommitKey(group, topic, partition)  -> OffsetCommitValue (v3; v1 when an expiry is set)

Classic and consumer groups commit the same records, as in Kafka; `OffsetAndMetadata` is the value in the
coordinator's terms (Kafka's OffsetAndMetadata, read from an OffsetCommitValue).
"""

from __future__ import annotations

from dataclasses import dataclass

from kafka.protocol.api_data import ApiData

from modern.coordinator.records import SCHEMAS, key_version


class OffsetCommitKey(ApiData, load_json=SCHEMAS):
    pass


class OffsetCommitValue(ApiData, load_json=SCHEMAS):
    pass


KEY_VERSIONS = (0, 1)
OFFSET_KEY_VERSION = 1
OFFSET_VALUE_VERSION = 3
OFFSET_VALUE_VERSION_WITH_EXPIRY = 1


@dataclass(frozen=True)
class OffsetAndMetadata:
    offset: int
    metadata: str = ""
    leader_epoch: int = -1
    commit_timestamp_ms: int = -1
    expire_timestamp_ms: int | None = None


@dataclass(frozen=True)
class OffsetRecord:
    group_id: str
    topic: str
    partition: int
    value: OffsetAndMetadata | None      # None: tombstone


def is_offset_commit(key: bytes) -> bool:
    return key_version(key) in KEY_VERSIONS


def offset_commit_record(group_id: str, topic: str, partition: int,
                         value: OffsetAndMetadata | None) -> tuple[bytes, bytes | None]:
    """(key, value) for one committed offset; value None writes a tombstone."""
    key = OffsetCommitKey(version=OFFSET_KEY_VERSION, group=group_id, topic=topic, partition=partition).encode()
    if value is None:
        return key, None
    if value.expire_timestamp_ms is not None:  # only v1 can carry an expiry
        body = OffsetCommitValue(version=OFFSET_VALUE_VERSION_WITH_EXPIRY, offset=value.offset,
                                 metadata=value.metadata, commit_timestamp=value.commit_timestamp_ms,
                                 expire_timestamp=value.expire_timestamp_ms)
    else:
        body = OffsetCommitValue(version=OFFSET_VALUE_VERSION, offset=value.offset, leader_epoch=value.leader_epoch,
                                 metadata=value.metadata, commit_timestamp=value.commit_timestamp_ms)
    return key, body.encode()


def decode_offset_commit(key: bytes, value: bytes | None) -> OffsetRecord:
    k = OffsetCommitKey.decode(key)
    if value is None:
        return OffsetRecord(k.group, k.topic, k.partition, None)
    v = OffsetCommitValue.decode(value)
    expire = v.expire_timestamp if v.version == 1 else None
    epoch = v.leader_epoch if v.version >= 3 else -1
    return OffsetRecord(k.group, k.topic, k.partition,
                        OffsetAndMetadata(v.offset, v.metadata, epoch, v.commit_timestamp, expire))
