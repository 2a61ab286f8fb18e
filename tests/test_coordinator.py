"""The coordinator inside an in-process broker, spoken to over the wire with kafka-python's codec."""

from __future__ import annotations

import time
import uuid

import pytest
from kafka.protocol.admin import DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest

from broker.embedded import EmbeddedBroker
from broker.server import BrokerConfig
from modern.classic.consumer_protocol import encode_subscription
from modern.client.connection import BrokerConnection, parse_address
from modern.common import errors
from modern.coordinator.classic_group import GroupConfig
from modern.coordinator.records.classic_group import GroupRecord
from modern.coordinator.records.offset_commit import OffsetRecord
from modern.coordinator.replay import decode_record
from modern.coordinator.service import OFFSETS_TOPIC, CoordinatorConfig, CoordinatorExtension
from rebalance.javahash import coordinator_partition
from rebalance.types import Subscription

pytestmark = pytest.mark.broker

DELAY_MS = 100


@pytest.fixture
def coordinator_broker():
    extension = CoordinatorExtension(CoordinatorConfig(group=GroupConfig(initial_rebalance_delay_ms=DELAY_MS)))
    with EmbeddedBroker(BrokerConfig(port=0), extensions=[extension]) as embedded:
        yield embedded


@pytest.fixture
def group_id():
    return f"g-{uuid.uuid4().hex[:10]}"


def connect(embedded, client_id="tester") -> BrokerConnection:
    return BrokerConnection(*parse_address(embedded.bootstrap), client_id=client_id, timeout_s=20)


def join(conn, group_id, member_id="", version=5, instance=None, protocol="range"):
    metadata = encode_subscription(Subscription(topics=("t",)))
    return conn.request(JoinGroupRequest[version](
        group_id=group_id, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id=member_id,
        group_instance_id=instance, protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name=protocol, metadata=metadata)]))


def test_find_coordinator_answers_with_the_partition_leader(coordinator_broker, group_id):
    conn = connect(coordinator_broker)
    for version in (0, 1, 3):
        kwargs = {"key": group_id, "key_type": 0}
        answer = conn.request(FindCoordinatorRequest[version](**kwargs))
        assert answer.error_code == 0 and answer.node_id == 0
        assert (answer.host, answer.port) == parse_address(coordinator_broker.bootstrap)
    batched = conn.request(FindCoordinatorRequest[4](key_type=0, coordinator_keys=[group_id, "other"]))
    assert [c.key for c in batched.coordinators] == [group_id, "other"]
    assert all(c.error_code == 0 and c.node_id == 0 for c in batched.coordinators)


def test_join_v4_plus_needs_a_member_id_then_a_full_round(coordinator_broker, group_id):
    conn = connect(coordinator_broker, client_id="alice")
    first = join(conn, group_id)
    assert errors.for_code(first.error_code) is errors.MEMBER_ID_REQUIRED
    assert first.member_id.startswith("alice-")
    started = time.monotonic()
    joined = join(conn, group_id, member_id=first.member_id)
    assert time.monotonic() - started >= DELAY_MS / 1000 * 0.9   # the initial delay
    assert joined.error_code == 0 and joined.generation_id == 1 and joined.leader == first.member_id
    assert joined.protocol_name == "range" and len(joined.members) == 1
    sync = conn.request(SyncGroupRequest[3](group_id=group_id, generation_id=1, member_id=first.member_id,
                                            group_instance_id=None, assignments=[
                                                SyncGroupRequest.SyncGroupRequestAssignment(
                                                    member_id=first.member_id, assignment=b"plan")]))
    assert sync.error_code == 0 and sync.assignment == b"plan"
    beat = conn.request(HeartbeatRequest[3](group_id=group_id, generation_id=1, member_id=first.member_id,
                                            group_instance_id=None))
    assert beat.error_code == 0
    stale = conn.request(HeartbeatRequest[3](group_id=group_id, generation_id=0, member_id=first.member_id,
                                             group_instance_id=None))
    assert errors.for_code(stale.error_code) is errors.ILLEGAL_GENERATION

    # Offsets: commit with the generation, read back, and a zombie generation is fenced.
    topic_cls = OffsetCommitRequest.OffsetCommitRequestTopic
    def commit(generation, offset):
        return conn.request(OffsetCommitRequest[7](
            group_id=group_id, generation_id_or_member_epoch=generation, member_id=first.member_id,
            group_instance_id=None, topics=[topic_cls(name="t", partitions=[topic_cls.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=offset, committed_leader_epoch=-1, committed_metadata="")])]))
    assert commit(1, 17).topics[0].partitions[0].error_code == 0
    assert errors.for_code(commit(0, 3).topics[0].partitions[0].error_code) is errors.ILLEGAL_GENERATION
    fetched = conn.request(OffsetFetchRequest[7](group_id=group_id, topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 1])], require_stable=False))
    assert [(p.partition_index, p.committed_offset) for p in fetched.topics[0].partitions] == [(0, 17), (1, -1)]

    described = conn.request(DescribeGroupsRequest[3](groups=[group_id], include_authorized_operations=False))
    group = described.groups[0]
    assert (group.group_state, group.protocol_data, len(group.members)) == ("Stable", "range", 1)
    assert group.members[0].client_id == "alice" and group.members[0].member_assignment == b"plan"
    listed = conn.request(ListGroupsRequest[2]())
    assert group_id in [g.group_id for g in listed.groups]

    # What the coordinator wrote to __consumer_offsets, decoded again.
    index = coordinator_partition(group_id)
    records = coordinator_broker.call(lambda b: [(r.key, r.value) for r in b.log(OFFSETS_TOPIC, index).read_records()])
    decoded = [decode_record(k, v) for k, v in records]
    groups = [r for r in decoded if isinstance(r, GroupRecord) and r.group_id == group_id]
    offsets = [r for r in decoded if isinstance(r, OffsetRecord) and r.group_id == group_id]
    assert groups[-1].value.generation == 1 and groups[-1].value.members[0].assignment == b"plan"
    assert [(o.topic, o.partition, o.value.offset) for o in offsets] == [("t", 0, 17)]

    left = conn.request(LeaveGroupRequest[3](group_id=group_id, members=[
        LeaveGroupRequest.MemberIdentity(member_id=first.member_id, group_instance_id=None)]))
    assert left.error_code == 0 and left.members[0].error_code == 0
    conn.close()


def test_join_v3_gets_its_id_at_once_and_inconsistent_protocols_are_refused(coordinator_broker, group_id):
    alice, bob = connect(coordinator_broker, "alice"), connect(coordinator_broker, "bob")
    joined = join(alice, group_id, version=3)
    assert joined.error_code == 0 and joined.member_id.startswith("alice-")
    refused = join(bob, group_id, version=3, protocol="roundrobin")
    assert errors.for_code(refused.error_code) is errors.INCONSISTENT_GROUP_PROTOCOL
    alice.close()
    bob.close()


def test_describe_leaves_protocol_and_member_data_empty_until_the_group_is_stable(coordinator_broker, group_id):
    conn = connect(coordinator_broker, "alice")
    joined = join(conn, group_id, version=3)                    # CompletingRebalance: nobody synced yet
    assert joined.error_code == 0
    described = conn.request(DescribeGroupsRequest[3](groups=[group_id], include_authorized_operations=False))
    group = described.groups[0]
    assert (group.group_state, group.protocol_type, group.protocol_data) == ("CompletingRebalance", "consumer", "")
    assert [m.member_id for m in group.members] == [joined.member_id]
    assert group.members[0].client_id == "alice"
    assert group.members[0].member_metadata == b"" and group.members[0].member_assignment == b""
    conn.close()


def test_unknown_group_and_member_errors(coordinator_broker, group_id):
    conn = connect(coordinator_broker)
    beat = conn.request(HeartbeatRequest[3](group_id=group_id, generation_id=1, member_id="x", group_instance_id=None))
    assert errors.for_code(beat.error_code) is errors.UNKNOWN_MEMBER_ID
    sync = conn.request(SyncGroupRequest[3](group_id=group_id, generation_id=1, member_id="x", group_instance_id=None,
                                            assignments=[]))
    assert errors.for_code(sync.error_code) is errors.UNKNOWN_MEMBER_ID
    # A commit with a generation to a group the coordinator does not know: a stale member.
    topic_cls = OffsetCommitRequest.OffsetCommitRequestTopic
    answer = conn.request(OffsetCommitRequest[7](
        group_id=group_id, generation_id_or_member_epoch=3, member_id="x", group_instance_id=None,
        topics=[topic_cls(name="t", partitions=[topic_cls.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata="")])]))
    assert errors.for_code(answer.topics[0].partitions[0].error_code) is errors.ILLEGAL_GENERATION
    # Generation -1 (manual assignment) creates an empty group that keeps the offset.
    answer = conn.request(OffsetCommitRequest[7](
        group_id=group_id, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=[topic_cls(name="t", partitions=[topic_cls.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=9, committed_leader_epoch=-1, committed_metadata="")])]))
    assert answer.topics[0].partitions[0].error_code == 0
    described = conn.request(DescribeGroupsRequest[3](groups=[group_id], include_authorized_operations=False))
    assert described.groups[0].group_state == "Empty"
    conn.close()


def test_settings_from_environment_fail_loudly():
    config = CoordinatorConfig.from_env({"REBALANCE_LAB_GROUP_INITIAL_REBALANCE_DELAY_MS": "250"})
    assert config.group.initial_rebalance_delay_ms == 250
    with pytest.raises(ValueError, match="REBALANCE_LAB_GROUP_MAX_SIZE"):
        CoordinatorConfig.from_env({"REBALANCE_LAB_GROUP_MAX_SIZE": "many"})
    assert CoordinatorConfig.from_env({"REBALANCE_LAB_COORDINATOR_LOAD_DELAY_MS": "40"}).load_delay_ms == 40
    assert CoordinatorConfig.from_env({"REBALANCE_LAB_COORDINATOR_LOAD_DELAY_MS": "40"}, load_delay_ms=5).load_delay_ms == 5
