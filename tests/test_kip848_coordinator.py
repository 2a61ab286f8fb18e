"""Consumer groups inside the lab's coordinator, spoken to over the wire with the project's own
ConsumerGroupHeartbeat/Describe schemas and kafka-python's codec."""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.admin import DescribeGroupsRequest
from kafka.protocol.consumer import JoinGroupRequest, OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

from broker.admin import create_topic
from broker.embedded import EmbeddedBroker
from broker.server import BrokerConfig
from modern.classic.consumer_protocol import encode_subscription
from modern.client.connection import BrokerConnection, parse_address
from modern.common import errors
from modern.common.consumer_group_messages import ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest
from modern.coordinator.classic_group import GroupConfig
from modern.coordinator.consumer_group import ConsumerGroupConfig
from modern.coordinator.service import CoordinatorConfig, CoordinatorExtension
from rebalance.javahash import coordinator_partition
from rebalance.topic_ids import topic_id
from rebalance.types import Subscription

pytestmark = pytest.mark.broker

TOPIC = "t"
PARTITIONS = 4


@pytest.fixture
def embedded():
    extension = CoordinatorExtension(CoordinatorConfig(
        group=GroupConfig(initial_rebalance_delay_ms=0),
        consumer_group=ConsumerGroupConfig(heartbeat_interval_ms=250, min_heartbeat_interval_ms=250)))
    with EmbeddedBroker(BrokerConfig(port=0), extensions=[extension]) as running:
        create_topic(running.bootstrap, TOPIC, PARTITIONS)
        yield running


@pytest.fixture
def conn(embedded):
    connection = BrokerConnection(*parse_address(embedded.bootstrap), client_id="tester", timeout_s=20)
    yield connection
    connection.close()


@pytest.fixture
def group_id():
    return f"g-{uuid.uuid4().hex[:10]}"


def heartbeat(conn, group_id, member_id, epoch, *, version=1, topics=(TOPIC,), owned=None, assignor=None):
    joining = epoch == 0
    return conn.request(ConsumerGroupHeartbeatRequest[version](
        group_id=group_id, member_id=member_id, member_epoch=epoch, instance_id=None, rack_id=None,
        rebalance_timeout_ms=30_000 if joining else -1, subscribed_topic_names=list(topics) if joining else None,
        subscribed_topic_regex=None, server_assignor=assignor, client_assignors=None,
        topic_partitions=[] if joining else owned))


def commit(conn, group_id, member_id, epoch, version=9):
    topic_cls = OffsetCommitRequest.OffsetCommitRequestTopic
    answer = conn.request(OffsetCommitRequest[version](
        group_id=group_id, generation_id_or_member_epoch=epoch, member_id=member_id, group_instance_id=None,
        retention_time_ms=-1, topics=[topic_cls(name=TOPIC, partitions=[topic_cls.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=42, committed_leader_epoch=-1, committed_metadata="")])]))
    return errors.for_code(answer.topics[0].partitions[0].error_code)


def fetch(conn, group_id, member_id=None, epoch=-1):
    group_cls = OffsetFetchRequest.OffsetFetchRequestGroup
    answer = conn.request(OffsetFetchRequest[9](groups=[group_cls(
        group_id=group_id, member_id=member_id, member_epoch=epoch,
        topics=[group_cls.OffsetFetchRequestTopics(name=TOPIC, partition_indexes=[0])])], require_stable=False))
    group = answer.groups[0]
    offset = group.topics[0].partitions[0].committed_offset if group.topics else None
    return errors.for_code(group.error_code), offset


def test_api_versions_advertise_the_consumer_group_apis(conn):
    answer = conn.request(ApiVersionsRequest[3](client_software_name="t", client_software_version="0"))
    served = {api.api_key: (api.min_version, api.max_version) for api in answer.api_keys}
    assert served[68] == (0, 1) and served[69] == (0, 1)
    assert served[8][1] == 9 and served[9][1] == 9


def test_join_answers_with_topic_ids_from_metadata(conn, group_id):
    answer = heartbeat(conn, group_id, "m1", 0)
    assert answer.error_code == 0 and answer.member_epoch == 1 and answer.heartbeat_interval_ms == 250
    metadata = conn.request(MetadataRequest[12](topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC,
                                                                                               topic_id=None)],
                                                allow_auto_topic_creation=False,
                                                include_topic_authorized_operations=False))
    (assigned,) = answer.assignment.topic_partitions
    assert assigned.topic_id == metadata.topics[0].topic_id
    assert sorted(assigned.partitions) == list(range(PARTITIONS))


def test_v0_join_gets_a_coordinator_member_id_and_v1_refuses_an_empty_one(conn, group_id):
    assert heartbeat(conn, group_id, "", 0, version=0).member_id
    assert heartbeat(conn, group_id, "", 0, version=1).error_code == errors.INVALID_REQUEST.errno


def test_unsupported_assignor(conn, group_id):
    answer = heartbeat(conn, group_id, "m1", 0, assignor="sticky")
    assert answer.error_code == errors.UNSUPPORTED_ASSIGNOR.errno


def test_a_group_id_is_classic_or_consumer(conn, group_id):
    heartbeat(conn, group_id, "m1", 0)
    joined = conn.request(JoinGroupRequest[5](
        group_id=group_id, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
        group_instance_id=None, protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(
            name="range", metadata=encode_subscription(Subscription(topics=(TOPIC,))))]))
    assert joined.error_code == errors.GROUP_ID_NOT_FOUND.errno
    (described,) = conn.request(DescribeGroupsRequest[5](groups=[group_id],
                                                         include_authorized_operations=False)).groups
    assert (described.error_code, described.group_state) == (0, "Dead")

    classic = f"{group_id}-classic"
    joined = conn.request(JoinGroupRequest[3](   # v3: a member at once, without MEMBER_ID_REQUIRED
        group_id=classic, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
        protocol_type="consumer", protocols=[JoinGroupRequest.JoinGroupRequestProtocol(
            name="range", metadata=encode_subscription(Subscription(topics=(TOPIC,))))]))
    assert joined.error_code == 0
    assert heartbeat(conn, classic, "m1", 0).error_code == errors.GROUP_ID_NOT_FOUND.errno


def test_commits_and_fetches_carry_the_member_epoch(conn, group_id):
    heartbeat(conn, group_id, "m1", 0)
    heartbeat(conn, group_id, "m2", 0)                   # group epoch 2: m1 must revoke before it moves on
    assert commit(conn, group_id, "m1", 1) is errors.NONE
    assert commit(conn, group_id, "m1", 2) is errors.STALE_MEMBER_EPOCH   # newer than its epoch: stale too
    assert commit(conn, group_id, "m1", 1, version=8) is errors.UNSUPPORTED_VERSION
    assert commit(conn, group_id, "nobody", 1) is errors.UNKNOWN_MEMBER_ID
    assert fetch(conn, group_id, "m1", 1) == (errors.NONE, 42)
    assert fetch(conn, group_id) == (errors.NONE, 42)    # not a member: an admin's read
    assert fetch(conn, group_id, "m2", 1)[0] is errors.STALE_MEMBER_EPOCH


def test_describe_shows_epochs_and_target(conn, group_id):
    heartbeat(conn, group_id, "m1", 0, assignor="range")
    answer = conn.request(ConsumerGroupDescribeRequest[1](group_ids=[group_id, "absent"],
                                                          include_authorized_operations=False))
    described, absent = answer.groups
    assert (described.group_state, described.group_epoch, described.assignment_epoch) == ("Stable", 1, 1)
    assert described.assignor_name == "range"
    (member,) = described.members
    assert member.member_id == "m1" and member.member_type == 1
    assert member.target_assignment.topic_partitions[0].topic_name == TOPIC
    assert absent.error_code == errors.GROUP_ID_NOT_FOUND.errno


def test_the_group_and_its_offsets_survive_reloading_the_partition(embedded, conn, group_id):
    """A coordinator taking the partition over replays the group's records: members, epochs,
    target and current assignments, and the offsets it committed."""
    heartbeat(conn, group_id, "m1", 0)
    heartbeat(conn, group_id, "m2", 0)                  # m1 will be told to give two partitions up
    assert commit(conn, group_id, "m1", 1) is errors.NONE
    extension = embedded.broker.extensions[0]
    index = coordinator_partition(group_id, 50)
    before = extension.groups.consumer_group(group_id)
    embedded.call(lambda broker: (extension._unload(index), extension._load(index)))
    after = extension.groups.consumer_group(group_id)
    assert after is not before
    assert (after.group_epoch, after.assignment_epoch, after.target) == (2, 2, before.target)
    assert after.members == before.members
    assert fetch(conn, group_id, "m1", 1) == (errors.NONE, 42)

    def owning(partitions):
        return [ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=topic_id(TOPIC), partitions=sorted(partitions))]

    answer = heartbeat(conn, group_id, "m1", 1, owned=owning(range(PARTITIONS)))
    assert answer.member_epoch == 1                     # revoke first, epoch held back
    kept = answer.assignment.topic_partitions[0].partitions
    assert len(kept) == 2
    answer = heartbeat(conn, group_id, "m1", 1, owned=owning(kept))
    assert answer.error_code == 0 and answer.member_epoch == 2
