"""Consumer group records: what a KIP-848 group writes to `__consumer_offsets`, named by Kafka's record types.

Kafka keeps a consumer group as a set of keyed records, each replaced by a newer one with the same key
and deleted by a tombstone (value None): the group epoch (type 3), each member's subscription (5), the
target assignment's epoch (6) and each member's part of it (7), and each member's current assignment
and epoch (8). The type is the key's int16 prefix; classic records use 0 to 2, so one partition holds
both kinds. The group emits `Record`s in order, each `value` a plain mapping of the fields Kafka stores;
`encode` turns one into bytes, storing partitions by topic id as Kafka does, and `decode` reads it back.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kafka.protocol.api_data import ApiData

from modern.coordinator.records import SCHEMAS, key_version

GROUP_METADATA = 3             # ConsumerGroupMetadata: the group epoch
MEMBER_METADATA = 5            # ConsumerGroupMemberMetadata: subscription, assignor, timeouts
TARGET_METADATA = 6            # ConsumerGroupTargetAssignmentMetadata: the assignment epoch
TARGET_MEMBER = 7              # ConsumerGroupTargetAssignmentMember: one member's target
CURRENT_ASSIGNMENT = 8         # ConsumerGroupCurrentMemberAssignment: epochs, state, owned, pending


@dataclass(frozen=True, kw_only=True)
class Record:
    record_type: int
    group_id: str
    member_id: str | None
    value: Mapping[str, Any] | None      # None: a tombstone


# ---------------------------------------------------------------- the records a group emits


def _partitions(assignment) -> list[list]:
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(assignment):
        by_topic.setdefault(topic, []).append(index)
    return [[topic, indexes] for topic, indexes in by_topic.items()]


def group_metadata(group_id: str, epoch: int) -> Record:
    return Record(record_type=GROUP_METADATA, group_id=group_id, member_id=None, value={"epoch": epoch})


def target_metadata(group_id: str, assignment_epoch: int) -> Record:
    return Record(record_type=TARGET_METADATA, group_id=group_id, member_id=None,
                  value={"assignment_epoch": assignment_epoch})


def member_metadata(group_id: str, member_id: str, member) -> Record:
    value = None if member is None else {
        "instance_id": member.instance_id, "rack_id": member.rack_id, "client_id": member.client_id,
        "client_host": member.client_host, "subscribed_topic_names": list(member.subscribed_topics),
        "server_assignor": member.server_assignor, "rebalance_timeout_ms": member.rebalance_timeout_ms}
    return Record(record_type=MEMBER_METADATA, group_id=group_id, member_id=member_id, value=value)


def target_member(group_id: str, member_id: str, partitions) -> Record:
    value = None if partitions is None else {"topic_partitions": _partitions(partitions)}
    return Record(record_type=TARGET_MEMBER, group_id=group_id, member_id=member_id, value=value)


def current_assignment(group_id: str, member_id: str, member) -> Record:
    value = None if member is None else {
        "member_epoch": member.member_epoch, "previous_member_epoch": member.previous_epoch,
        "state": member.state.value, "assigned_partitions": _partitions(member.assigned),
        "partitions_pending_revocation": _partitions(member.pending_revocation)}
    return Record(record_type=CURRENT_ASSIGNMENT, group_id=group_id, member_id=member_id, value=value)


# ---------------------------------------------------------------- their bytes


class ConsumerGroupMetadataKey(ApiData, load_json=SCHEMAS):
    pass


class ConsumerGroupMetadataValue(ApiData, load_json=SCHEMAS):
    pass


class ConsumerGroupMemberMetadataKey(ApiData, load_json=SCHEMAS):
    pass


class ConsumerGroupMemberMetadataValue(ApiData, load_json=SCHEMAS):
    pass


class ConsumerGroupTargetAssignmentMetadataKey(ApiData, load_json=SCHEMAS):
    pass


class ConsumerGroupTargetAssignmentMetadataValue(ApiData, load_json=SCHEMAS):
    pass


class ConsumerGroupTargetAssignmentMemberKey(ApiData, load_json=SCHEMAS):
    pass


class ConsumerGroupTargetAssignmentMemberValue(ApiData, load_json=SCHEMAS):
    pass


class ConsumerGroupCurrentMemberAssignmentKey(ApiData, load_json=SCHEMAS):
    pass


class ConsumerGroupCurrentMemberAssignmentValue(ApiData, load_json=SCHEMAS):
    pass


_CLASSES = {
    GROUP_METADATA: (ConsumerGroupMetadataKey, ConsumerGroupMetadataValue),
    MEMBER_METADATA: (ConsumerGroupMemberMetadataKey, ConsumerGroupMemberMetadataValue),
    TARGET_METADATA: (ConsumerGroupTargetAssignmentMetadataKey, ConsumerGroupTargetAssignmentMetadataValue),
    TARGET_MEMBER: (ConsumerGroupTargetAssignmentMemberKey, ConsumerGroupTargetAssignmentMemberValue),
    CURRENT_ASSIGNMENT: (ConsumerGroupCurrentMemberAssignmentKey, ConsumerGroupCurrentMemberAssignmentValue),
}
# A member's reconciliation state (consumer_group.MemberState's values) as Kafka stores it: one byte.
_STATE_BYTES = {"stable": 1, "unrevoked_partitions": 2, "unreleased_partitions": 3}
_STATES = {code: state for state, code in _STATE_BYTES.items()}


def is_consumer_group_record(key: bytes) -> bool:
    return key_version(key) in _CLASSES


def encode(record: Record, topic_id: Callable[[str], uuid.UUID]) -> tuple[bytes, bytes | None]:
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
        fields["state"] = _STATE_BYTES[fields["state"]]
    if record.record_type == MEMBER_METADATA:
        fields["subscribed_topic_regex"] = None
    return key, value_cls(version=0, **fields).encode()


def decode(key: bytes, value: bytes | None) -> tuple[tuple[int, str, str | None], object | None]:
    """((record type, group id, member id or None), the decoded value or None for a tombstone)."""
    record_type = key_version(key)
    key_cls, value_cls = _CLASSES[record_type]
    decoded_key = key_cls.decode(key)
    member_id = getattr(decoded_key, "member_id", None)
    return (record_type, decoded_key.group_id, member_id), None if value is None else value_cls.decode(value)


def member_state(stored: int) -> str:
    """A stored state byte as consumer_group.MemberState's value."""
    return _STATES[stored]


def partitions_by_name(stored: Iterable, names: Mapping[uuid.UUID, str]) -> frozenset[tuple[str, int]]:
    """Stored (topic id, indexes) back to (topic, partition); a topic the broker no longer knows is dropped."""
    return frozenset((names[t.topic_id], p) for t in stored if t.topic_id in names for p in t.partitions)
