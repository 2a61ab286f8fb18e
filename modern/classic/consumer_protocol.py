"""ConsumerProtocol: the bytes inside JoinGroup metadata and SyncGroup assignments.

The coordinator never looks inside them (it only stores and forwards); members encode
their Subscription and decode their Assignment. kafka-python's codec does the bytes; this
module translates to and from the lab's own value types.
"""

from __future__ import annotations

from collections import defaultdict

from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from rebalance.types import Assignment, Subscription, TopicPartition

SUBSCRIPTION_VERSION = 2   # v1 adds owned partitions (KIP-429), v2 the generation
ASSIGNMENT_VERSION = 0


def _grouped(partitions) -> list[tuple[str, list[int]]]:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for tp in sorted(partitions):
        by_topic[tp.topic].append(tp.partition)
    return sorted(by_topic.items())


def encode_subscription(subscription: Subscription, version: int = SUBSCRIPTION_VERSION) -> bytes:
    fields = {"topics": list(subscription.topics), "user_data": subscription.user_data}
    if version >= 1:
        fields["owned_partitions"] = [
            ConsumerProtocolSubscription.TopicPartition(topic=t, partitions=ps)
            for t, ps in _grouped(subscription.owned_partitions)
        ]
    if version >= 2:
        fields["generation_id"] = subscription.generation
    return ConsumerProtocolSubscription(version=version, **fields).encode()


def decode_subscription(data: bytes, group_instance_id: str | None = None) -> Subscription:
    decoded = ConsumerProtocolSubscription.decode(data)
    owned = ()
    if decoded.version >= 1 and decoded.owned_partitions:
        owned = tuple(TopicPartition(tp.topic, p) for tp in decoded.owned_partitions for p in tp.partitions)
    generation = decoded.generation_id if decoded.version >= 2 else -1
    return Subscription(
        topics=tuple(decoded.topics),
        owned_partitions=owned,
        generation=generation,
        user_data=decoded.user_data,
        group_instance_id=group_instance_id,
    )


def encode_assignment(assignment: Assignment) -> bytes:
    return ConsumerProtocolAssignment(
        version=ASSIGNMENT_VERSION,
        assigned_partitions=[
            ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=ps)
            for t, ps in _grouped(assignment.partitions)
        ],
        user_data=assignment.user_data,
    ).encode()


def decode_assignment(data: bytes) -> Assignment:
    if not data:
        return Assignment(())
    decoded = ConsumerProtocolAssignment.decode(data)
    partitions = tuple(TopicPartition(tp.topic, p) for tp in decoded.assigned_partitions for p in tp.partitions)
    return Assignment(partitions, decoded.user_data)
