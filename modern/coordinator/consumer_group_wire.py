"""ConsumerGroupHeartbeat and ConsumerGroupDescribe on the wire: requests to the group's terms and answers back.

The group metadata manager (`modern.coordinator.group_metadata_manager`) finds or creates the
`ConsumerGroup` and decides; this module only translates between the wire (topic ids, nullable
fields, versions) and the group's own terms (topic names).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from modern.common import errors
from modern.common.consumer_group_messages import (
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatResponse,
)
from modern.common.errors import ErrorClass
from modern.coordinator.consumer_group import ConsumerGroup, HeartbeatRequest, HeartbeatResult
from rebalance.topic_ids import topic_id

# Served versions; v1 of the heartbeat is the one where the client makes its own member id.
HEARTBEAT_VERSIONS = (0, 1)
DESCRIBE_VERSIONS = (0, 1)
MEMBER_TYPE_CONSUMER = 1


def partition_counts(broker: Any) -> dict[str, int]:
    """Every topic the broker knows with its partition count: the group's view of metadata."""
    return {spec.name: spec.partitions for spec in broker.topics.all()}


def heartbeat_request(version: int, request: Any, topics: dict[str, int], ctx: Any) -> HeartbeatRequest:
    by_id = {topic_id(name): name for name in topics}
    owned = None
    if request.topic_partitions is not None:
        owned = frozenset((by_id[t.topic_id], p) for t in request.topic_partitions if t.topic_id in by_id
                          for p in t.partitions)
    return HeartbeatRequest(
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_topics=None if request.subscribed_topic_names is None else tuple(request.subscribed_topic_names),
        server_assignor=request.server_assignor,
        owned=owned,
        client_id=ctx.client_id or "",
        client_host=f"/{ctx.client_host}",
        member_id_from_client=version >= 1,
    )


def regex_refusal(version: int, request: Any) -> str | None:
    if version >= 1 and request.subscribed_topic_regex:  # librdkafka sends "" for "no regex"
        return "Regular expression subscriptions are not supported by this coordinator."
    return None


def heartbeat_response(version: int, result: HeartbeatResult) -> Any:
    cls = ConsumerGroupHeartbeatResponse
    assignment = None
    if result.assignment is not None:
        assignment = cls.Assignment(topic_partitions=[
            cls.Assignment.TopicPartitions(topic_id=topic_id(name), partitions=indexes)
            for name, indexes in _by_topic(result.assignment)])
    return cls[version](throttle_time_ms=0, error_code=result.error.errno, error_message=result.message,
                        member_id=result.member_id, member_epoch=result.member_epoch,
                        heartbeat_interval_ms=result.heartbeat_interval_ms, assignment=assignment)


def error_response(version: int, error: ErrorClass, member_id: str | None, message: str | None = None) -> Any:
    return heartbeat_response(version, HeartbeatResult(error=error, member_id=member_id or None, message=message))


def described_group(group: ConsumerGroup, version: int) -> Any:
    group_cls = ConsumerGroupDescribeResponse.DescribedGroup
    member_cls = group_cls.Member
    assignment_cls = member_cls.Assignment

    def assignment(partitions: Iterable[tuple[str, int]]) -> Any:
        return assignment_cls(topic_partitions=[
            assignment_cls.TopicPartitions(topic_id=topic_id(name), topic_name=name, partitions=indexes)
            for name, indexes in _by_topic(partitions)])

    members = [member_cls(member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                          member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                          subscribed_topic_names=list(m.subscribed_topics), subscribed_topic_regex=None,
                          assignment=assignment(m.assigned),
                          target_assignment=assignment(group.target.get(m.member_id, ())),
                          member_type=MEMBER_TYPE_CONSUMER)
               for m in group.members.values()]
    return group_cls(error_code=errors.NONE.errno, error_message=None, group_id=group.group_id,
                     group_state=group.state().value, group_epoch=group.group_epoch,
                     assignment_epoch=group.assignment_epoch, assignor_name=group.assignor_name(),
                     members=members)


def describe_error(group_id: str, error: ErrorClass, message: str | None = None) -> Any:
    return ConsumerGroupDescribeResponse.DescribedGroup(
        error_code=error.errno, error_message=message, group_id=group_id, group_state="Dead", group_epoch=-1,
        assignment_epoch=-1, assignor_name="", members=[])


def _by_topic(partitions: Iterable[tuple[str, int]]) -> list[tuple[str, list[int]]]:
    grouped: dict[str, list[int]] = {}
    for name, index in sorted(partitions):
        grouped.setdefault(name, []).append(index)
    return list(grouped.items())

