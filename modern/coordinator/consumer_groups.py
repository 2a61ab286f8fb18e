"""Consumer groups inside the classic coordinator: which group id is which kind, the two new
APIs, their timers, and the member-epoch checks on offset commits and fetches.

A group id names either a classic group or a consumer group, never both, as in Kafka: a classic
request for a consumer group is answered GROUP_ID_NOT_FOUND ("not a classic group") and a
heartbeat for a classic group that still has members gets GROUP_ID_NOT_FOUND ("not a consumer
group"). An empty classic group (say, one that only holds offsets) becomes a consumer group on
its first heartbeat and keeps its offsets, which is how Kafka upgrades an idle group.
"""

from __future__ import annotations

from typing import Any

from modern.common import errors
from modern.common.errors import ErrorClass
from modern.coordinator import consumer_group_wire as wire
from modern.coordinator.consumer_group import (
    ConsumerGroup,
    ConsumerGroupConfig,
    HeartbeatRequest,
    HeartbeatResult,
    Member,
    Output,
)
from modern.coordinator.records import consumer_group as consumer_records
from modern.coordinator.replay import replay_consumer_groups
from rebalance import heartbeats
from rebalance.topic_ids import topic_id

OFFSET_COMMIT_MEMBER_EPOCH_VERSION = 9   # OffsetCommit/OffsetFetch v9 carry the member epoch


class ConsumerGroupService:
    def __init__(self, coordinator: Any, config: ConsumerGroupConfig) -> None:
        self.coordinator = coordinator   # a CoordinatorExtension: partitions, clock, events
        self.config = config

    # ------------------------------------------------------------ finding groups

    def group(self, group_id: str) -> ConsumerGroup | None:
        """The consumer group of that id if this broker holds it (no error: callers check first)."""
        partition, error = self.coordinator._partition_for(group_id)
        return None if error is not None else partition.consumer_groups.get(group_id)

    def _group_for_heartbeat(self, group_id: str, now_ms: int) -> tuple[ConsumerGroup | None, ErrorClass | None,
                                                                         str | None]:
        partition, error = self.coordinator._partition_for(group_id)
        if error is not None:
            return None, error, None
        group = partition.consumer_groups.get(group_id)
        if group is not None:
            return group, None, None
        classic = partition.groups.get(group_id)
        if classic is not None and classic.members:
            return None, errors.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group."
        group = partition.consumer_groups[group_id] = ConsumerGroup(group_id, self.config, now_ms=now_ms)
        if classic is not None:  # an idle classic group: upgraded, its offsets carried over
            group.offsets = dict(classic.offsets)
            del partition.groups[group_id]
        return group, None, None

    # ------------------------------------------------------------ the APIs

    async def heartbeat(self, ctx: Any, request: Any) -> Any:
        self.coordinator.requests_served += 1
        version = ctx.api_version
        refusal = wire.regex_refusal(version, request)
        if refusal is not None:
            return wire.error_response(version, errors.INVALID_REQUEST, request.member_id, refusal)
        now = self.coordinator.clock_ms()
        group, error, message = self._group_for_heartbeat(request.group_id, now)
        if error is not None:
            return wire.error_response(version, error, request.member_id, message)
        topics = wire.partition_counts(self.coordinator.broker)
        asked = wire.heartbeat_request(version, request, topics, ctx)
        before = group.members.get(asked.member_id)
        out = group.heartbeat(asked, topics, now)
        result = out.result
        if not self.apply(group, out):  # Kafka answers only once the records are written
            result = HeartbeatResult(error=errors.NOT_COORDINATOR, member_id=request.member_id or None)
        self._count_if_changing(asked, before, result)
        return wire.heartbeat_response(version, result)

    def _count_if_changing(self, asked: HeartbeatRequest, before: Member | None, result: HeartbeatResult) -> None:
        """The broker's witness count: heartbeats that joined, left, acknowledged or changed an assignment."""
        word = heartbeats.detail(member_epoch=asked.member_epoch, owned_reported=asked.owned is not None,
                                 assignment=result.assignment, held=before.assigned if before else None)
        counters = getattr(self.coordinator.broker, "request_counts", None)
        if word != heartbeats.STEADY and counters is not None:
            counters.count_named(heartbeats.CHANGING_COUNTER)

    async def describe(self, ctx: Any, request: Any) -> Any:
        self.coordinator.requests_served += 1
        described = []
        for group_id in request.group_ids:
            partition, error = self.coordinator._partition_for(group_id)
            group = None if error is not None else partition.consumer_groups.get(group_id)
            if error is not None:
                described.append(wire.describe_error(group_id, error))
            elif group is None:
                described.append(wire.describe_error(group_id, errors.GROUP_ID_NOT_FOUND,
                                                     f"Group {group_id} not found."))
            else:
                described.append(wire.described_group(group, ctx.api_version))
        return wire.ConsumerGroupDescribeResponse[ctx.api_version](throttle_time_ms=0, groups=described)

    # ------------------------------------------------------------ offsets

    def commit_error(self, group: ConsumerGroup, version: int, member_id: str, member_epoch: int) -> ErrorClass:
        """Who may commit to a consumer group: its members at their current epoch (v9+), or anyone
        while it has no members (an admin tool resetting offsets)."""
        if member_epoch < 0 and not member_id and not group.members:
            return errors.NONE
        if version < OFFSET_COMMIT_MEMBER_EPOCH_VERSION:
            return errors.UNSUPPORTED_VERSION
        return group.validate_commit(member_id, member_epoch)

    def fetch_error(self, group: ConsumerGroup, member_id: str | None, member_epoch: int) -> ErrorClass:
        """OffsetFetch v9 from a member: the member must be known and at its current epoch."""
        if member_epoch < 0:
            return errors.NONE
        return group.validate_commit(member_id or "", member_epoch)

    # ------------------------------------------------------------ timers and output

    def tick(self, partition: Any, now_ms: int) -> list[int]:
        """Run every due deadline of a partition's consumer groups; their next deadlines."""
        deadlines = []
        for group in list(partition.consumer_groups.values()):
            deadline = group.next_deadline()
            if deadline is not None and deadline <= now_ms:
                self.apply(group, group.tick(now_ms))
                deadline = group.next_deadline()
            if deadline is not None:
                deadlines.append(deadline)
        return deadlines

    def apply(self, group: ConsumerGroup, out: Output) -> bool:
        """Write the group's records, report its events, re-arm the timer; False if not written."""
        encoded = [consumer_records.encode(record, topic_id) for record in out.records]
        stored = self.coordinator.append_for_group(group.group_id, encoded)
        for event in out.events:
            self.coordinator._emit(group.group_id, protocol="consumer", **event)
        self.coordinator.wake_for(group.next_deadline())
        return stored

    def load(self, partition: Any, stored: list[tuple[bytes, bytes | None]], now_ms: int) -> None:
        """Replay a partition's consumer groups. Their offsets were replayed with the classic
        records, into a member-less classic group of the same id: they move over."""
        if not stored:
            return
        topics = wire.partition_counts(self.coordinator.broker)
        partition.consumer_groups = replay_consumer_groups(stored, topics, topic_id, self.config, now_ms)
        for group_id, group in partition.consumer_groups.items():
            holder = partition.groups.get(group_id)
            if holder is not None and not holder.members:
                group.offsets = dict(holder.offsets)
                del partition.groups[group_id]
            self.coordinator._emit(group_id, event="loaded", protocol="consumer", group_epoch=group.group_epoch,
                                   members=len(group.members), offsets=len(group.offsets))
