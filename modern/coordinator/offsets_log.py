"""The `__consumer_offsets` records: Kafka's binary key/value schemas, compaction and replay.

Two kinds of record share the topic, told apart by the key's int16 version prefix:
  key v0/v1 OffsetCommitKey(group, topic, partition)   -> OffsetCommitValue (v3; v1 when an expiry is set)
  key v2    GroupMetadataKey(group)                    -> GroupMetadataValue (v3)
A null value (tombstone) deletes its key. The schemas live in modern/coordinator/schemas/*.json, in the
same JSON form Kafka describes its messages with, and kafka-python's codec reads and writes
them, so the bytes are the ones a Kafka broker would store.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

from kafka.protocol.api_data import ApiData

from modern.coordinator.classic_group import (
    ClassicGroup,
    ClassicGroupState,
    GroupConfig,
    Member,
    OffsetAndMetadata,
)


class OffsetCommitKey(ApiData, load_json="modern.coordinator.schemas"):
    pass


class OffsetCommitValue(ApiData, load_json="modern.coordinator.schemas"):
    pass


class GroupMetadataKey(ApiData, load_json="modern.coordinator.schemas"):
    pass


class GroupMetadataValue(ApiData, load_json="modern.coordinator.schemas"):
    pass


OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
OFFSET_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_VALUE_VERSION = 3

_VERSION = struct.Struct(">h")


# ---------------------------------------------------------------- encoding


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


def group_metadata_record(group: ClassicGroup, state_timestamp_ms: int | None = None) -> tuple[bytes, bytes | None]:
    """(key, value) for a group's current metadata; a Dead group gets a tombstone.

    `state_timestamp_ms` is the wall-clock time to store (the group itself runs on the
    caller's monotonic clock); by default the group's own timestamp is written.
    """
    key = GroupMetadataKey(version=GROUP_KEY_VERSION, group=group.group_id).encode()
    if group.state is ClassicGroupState.DEAD:
        return key, None
    members = [
        GroupMetadataValue.MemberMetadata(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            rebalance_timeout=m.rebalance_timeout_ms,
            session_timeout=m.session_timeout_ms,
            subscription=m.metadata_for(group.protocol_name),
            assignment=m.assignment,
        )
        for m in group.members.values()
    ]
    value = GroupMetadataValue(
        version=GROUP_VALUE_VERSION,
        protocol_type=group.protocol_type or "",
        generation=group.generation_id,
        protocol=group.protocol_name,
        leader=group.leader_id,
        current_state_timestamp=group.state_timestamp_ms if state_timestamp_ms is None else state_timestamp_ms,
        members=members,
    )
    return key, value.encode()


# ---------------------------------------------------------------- decoding


@dataclass(frozen=True)
class OffsetRecord:
    group_id: str
    topic: str
    partition: int
    value: OffsetAndMetadata | None      # None: tombstone


@dataclass(frozen=True)
class GroupRecord:
    group_id: str
    value: object | None                 # a decoded GroupMetadataValue, or None: tombstone


def decode_record(key: bytes, value: bytes | None) -> OffsetRecord | GroupRecord:
    (key_version,) = _VERSION.unpack_from(key)
    if key_version in (0, 1):
        k = OffsetCommitKey.decode(key)
        if value is None:
            return OffsetRecord(k.group, k.topic, k.partition, None)
        v = OffsetCommitValue.decode(value)
        expire = v.expire_timestamp if v.version == 1 else None
        epoch = v.leader_epoch if v.version >= 3 else -1
        return OffsetRecord(k.group, k.topic, k.partition,
                            OffsetAndMetadata(v.offset, v.metadata, epoch, v.commit_timestamp, expire))
    if key_version == GROUP_KEY_VERSION:
        k = GroupMetadataKey.decode(key)
        return GroupRecord(k.group, None if value is None else GroupMetadataValue.decode(value))
    raise ValueError(f"unknown __consumer_offsets key version {key_version}")


def compact(records: Iterable[tuple[bytes, bytes | None]]) -> list[tuple[bytes, bytes | None]]:
    """Log compaction: the last value of each key, in the order of those last writes."""
    latest: dict[bytes, bytes | None] = {}
    for key, value in records:
        latest.pop(key, None)
        latest[key] = value
    return list(latest.items())


# ---------------------------------------------------------------- replay


@dataclass
class LoadedGroups:
    """What replaying a partition yields: groups (with their offsets) by id."""

    groups: dict[str, ClassicGroup] = field(default_factory=dict)


def replay(records: Iterable[tuple[bytes, bytes | None]], config: GroupConfig, now_ms: int) -> LoadedGroups:
    """Rebuild groups and committed offsets from a partition, oldest record first.

    A group with members comes back Stable (its members' sessions restart now), one without
    comes back Empty; a group known only through offsets is an Empty group holding them.
    """
    metadata: dict[str, object | None] = {}
    offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
    for key, value in records:
        record = decode_record(key, value)
        if isinstance(record, OffsetRecord):
            group_offsets = offsets.setdefault(record.group_id, {})
            if record.value is None:
                group_offsets.pop((record.topic, record.partition), None)
            else:
                group_offsets[(record.topic, record.partition)] = record.value
        else:
            metadata[record.group_id] = record.value
    loaded = LoadedGroups()
    for group_id in sorted(set(metadata) | set(offsets)):
        value = metadata.get(group_id)
        if value is None and not offsets.get(group_id):
            continue  # deleted
        group = ClassicGroup(group_id, config, now_ms=now_ms)
        if value is not None:
            group.restore(
                generation_id=value.generation,
                protocol_type=value.protocol_type or None,
                protocol_name=value.protocol,
                leader_id=value.leader,
                members=[_member_from(m, value.protocol, value.protocol_type) for m in value.members],
                now_ms=now_ms,
            )
        group.offsets.update(offsets.get(group_id, {}))
        loaded.groups[group_id] = group
    return loaded


def _member_from(stored, protocol: str | None, protocol_type: str) -> Member:
    return Member(
        member_id=stored.member_id,
        group_instance_id=stored.group_instance_id,
        client_id=stored.client_id,
        client_host=stored.client_host,
        session_timeout_ms=stored.session_timeout,
        rebalance_timeout_ms=stored.rebalance_timeout,
        protocol_type=protocol_type,
        protocols=((protocol, stored.subscription),) if protocol else (),
        assignment=stored.assignment,
    )
