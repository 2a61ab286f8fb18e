"""Reading a `__consumer_offsets` partition back: the groups and committed offsets its records hold.

A broker that takes a partition over replays it, oldest record first (Kafka's GroupCoordinatorShard.replay,
which hands each record to GroupMetadataManager.replay or OffsetMetadataManager.replay). Sessions restart
at the replay: a group with members comes back Stable (classic) or where its records left it (consumer),
and every member's session timeout counts from now.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from modern.coordinator.classic_group import ClassicGroup, GroupConfig
from modern.coordinator.consumer_group import ConsumerGroup, ConsumerGroupConfig, Member, MemberState
from modern.coordinator.records import consumer_group as consumer_records
from modern.coordinator.records import key_version
from modern.coordinator.records.classic_group import (
    GroupRecord,
    decode_group_metadata,
    is_group_metadata,
    members_from,
)
from modern.coordinator.records.offset_commit import (
    OffsetAndMetadata,
    OffsetRecord,
    decode_offset_commit,
    is_offset_commit,
)


def decode_record(key: bytes, value: bytes | None) -> OffsetRecord | GroupRecord:
    """A record of the classic protocol's kinds: an offset commit or a classic group's metadata."""
    if is_offset_commit(key):
        return decode_offset_commit(key, value)
    if is_group_metadata(key):
        return decode_group_metadata(key, value)
    raise ValueError(f"unknown __consumer_offsets key version {key_version(key)}")


# ---------------------------------------------------------------- classic groups and offsets


@dataclass
class LoadedGroups:
    """What replaying a partition yields: groups (with their offsets) by id."""

    groups: dict[str, ClassicGroup] = field(default_factory=dict)


def replay_offsets_and_classic_groups(records: Iterable[tuple[bytes, bytes | None]], config: GroupConfig,
                                      now_ms: int) -> LoadedGroups:
    """Rebuild classic groups and every committed offset from a partition, oldest record first.

    A group with members comes back Stable (its members' sessions restart now), one without
    comes back Empty; a group known only through offsets is an Empty group holding them (a
    consumer group's offsets move to it once the consumer records are replayed).
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
                members=members_from(value),
                now_ms=now_ms,
            )
        group.offsets.update(offsets.get(group_id, {}))
        loaded.groups[group_id] = group
    return loaded


# ---------------------------------------------------------------- consumer groups


def replay_consumer_groups(stored: Iterable[tuple[bytes, bytes | None]], topics: Mapping[str, int],
                           topic_id: Callable[[str], uuid.UUID], config: ConsumerGroupConfig,
                           now_ms: int) -> dict[str, ConsumerGroup]:
    """Rebuild consumer groups from their records, oldest first. Sessions restart now, as the
    classic replay does; a member still revoking gets a fresh rebalance timeout. Partitions are
    stored by topic id, resolved through the topics the broker knows (a deleted topic's are dropped)."""
    names = {topic_id(name): name for name in topics}
    latest: dict[tuple[int, str, str | None], object | None] = {}
    for key, value in stored:
        index, decoded = consumer_records.decode(key, value)
        latest.pop(index, None)
        latest[index] = decoded
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
        if record_type == consumer_records.GROUP_METADATA:
            group(group_id).group_epoch = value.epoch
        elif record_type == consumer_records.TARGET_METADATA:
            group(group_id).assignment_epoch = value.assignment_epoch
        elif record_type == consumer_records.TARGET_MEMBER:
            group(group_id).target[member_id] = consumer_records.partitions_by_name(value.topic_partitions, names)
        elif record_type == consumer_records.MEMBER_METADATA:
            metadata[(group_id, member_id)] = value
        elif record_type == consumer_records.CURRENT_ASSIGNMENT:
            current[(group_id, member_id)] = value
    for (group_id, member_id), meta in metadata.items():
        restored = group(group_id)
        assignment = current.get((group_id, member_id))
        member = Member(member_id=member_id, instance_id=meta.instance_id, rack_id=meta.rack_id,
                        client_id=meta.client_id, client_host=meta.client_host,
                        subscribed_topics=tuple(meta.subscribed_topic_names), server_assignor=meta.server_assignor,
                        rebalance_timeout_ms=meta.rebalance_timeout_ms)
        if assignment is not None:
            member = replace(
                member, member_epoch=assignment.member_epoch, previous_epoch=assignment.previous_member_epoch,
                state=MemberState(consumer_records.member_state(assignment.state)),
                assigned=consumer_records.partitions_by_name(assignment.assigned_partitions, names),
                pending_revocation=consumer_records.partitions_by_name(assignment.partitions_pending_revocation,
                                                                       names))
        restored.restore_member(member, now_ms)
    for restored in groups.values():
        restored.partition_counts = {t: topics[t] for t in sorted({t for m in restored.members.values()
                                                                   for t in m.subscribed_topics}) if t in topics}
    return groups
