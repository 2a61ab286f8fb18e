"""The well-behaved members the hostile generator keeps beside its hostile requests: one classic member and
one KIP-848 member, each alone in its group on one topic, heartbeating and committing ever higher offsets.
Hostile requests aimed at their groups must leave them as they were: member, state, assignment, offsets."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.consumer import (
    HeartbeatRequest,
    JoinGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from experiments.fuzz.hostile_values import Target
from modern.client.connection import BrokerConnection
from modern.common.consumer_group_messages import ConsumerGroupHeartbeatRequest
from rebalance.topic_ids import topic_id

PARTITIONS = 4
SESSION_TIMEOUT_MS = 60_000
REBALANCE_TIMEOUT_MS = 60_000
FORM_TIMEOUT_S = 90.0


class SteadyError(RuntimeError):
    """A well-behaved member could not do what any client does (join, heartbeat, commit)."""


@dataclass
class SteadyMembers:
    connection: BrokerConnection
    topic: str = field(default_factory=lambda: f"hostile-steady-{uuid.uuid4().hex[:8]}")
    classic_group: str = field(default_factory=lambda: f"steady-classic-{uuid.uuid4().hex[:8]}")
    consumer_group: str = field(default_factory=lambda: f"steady-consumer-{uuid.uuid4().hex[:8]}")
    classic_member: str = ""
    generation: int = -1
    consumer_member: str = field(default_factory=lambda: str(uuid.uuid4()))
    epoch: int = 0
    next_offset: int = 0
    committed: dict[str, int] = field(default_factory=dict)   # group -> the offset last taken for every partition

    def form(self) -> Target:
        self._create_topic()
        self._join_classic()
        self._join_consumer()
        return self.target()

    def target(self) -> Target:
        return Target(classic_group=self.classic_group, classic_member=self.classic_member,
                      classic_generation=self.generation, consumer_group=self.consumer_group,
                      consumer_member=self.consumer_member, consumer_epoch=self.epoch, topic=self.topic)

    # ------------------------------------------------------------ forming the groups

    def _create_topic(self) -> None:
        answer = self.connection.request(CreateTopicsRequest[5](topics=[CreateTopicsRequest.CreatableTopic(
            name=self.topic, num_partitions=PARTITIONS, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=5000, validate_only=False))
        if answer.topics[0].error_code not in (0, 36):   # 36: TOPIC_ALREADY_EXISTS
            raise SteadyError(f"cannot create {self.topic}: error {answer.topics[0].error_code}")

    def _join(self, member_id: str):
        metadata = ConsumerProtocolSubscription(version=0, topics=[self.topic], user_data=b"").encode()
        return self.connection.request(JoinGroupRequest[5](
            group_id=self.classic_group, session_timeout_ms=SESSION_TIMEOUT_MS,
            rebalance_timeout_ms=REBALANCE_TIMEOUT_MS, member_id=member_id, group_instance_id=None,
            protocol_type="consumer", protocols=[JoinGroupRequest.JoinGroupRequestProtocol(
                name="range", metadata=metadata)]), timeout_s=FORM_TIMEOUT_S)

    def _join_classic(self) -> None:
        first = self._join("")
        answer = self._join(first.member_id) if first.error_code == 79 else first   # 79: MEMBER_ID_REQUIRED
        if answer.error_code != 0 or answer.leader != answer.member_id:
            raise SteadyError(f"classic join answered error {answer.error_code}")
        self.classic_member, self.generation = answer.member_id, answer.generation_id
        assignment = ConsumerProtocolAssignment(version=0, assigned_partitions=[
            ConsumerProtocolAssignment.TopicPartition(topic=self.topic, partitions=list(range(PARTITIONS)))],
            user_data=b"").encode()
        synced = self.connection.request(SyncGroupRequest[3](
            group_id=self.classic_group, generation_id=self.generation, member_id=self.classic_member,
            group_instance_id=None, assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
                member_id=self.classic_member, assignment=assignment)]), timeout_s=FORM_TIMEOUT_S)
        if synced.error_code != 0:
            raise SteadyError(f"classic sync answered error {synced.error_code}")

    def _join_consumer(self) -> None:
        deadline = time.monotonic() + FORM_TIMEOUT_S
        owned: list[int] = []
        while sorted(owned) != list(range(PARTITIONS)):
            if time.monotonic() > deadline:
                raise SteadyError(f"the consumer group member owns {owned}, not every partition")
            answer = self._consumer_heartbeat(owned)
            if answer.assignment is not None:
                owned = [p for t in answer.assignment.topic_partitions for p in t.partitions]
            time.sleep(0.05)   # the next heartbeat, sooner than the interval: the member is reconciling

    def _consumer_heartbeat(self, owned: list[int]):
        answer = self.connection.request(ConsumerGroupHeartbeatRequest[1](
            group_id=self.consumer_group, member_id=self.consumer_member, member_epoch=self.epoch,
            instance_id=None, rack_id=None, rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
            subscribed_topic_names=[self.topic], subscribed_topic_regex=None, server_assignor=None,
            client_assignors=[], topic_partitions=[ConsumerGroupHeartbeatRequest.TopicPartitions(
                topic_id=topic_id(self.topic), partitions=owned)] if owned else []))
        if answer.error_code != 0:
            raise SteadyError(f"consumer group heartbeat answered error {answer.error_code}")
        self.epoch = answer.member_epoch
        return answer

    # ------------------------------------------------------------ every batch

    def keep_alive(self) -> list[str]:
        """Both members heartbeat; a refusal means hostile requests changed a group they had no part in."""
        problems = []
        beat = self.connection.request(HeartbeatRequest[4](group_id=self.classic_group, generation_id=self.generation,
                                                           member_id=self.classic_member, group_instance_id=None))
        if beat.error_code != 0:
            problems.append(f"the steady classic member's heartbeat answered error {beat.error_code}")
        try:
            self._consumer_heartbeat(list(range(PARTITIONS)))
        except SteadyError as error:
            problems.append(f"the steady consumer group member: {error}")
        return problems

    def commit_and_check(self) -> list[str]:
        """Commit the next offsets from both members, read them back: a group no one fenced never goes back."""
        self.next_offset += 1
        problems = []
        # a consumer group member commits with its member epoch, which only v9 carries
        for group, generation, member, version in ((self.classic_group, self.generation, self.classic_member, 8),
                                                   (self.consumer_group, self.epoch, self.consumer_member, 9)):
            topic_cls = OffsetCommitRequest.OffsetCommitRequestTopic
            answer = self.connection.request(OffsetCommitRequest[version](
                group_id=group, generation_id_or_member_epoch=generation, member_id=member, group_instance_id=None,
                topics=[topic_cls(name=self.topic, partitions=[topic_cls.OffsetCommitRequestPartition(
                    partition_index=p, committed_offset=self.next_offset, committed_leader_epoch=-1,
                    committed_metadata="") for p in range(PARTITIONS)])]))
            if all(p.error_code == 0 for t in answer.topics for p in t.partitions):
                self.committed[group] = self.next_offset
            else:
                problems.append(f"{group}: the steady member's commit was refused: "
                                f"{sorted({p.error_code for t in answer.topics for p in t.partitions})}")
            fetched = self._fetch(group)
            expected = self.committed.get(group)
            if expected is not None and any(offset != expected for offset in fetched.values()):
                problems.append(f"{group}: committed offsets {fetched} where {expected} was the last taken")
        return problems

    def _fetch(self, group: str) -> dict[int, int]:
        answer = self.connection.request(OffsetFetchRequest[7](group_id=group, topics=[
            OffsetFetchRequest.OffsetFetchRequestTopic(name=self.topic, partition_indexes=list(range(PARTITIONS)))],
            require_stable=False))
        return {p.partition_index: p.committed_offset for t in answer.topics for p in t.partitions}
