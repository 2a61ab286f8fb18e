"""__consumer_offsets records: byte-exact schemas, tombstones, compaction and replay."""

from __future__ import annotations

import itertools

from modern.classic.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from modern.common import errors
from modern.coordinator.classic_group import (
    ClassicGroup,
    ClassicGroupState,
    GroupConfig,
    Heartbeat,
    JoinGroup,
    SyncGroup,
)
from modern.coordinator.records import compact
from modern.coordinator.records.classic_group import GroupRecord, group_metadata_record
from modern.coordinator.records.offset_commit import OffsetAndMetadata, OffsetRecord, offset_commit_record
from modern.coordinator.replay import decode_record, replay_offsets_and_classic_groups
from rebalance.types import Assignment, Subscription, TopicPartition

CONFIG = GroupConfig(initial_rebalance_delay_ms=0)


def test_subscription_v0_is_byte_exact():
    # version 0 | one topic | "t0" | null user data
    assert encode_subscription(Subscription(topics=("t0",)), version=0) == bytes.fromhex("0000 00000001 00027430 ffffffff")


def test_subscription_v2_round_trips_owned_partitions_and_generation():
    sub = Subscription(topics=("a", "b"), owned_partitions=(TopicPartition("a", 1), TopicPartition("b", 0)),
                       generation=7)
    data = encode_subscription(sub)
    assert data[:2] == b"\x00\x02"
    assert decode_subscription(data) == sub


def test_assignment_round_trip_and_bytes():
    data = encode_assignment(Assignment((TopicPartition("t0", 1), TopicPartition("t0", 0))))
    # version 0 | one topic | "t0" | two partitions 0, 1 | null user data
    assert data == bytes.fromhex("0000 00000001 00027430 00000002 00000000 00000001 ffffffff")
    assert decode_assignment(data).partitions == (TopicPartition("t0", 0), TopicPartition("t0", 1))
    assert decode_assignment(b"").partitions == ()


def test_offset_commit_key_v1_and_value_v3_bytes():
    key, value = offset_commit_record("g", "t", 3, OffsetAndMetadata(5, "", -1, 7))
    assert key == bytes.fromhex("0001 0001 67 0001 74 00000003")
    assert value == bytes.fromhex("0003 0000000000000005 ffffffff 0000 0000000000000007")


def test_offset_commit_value_v1_when_an_expiry_is_set():
    _, value = offset_commit_record("g", "t", 3, OffsetAndMetadata(5, "m", -1, 7, expire_timestamp_ms=9))
    assert value == bytes.fromhex("0001 0000000000000005 0001 6d 0000000000000007 0000000000000009")
    record = decode_record(*offset_commit_record("g", "t", 3, OffsetAndMetadata(5, "m", -1, 7, 9)))
    assert record == OffsetRecord("g", "t", 3, OffsetAndMetadata(5, "m", -1, 7, 9))


def test_group_metadata_key_v2_and_value_v3_bytes():
    group = ClassicGroup("g", CONFIG, now_ms=5, new_member_id=lambda prefix: "m")
    group.handle_join(JoinGroup(client_id="c", client_host="/h", session_timeout_ms=6000, rebalance_timeout_ms=1,
                                protocol_type="consumer", protocols=(("range", b"s"),)), 5, "t")
    group.tick(5)
    group.handle_sync(SyncGroup(member_id="m", generation_id=1, assignments={"m": b"a"}), 5, "s")
    key, value = group_metadata_record(group)
    assert key == bytes.fromhex("0002 0001 67")
    assert value == bytes.fromhex(
        "0003"                          # value version 3
        "0008" + b"consumer".hex() +    # protocol_type
        "00000001"                      # generation
        "0005" + b"range".hex() +       # protocol
        "0001 6d"                       # leader "m"
        "0000000000000005"              # current_state_timestamp
        "00000001"                      # one member
        "0001 6d"                       # member_id
        "ffff"                          # group_instance_id: null
        "0001 63"                       # client_id
        "0002 2f68"                     # client_host "/h"
        "00000001"                      # rebalance_timeout
        "00001770"                      # session_timeout 6000
        "00000001 73"                   # subscription b"s"
        "00000001 61"                   # assignment b"a"
    )


def test_tombstones_and_compaction():
    k1, v1 = offset_commit_record("g", "t", 0, OffsetAndMetadata(1, "", -1, 1))
    _, v2 = offset_commit_record("g", "t", 0, OffsetAndMetadata(2, "", -1, 2))
    k3, v3 = offset_commit_record("g", "t", 1, OffsetAndMetadata(3, "", -1, 3))
    tomb = offset_commit_record("g", "t", 1, None)
    assert tomb == (k3, None)
    compacted = compact([(k1, v1), (k3, v3), (k1, v2), tomb])
    assert compacted == [(k1, v2), (k3, None)]
    loaded = replay_offsets_and_classic_groups(compacted, CONFIG, now_ms=0)
    assert loaded.groups["g"].offsets == {("t", 0): OffsetAndMetadata(2, "", -1, 2)}


def _stable_group(now: int) -> ClassicGroup:
    ids = itertools.count()
    group = ClassicGroup("grp", CONFIG, new_member_id=lambda prefix: f"{prefix}-{next(ids)}")
    for name in ("a", "b"):
        group.handle_join(JoinGroup(client_id=name, session_timeout_ms=10_000, rebalance_timeout_ms=30_000,
                                    protocol_type="consumer", protocols=(("range", name.encode()),),
                                    group_instance_id="static-b" if name == "b" else None), now, name)
    group.tick(now)
    assert group.state is ClassicGroupState.COMPLETING_REBALANCE
    group.handle_sync(SyncGroup(member_id="a-0", generation_id=1, assignments={"a-0": b"A", "static-b-1": b"B"}),
                      now, "s")
    return group


def test_replay_rebuilds_a_stable_group_and_its_offsets():
    group = _stable_group(now=100)
    records = [group_metadata_record(group)]
    records.append(offset_commit_record("grp", "t", 0, OffsetAndMetadata(42, "", -1, 100)))
    loaded = replay_offsets_and_classic_groups(records, CONFIG, now_ms=5000).groups["grp"]
    assert loaded.state is ClassicGroupState.STABLE
    assert loaded.generation_id == 1 and loaded.protocol_name == "range" and loaded.leader_id == "a-0"
    assert list(loaded.members) == ["a-0", "static-b-1"]
    assert loaded.static_members == {"static-b": "static-b-1"}
    assert loaded.members["static-b-1"].assignment == b"B"
    assert loaded.offsets[("t", 0)].offset == 42
    # The members carry on with the new coordinator at the same generation.
    out = loaded.handle_heartbeat(Heartbeat(member_id="a-0", generation_id=1), 6000)
    assert out.replies[0][1].error is errors.NONE


def test_replay_of_an_emptied_group_and_a_deleted_one():
    group = _stable_group(now=0)
    first = group_metadata_record(group)
    group.handle_leave([], 0)
    for member_id in list(group.members):
        from modern.coordinator.classic_group import LeavingMember
        group.handle_leave([LeavingMember(member_id=member_id)], 1)
    assert group.state is ClassicGroupState.EMPTY
    emptied = group_metadata_record(group)
    loaded = replay_offsets_and_classic_groups([first, emptied], CONFIG, now_ms=2)
    assert loaded.groups["grp"].state is ClassicGroupState.EMPTY and loaded.groups["grp"].generation_id == 2
    group.unload(3)
    tombstone = group_metadata_record(group)
    assert tombstone[1] is None
    assert "grp" not in replay_offsets_and_classic_groups([first, emptied, tombstone], CONFIG, now_ms=4).groups
    assert isinstance(decode_record(*tombstone), GroupRecord)
