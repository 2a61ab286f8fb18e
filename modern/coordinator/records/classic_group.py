"""Classic group records: a classic group's metadata and its members, written whole at each change.

  key v2 GroupMetadataKey(group)  -> GroupMetadataValue (v3)

A Dead group is written as a tombstone. The group's committed offsets are offset commit records
(`offset_commit.py`), as in Kafka.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafka.protocol.api_data import ApiData

from modern.coordinator.classic_group import ClassicGroup, ClassicGroupState, Member
from modern.coordinator.records import SCHEMAS, key_version


class GroupMetadataKey(ApiData, load_json=SCHEMAS):
    pass


class GroupMetadataValue(ApiData, load_json=SCHEMAS):
    pass


GROUP_KEY_VERSION = 2
GROUP_VALUE_VERSION = 3


@dataclass(frozen=True)
class GroupRecord:
    group_id: str
    value: object | None                 # a decoded GroupMetadataValue, or None: tombstone


def is_group_metadata(key: bytes) -> bool:
    return key_version(key) == GROUP_KEY_VERSION


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


def decode_group_metadata(key: bytes, value: bytes | None) -> GroupRecord:
    k = GroupMetadataKey.decode(key)
    return GroupRecord(k.group, None if value is None else GroupMetadataValue.decode(value))


def members_from(value) -> list[Member]:
    """The members a decoded GroupMetadataValue holds, as the group keeps them."""
    return [_member_from(m, value.protocol, value.protocol_type) for m in value.members]


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
