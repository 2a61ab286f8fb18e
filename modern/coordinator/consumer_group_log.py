"""Consumer group records in `__consumer_offsets`: their bytes, and the group they replay into.

A record's key starts with an int16 that is Kafka's record type (3, 5, 6, 7, 8: see
`modern.coordinator.consumer_group_records`); classic records use 0-2, so one partition holds both kinds and a reader tells
them apart by that prefix. Partitions are stored by topic id as Kafka does; a replay resolves the
ids through the topics the broker knows (a deleted topic's partitions are dropped).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from kafka.protocol.api_data import ApiData

from modern.coordinator import consumer_group_records as records
from modern.coordinator.consumer_group import ConsumerGroup, ConsumerGroupConfig, Member, MemberState

_SCHEMAS = "modern.coordinator.schemas"


class ConsumerGroupMetadataKey(ApiData, load_json=_SCHEMAS):
    pass


class ConsumerGroupMetadataValue(ApiData, load_json=_SCHEMAS):
    pass


class ConsumerGroupMemberMetadataKey(ApiData, load_json=_SCHEMAS):
    pass


class ConsumerGroupMemberMetadataValue(ApiData, load_json=_SCHEMAS):
    pass


class ConsumerGroupTargetAssignmentMetadataKey(ApiData, load_json=_SCHEMAS):
    pass


class ConsumerGroupTargetAssignmentMetadataValue(ApiData, load_json=_SCHEMAS):
    pass


class ConsumerGroupTargetAssignmentMemberKey(ApiData, load_json=_SCHEMAS):
    pass


class ConsumerGroupTargetAssignmentMemberValue(ApiData, load_json=_SCHEMAS):
    pass


class ConsumerGroupCurrentMemberAssignmentKey(ApiData, load_json=_SCHEMAS):
    pass


class ConsumerGroupCurrentMemberAssignmentValue(ApiData, load_json=_SCHEMAS):
    pass


_CLASSES = {
    records.GROUP_METADATA: (ConsumerGroupMetadataKey, ConsumerGroupMetadataValue),
    records.MEMBER_METADATA: (ConsumerGroupMemberMetadataKey, ConsumerGroupMemberMetadataValue),
    records.TARGET_METADATA: (ConsumerGroupTargetAssignmentMetadataKey, ConsumerGroupTargetAssignmentMetadataValue),
    records.TARGET_MEMBER: (ConsumerGroupTargetAssignmentMemberKey, ConsumerGroupTargetAssignmentMemberValue),
    records.CURRENT_ASSIGNMENT: (ConsumerGroupCurrentMemberAssignmentKey, ConsumerGroupCurrentMemberAssignmentValue),
}
_STATE_BYTES = {MemberState.STABLE: 1, MemberState.UNREVOKED_PARTITIONS: 2, MemberState.UNRELEASED_PARTITIONS: 3}
_STATES = {code: state for state, code in _STATE_BYTES.items()}
_VERSION = struct.Struct(">h")


def is_consumer_group_record(key: bytes) -> bool:
    return _VERSION.unpack_from(key)[0] in _CLASSES


# ---------------------------------------------------------------- encoding


def encode(record: records.Record, topic_id: Callable[[str], uuid.UUID]) -> tuple[bytes, bytes | None]:
    key_cls, value_cls = _CLASSES[record.record_type]
    names = {"group_id": record.group_id}
    if record.member_id is not None:
        names["member_id"] = record.member_id
    key = key_cls(version=record.record_type, **names).encode()
    if record.value is None:
        return key, None
    fields = dict(record.value)
    for name in ("topic_partitions", "assigned_partitions", "partitions_pending_revocation"):
        if name in fields:  # every partition list shares one struct type: (topic id, indexes)
            fields[name] = [value_cls.TopicPartitions(topic_id=topic_id(topic), partitions=indexes)
                            for topic, indexes in fields[name]]
    if "state" in fields:
        fields["state"] = _STATE_BYTES[MemberState(fields["state"])]
    if record.record_type == records.MEMBER_METADATA:
        fields["subscribed_topic_regex"] = None
    return key, value_cls(version=0, **fields).encode()


# ---------------------------------------------------------------- replay


def replay(stored: Iterable[tuple[bytes, bytes | None]], topics: Mapping[str, int],
           topic_id: Callable[[str], uuid.UUID], config: ConsumerGroupConfig, now_ms: int) -> dict[str, ConsumerGroup]:
    """Rebuild consumer groups from their records, oldest first. Sessions restart now, as the
    classic replay does; a member still revoking gets a fresh rebalance timeout."""
    names = {topic_id(name): name for name in topics}
    latest: dict[tuple[int, str, str | None], object | None] = {}
    for key, value in stored:
        record_type = _VERSION.unpack_from(key)[0]
        key_cls, value_cls = _CLASSES[record_type]
        decoded_key = key_cls.decode(key)
        member_id = getattr(decoded_key, "member_id", None)
        index = (record_type, decoded_key.group_id, member_id)
        latest.pop(index, None)
        latest[index] = None if value is None else value_cls.decode(value)
    groups: dict[str, ConsumerGroup] = {}

    def group(group_id: str) -> ConsumerGroup:
        if group_id not in groups:
            groups[group_id] = ConsumerGroup(group_id, config, now_ms=now_ms)
        return groups[group_id]

    metadata: dict[tuple[str, str], object] = {}
    current: dict[tuple[str, str], object] = {}
    for (record_type, group_id, member_id), value in latest.items():
        if value is None:
            continue
        if record_type == records.GROUP_METADATA:
            group(group_id).group_epoch = value.epoch
        elif record_type == records.TARGET_METADATA:
            group(group_id).assignment_epoch = value.assignment_epoch
        elif record_type == records.TARGET_MEMBER:
            group(group_id).target[member_id] = _partitions(value.topic_partitions, names)
        elif record_type == records.MEMBER_METADATA:
            metadata[(group_id, member_id)] = value
        elif record_type == records.CURRENT_ASSIGNMENT:
            current[(group_id, member_id)] = value
    for (group_id, member_id), meta in metadata.items():
        restored = group(group_id)
        assignment = current.get((group_id, member_id))
        member = Member(member_id=member_id, instance_id=meta.instance_id, rack_id=meta.rack_id,
                        client_id=meta.client_id, client_host=meta.client_host,
                        subscribed_topics=tuple(meta.subscribed_topic_names), server_assignor=meta.server_assignor,
                        rebalance_timeout_ms=meta.rebalance_timeout_ms)
        if assignment is not None:
            member = replace(member, member_epoch=assignment.member_epoch,
                             previous_epoch=assignment.previous_member_epoch, state=_STATES[assignment.state],
                             assigned=_partitions(assignment.assigned_partitions, names),
                             pending_revocation=_partitions(assignment.partitions_pending_revocation, names))
        restored.restore_member(member, now_ms)
    for restored in groups.values():
        restored.partition_counts = {t: topics[t] for t in sorted({t for m in restored.members.values()
                                                                   for t in m.subscribed_topics}) if t in topics}
    return groups


def _partitions(stored: Iterable, names: Mapping[uuid.UUID, str]) -> frozenset[tuple[str, int]]:
    return frozenset((names[t.topic_id], p) for t in stored if t.topic_id in names for p in t.partitions)
