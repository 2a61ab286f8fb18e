"""The records a consumer group writes to `__consumer_offsets`, named by Kafka's record types.

Kafka keeps a KIP-848 group as a set of keyed records, each replaced by a newer one with the
same key and deleted by a tombstone (value None): the group epoch (type 3), each member's
subscription (5), the target assignment's epoch (6) and each member's part of it (7), and each
member's current assignment and epoch (8). The group emits them in order; `value` is a plain
mapping of the fields Kafka stores, so a writer can encode them and a replay can rebuild the group.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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
