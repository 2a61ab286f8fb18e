"""Kafka's limits and validations at the coordinator, each answered with Kafka's error code: offset
metadata past offset.metadata.max.bytes, strings too long for a __consumer_offsets record, and the
ConsumerGroupHeartbeat checks Kafka makes before it looks at the group."""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.consumer import (
    JoinGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)

from broker.embedded import EmbeddedBroker
from broker.server import BrokerConfig
from modern.client.connection import BrokerConnection, parse_address
from modern.common import errors
from modern.common.consumer_group_messages import ConsumerGroupHeartbeatRequest
from modern.coordinator.classic_group import GroupConfig
from modern.coordinator.config import CoordinatorConfig
from modern.coordinator.service import CoordinatorExtension

pytestmark = pytest.mark.broker

LIMIT = 4096


@pytest.fixture
def connection():
    extension = CoordinatorExtension(CoordinatorConfig(group=GroupConfig(initial_rebalance_delay_ms=0)))
    with EmbeddedBroker(BrokerConfig(port=0), extensions=[extension]) as embedded:
        conn = BrokerConnection(*parse_address(embedded.bootstrap), client_id="limits", timeout_s=20)
        yield conn
        conn.close()


def commit(conn, group, metadata_by_partition, version=8):
    topic_cls = OffsetCommitRequest.OffsetCommitRequestTopic
    return conn.request(OffsetCommitRequest[version](
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None, retention_time_ms=-1,
        topics=[topic_cls(name="t", partitions=[topic_cls.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=10 + p, committed_leader_epoch=-1, commit_timestamp=-1,
            committed_metadata=m) for p, m in metadata_by_partition.items()])]))


def fetched(conn, group):
    answer = conn.request(OffsetFetchRequest[7](group_id=group, topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 1, 2])], require_stable=False))
    return {p.partition_index: p.committed_offset for t in answer.topics for p in t.partitions}


def test_metadata_past_the_limit_is_refused_for_its_partition_and_the_others_are_stored(connection):
    group = f"g-{uuid.uuid4().hex[:8]}"
    answer = commit(connection, group, {0: "m" * LIMIT, 1: "m" * (LIMIT + 1), 2: ""})
    codes = {p.partition_index: p.error_code for t in answer.topics for p in t.partitions}
    assert codes == {0: 0, 1: errors.OFFSET_METADATA_TOO_LARGE.errno, 2: 0}
    assert fetched(connection, group) == {0: 10, 1: -1, 2: 12}


def test_metadata_is_measured_in_java_chars(connection):
    # "𝄞" is one code point but two UTF-16 units: 2,049 of them are 4,098 chars to Kafka
    group = f"g-{uuid.uuid4().hex[:8]}"
    answer = commit(connection, group, {0: "\U0001d11e" * 2049})
    assert answer.topics[0].partitions[0].error_code == errors.OFFSET_METADATA_TOO_LARGE.errno


def test_a_group_id_too_long_for_a_record_is_an_unknown_server_error_not_a_closed_connection(connection):
    group = "g" * 40_000      # the OffsetCommit record key keeps it with a 2-byte length
    answer = commit(connection, group, {0: ""})
    assert answer.topics[0].partitions[0].error_code == errors.UNKNOWN_SERVER_ERROR.errno
    # the connection is still served
    assert commit(connection, f"g-{uuid.uuid4().hex[:8]}", {0: ""}).topics[0].partitions[0].error_code == 0


def test_a_group_that_cannot_be_written_fails_its_sync_with_unknown_server_error(connection):
    group = "j" * 40_000      # the GroupMetadata record key keeps it with a 2-byte length
    join = JoinGroupRequest[6](group_id=group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
                               group_instance_id=None, protocol_type="consumer",
                               protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")])
    first = connection.request(join)
    assert first.error_code == errors.MEMBER_ID_REQUIRED.errno   # nothing written yet, as in Kafka
    join.member_id = first.member_id
    joined = connection.request(join)
    assert joined.error_code == 0   # Kafka 3.7 writes the group at the leader's SyncGroup, not before
    synced = connection.request(SyncGroupRequest[4](
        group_id=group, generation_id=joined.generation_id, member_id=joined.member_id, group_instance_id=None,
        assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=joined.member_id, assignment=b"")]))
    assert synced.error_code == errors.UNKNOWN_SERVER_ERROR.errno


def heartbeat(conn, **fields):
    request = dict(group_id=f"cg-{uuid.uuid4().hex[:8]}", member_id=str(uuid.uuid4()), member_epoch=0,
                   instance_id=None, rack_id=None, rebalance_timeout_ms=30_000, subscribed_topic_names=["t"],
                   subscribed_topic_regex=None, server_assignor=None, client_assignors=[], topic_partitions=[])
    request.update(fields)
    return conn.request(ConsumerGroupHeartbeatRequest[1](**request))


@pytest.mark.parametrize(("fields", "expected"), [
    ({"group_id": ""}, errors.INVALID_REQUEST),                      # "GroupId can't be empty."
    ({"rebalance_timeout_ms": -1}, errors.INVALID_REQUEST),
    ({"rebalance_timeout_ms": 0}, errors.NONE),                      # only -1 means "not given"
    ({"subscribed_topic_names": []}, errors.INVALID_REQUEST),
    ({"server_assignor": "no-such-assignor"}, errors.UNSUPPORTED_ASSIGNOR),
])
def test_consumer_group_heartbeat_checks_as_kafka(connection, fields, expected):
    assert heartbeat(connection, **fields).error_code == expected.errno


def test_a_session_timeout_out_of_bounds_is_refused_before_the_member_is_looked_up(connection):
    # Kafka's GroupCoordinator.handleJoinGroup checks the session timeout before it looks for the group,
    # so a stranger's member id with a bad timeout is INVALID_SESSION_TIMEOUT, not UNKNOWN_MEMBER_ID
    answer = connection.request(JoinGroupRequest[5](
        group_id=f"g-{uuid.uuid4().hex[:8]}", session_timeout_ms=1, rebalance_timeout_ms=10_000,
        member_id="stranger", group_instance_id=None, protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]))
    assert answer.error_code == errors.INVALID_SESSION_TIMEOUT.errno


def test_owned_partitions_of_unknown_topics_on_a_join_are_refused(connection):
    import uuid as uuid_module

    answer = heartbeat(connection, topic_partitions=[ConsumerGroupHeartbeatRequest.TopicPartitions(
        topic_id=uuid_module.uuid4(), partitions=[0])])
    assert answer.error_code == errors.INVALID_REQUEST.errno


def test_the_group_id_empty_is_valid_for_offsets_and_describe_as_in_kafka(connection):
    from kafka.protocol.admin import DescribeGroupsRequest

    assert commit(connection, "", {0: ""}).topics[0].partitions[0].error_code == 0
    assert fetched(connection, "")[0] == 10
    described = connection.request(DescribeGroupsRequest[5](groups=[""], include_authorized_operations=False))
    assert described.groups[0].error_code == 0
    join = JoinGroupRequest[5](group_id="", session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
                               group_instance_id=None, protocol_type="consumer",
                               protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")])
    assert connection.request(join).error_code == errors.INVALID_GROUP_ID.errno   # not for membership


def test_the_offsets_log_is_compacted_by_bytes_as_well_as_by_records():
    extension = CoordinatorExtension(CoordinatorConfig(compact_after_bytes=64_000))
    with EmbeddedBroker(BrokerConfig(port=0), extensions=[extension]) as embedded:
        conn = BrokerConnection(*parse_address(embedded.bootstrap), client_id="limits", timeout_s=20)
        group = f"g-{uuid.uuid4().hex[:8]}"
        for _ in range(100):   # 100 commits of 4 KB metadata to one key: 400 KB, far below 10,000 records
            assert commit(conn, group, {0: "m" * LIMIT}).topics[0].partitions[0].error_code == 0
        conn.close()
        batches = embedded.call(lambda broker: sum(len(log._batches) for (topic, _), log in broker._logs.items()
                                                   if topic == "__consumer_offsets"))
    assert batches < 20
