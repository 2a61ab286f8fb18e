"""Group membership for both group kinds, as Kafka's GroupMetadataManager keeps it.

A group id names either a classic group or a consumer group, never both, as in Kafka: a classic
request for a consumer group is answered GROUP_ID_NOT_FOUND ("not a classic group") and a
ConsumerGroupHeartbeat for a classic group that still has members gets GROUP_ID_NOT_FOUND ("not a
consumer group"). An empty classic group (say, one that only holds offsets) becomes a consumer group
on its first heartbeat and keeps its offsets, which is how Kafka upgrades an idle group.

Every decision is the group's own (`classic_group.ClassicGroup`, `consumer_group.ConsumerGroup`); this
module finds the group, hands it the request in its terms (`classic_group_wire`, `consumer_group_wire`),
writes what it says to write, answers (Kafka answers only once the records are written), runs its
timers, and rebuilds a partition's groups when the broker takes the partition over. The service
(`service.CoordinatorExtension`) owns the partitions, the clock, the log and the events.
"""

from __future__ import annotations

import asyncio
from typing import Any

from modern.common import errors
from modern.common.errors import ErrorClass
from modern.coordinator import classic_group_wire, consumer_group_wire
from modern.coordinator.classic_group import ClassicGroup, JoinResult, SyncResult
from modern.coordinator.classic_group import Output as ClassicOutput
from modern.coordinator.config import CoordinatorConfig
from modern.coordinator.consumer_group import ConsumerGroup, HeartbeatRequest, HeartbeatResult, Member
from modern.coordinator.consumer_group import Output as ConsumerOutput
from modern.coordinator.records import consumer_group as consumer_records
from modern.coordinator.records.classic_group import group_metadata_record
from modern.coordinator.replay import replay_consumer_groups, replay_offsets_and_classic_groups
from rebalance import heartbeat_kinds
from rebalance.topic_ids import topic_id


class GroupMetadataManager:
    def __init__(self, coordinator: Any, config: CoordinatorConfig) -> None:
        self.coordinator = coordinator   # a CoordinatorExtension: partitions, clock, log, events
        self.config = config

    # ------------------------------------------------------------ one kind per group id

    def classic_group(self, group_id: str, *, create: bool,
                      allow_empty: bool = False) -> tuple[ClassicGroup | None, ErrorClass | None]:
        """The classic group if this broker coordinates it (creating it on request), else the error to answer.
        Kafka lets OffsetCommit, OffsetFetch and DescribeGroups name the group "" (GroupCoordinator.isValidGroupId)."""
        partition, error = self.coordinator.partition_for(group_id, allow_empty=allow_empty)
        if error is not None:
            return None, error
        if group_id in partition.consumer_groups:
            return None, errors.GROUP_ID_NOT_FOUND  # Kafka: "Group ... is not a classic group."
        group = partition.groups.get(group_id)
        if group is None and create:
            group = partition.groups[group_id] = ClassicGroup(group_id, self.config.group,
                                                              now_ms=self.coordinator.clock_ms())
        return group, None

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        """The consumer group of that id if this broker holds it (no error: callers check first)."""
        partition, error = self.coordinator.partition_for(group_id)
        return None if error is not None else partition.consumer_groups.get(group_id)

    def _consumer_group_for_heartbeat(self, group_id: str, now_ms: int) -> tuple[ConsumerGroup | None,
                                                                                 ErrorClass | None, str | None]:
        partition, error = self.coordinator.partition_for(group_id)
        if error is not None:
            return None, error, None
        group = partition.consumer_groups.get(group_id)
        if group is not None:
            return group, None, None
        classic = partition.groups.get(group_id)
        if classic is not None and classic.members:
            return None, errors.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group."
        group = partition.consumer_groups[group_id] = ConsumerGroup(group_id, self.config.consumer_group,
                                                                    now_ms=now_ms)
        if classic is not None:  # an idle classic group: upgraded, its offsets carried over
            group.offsets = dict(classic.offsets)
            del partition.groups[group_id]
        return group, None, None

    # ------------------------------------------------------------ classic groups: JoinGroup / SyncGroup

    async def join_group(self, ctx: Any, request: Any) -> Any:
        version = ctx.api_version
        group, error = self.classic_group(request.group_id, create=False)
        settings = self.config.group
        if error is None and not (settings.min_session_timeout_ms <= request.session_timeout_ms
                                  <= settings.max_session_timeout_ms):
            error = errors.INVALID_SESSION_TIMEOUT   # Kafka checks it before it looks for (or makes) the group
        if error is None and group is None and not request.member_id:
            group, error = self.classic_group(request.group_id, create=True)
        if error is None and group is None:
            error = errors.UNKNOWN_MEMBER_ID  # a member id for a group this coordinator does not know
        if error is not None:
            return classic_group_wire.join_response(version, JoinResult(error=error, member_id=request.member_id))
        reply = asyncio.get_running_loop().create_future()
        self.apply_classic(group, group.handle_join(classic_group_wire.join_request(ctx, request),
                                                    self.coordinator.clock_ms(), reply))
        return classic_group_wire.join_response(version, await reply)

    async def sync_group(self, ctx: Any, request: Any) -> Any:
        version = ctx.api_version
        group, error = self.classic_group(request.group_id, create=False)
        if error is None and group is None:
            error = errors.UNKNOWN_MEMBER_ID
        if error is not None:
            return classic_group_wire.sync_response(version, SyncResult(error=error))
        reply = asyncio.get_running_loop().create_future()
        self.apply_classic(group, group.handle_sync(classic_group_wire.sync_request(ctx, request),
                                                    self.coordinator.clock_ms(), reply))
        return classic_group_wire.sync_response(version, await reply)

    # ------------------------------------------------------------ classic groups: Heartbeat / LeaveGroup

    async def heartbeat(self, ctx: Any, request: Any) -> Any:
        group, error = self.classic_group(request.group_id, create=False)
        if error is errors.COORDINATOR_LOAD_IN_PROGRESS:
            # Kafka answers a heartbeat blindly while the group loads (GroupCoordinatorService.heartbeat):
            # the member keeps its rhythm; its next request after the load meets the loaded group.
            error = errors.NONE
        if error is None and group is None:
            error = errors.UNKNOWN_MEMBER_ID
        if error is None:
            out = group.handle_heartbeat(classic_group_wire.heartbeat_request(ctx, request),
                                         self.coordinator.clock_ms())
            self.apply_classic(group, out)
            error = out.replies[0][1].error
        return classic_group_wire.heartbeat_response(ctx.api_version, error)

    async def leave_group(self, ctx: Any, request: Any) -> Any:
        leaving = classic_group_wire.leaving_members(ctx.api_version, request)
        group, error = self.classic_group(request.group_id, create=False)
        outcomes: list[tuple[Any, ErrorClass]]
        if error is None and group is None:
            outcomes = [(who, errors.UNKNOWN_MEMBER_ID) for who in leaving]
        elif error is None:
            out = group.handle_leave(leaving, self.coordinator.clock_ms())
            self.apply_classic(group, out)
            result = out.replies[-1][1]
            error, outcomes = result.error, list(result.members)
        else:
            outcomes = []
        return classic_group_wire.leave_response(ctx.api_version, error, outcomes)

    # ------------------------------------------------------------ classic groups: the tools' APIs

    async def describe_groups(self, ctx: Any, request: Any) -> Any:
        answers = []
        for group_id in request.groups:
            group, error = self.classic_group(group_id, create=False, allow_empty=True)
            if error is errors.GROUP_ID_NOT_FOUND and ctx.api_version < 6:
                error = None  # Kafka: a consumer group is Dead without an error before DescribeGroups v6
            if error is not None or group is None:
                answers.append(classic_group_wire.dead_group(group_id, error))
            else:
                answers.append(classic_group_wire.described_group(group_id, group.describe()))
        return classic_group_wire.describe_response(ctx.api_version, answers)

    async def list_groups(self, ctx: Any, request: Any) -> Any:
        """Both kinds, each with its group type (classic or consumer)."""
        wanted_states = set(request.states_filter or ()) if ctx.api_version >= 4 else set()
        listed = []
        for partition in self.coordinator.partitions():
            for group in partition.groups.values():
                if wanted_states and group.state.value not in wanted_states:
                    continue
                listed.append(classic_group_wire.listed_group(group.group_id, group.protocol_type or "",
                                                              group.state.value, "classic"))
            for consumer in partition.consumer_groups.values():
                if wanted_states and consumer.state().value not in wanted_states:
                    continue
                listed.append(classic_group_wire.listed_group(consumer.group_id, "consumer",
                                                              consumer.state().value, "consumer"))
        return classic_group_wire.list_response(ctx.api_version, listed)

    # ------------------------------------------------------------ consumer groups: the two APIs

    async def consumer_group_heartbeat(self, ctx: Any, request: Any) -> Any:
        version = ctx.api_version
        refusal = consumer_group_wire.regex_refusal(version, request)
        if not request.group_id:   # Kafka checks the request before it looks for the group
            refusal = "GroupId can't be empty."
        elif request.member_epoch == 0 and (request.topic_partitions is None or request.topic_partitions):
            refusal = "TopicPartitions must be empty when (re-)joining."   # checked before unknown topics drop out
        if refusal is not None:
            return consumer_group_wire.error_response(version, errors.INVALID_REQUEST, request.member_id, refusal)
        now = self.coordinator.clock_ms()
        group, error, message = self._consumer_group_for_heartbeat(request.group_id, now)
        if error is not None:
            return consumer_group_wire.error_response(version, error, request.member_id, message)
        topics = consumer_group_wire.partition_counts(self.coordinator.broker)
        asked = consumer_group_wire.heartbeat_request(version, request, topics, ctx)
        before = group.members.get(asked.member_id)
        out = group.heartbeat(asked, topics, now)
        result = out.result
        failure = self.apply_consumer(group, out)  # Kafka answers only once the records are written
        if failure is not None:
            result = HeartbeatResult(error=failure, member_id=request.member_id or None)
        self._count_if_changing(asked, before, result)
        return consumer_group_wire.heartbeat_response(version, result)

    def _count_if_changing(self, asked: HeartbeatRequest, before: Member | None, result: HeartbeatResult) -> None:
        """The broker's witness count: heartbeats that joined, left, acknowledged or changed an assignment."""
        word = heartbeat_kinds.detail(member_epoch=asked.member_epoch, owned_reported=asked.owned is not None,
                                 assignment=result.assignment, held=before.assigned if before else None)
        counters = getattr(self.coordinator.broker, "request_counts", None)
        if word != heartbeat_kinds.STEADY and counters is not None:
            counters.count_named(heartbeat_kinds.CHANGING_COUNTER)

    async def consumer_group_describe(self, ctx: Any, request: Any) -> Any:
        described = []
        for group_id in request.group_ids:
            partition, error = self.coordinator.partition_for(group_id)
            group = None if error is not None else partition.consumer_groups.get(group_id)
            if error is not None:
                described.append(consumer_group_wire.describe_error(group_id, error))
            elif group is None:
                described.append(consumer_group_wire.describe_error(group_id, errors.GROUP_ID_NOT_FOUND,
                                                                    f"Group {group_id} not found."))
            else:
                described.append(consumer_group_wire.described_group(group, ctx.api_version))
        return consumer_group_wire.ConsumerGroupDescribeResponse[ctx.api_version](throttle_time_ms=0,
                                                                                  groups=described)

    # ------------------------------------------------------------ writing a group's output

    def apply_classic(self, group: ClassicGroup, out: ClassicOutput) -> bool:
        """Persist and deliver a classic group's output; False when its records could not be written."""
        return self._deliver(self.coordinator.partition_holding(group.group_id), group, out)

    def _deliver(self, partition: Any, group: ClassicGroup, out: ClassicOutput) -> bool:
        """Persist what changed, then release the replies (Kafka answers after the append)."""
        failure = None
        if partition is not None and out.store_group:
            failure = self.coordinator.write(partition, lambda: [group_metadata_record(group, self.coordinator.wall_ms())])
        for transition in out.transitions:
            # A move to PreparingRebalance says why, as Kafka logs each rebalance it prepares.
            cause = {} if transition.cause is None else dict(
                rebalance_reason=transition.cause.reason.value, member_ids=list(transition.cause.members))
            self.coordinator.emit(group.group_id, event="state", from_state=transition.from_state.value,
                                  to_state=transition.to_state.value, generation=group.generation_id,
                                  members=len(group.members), reason=transition.reason, **cause)
        for token, result in out.replies:
            if failure is not None:
                result = _not_stored(result, failure)
            if isinstance(token, asyncio.Future) and not token.done():
                token.set_result(result)
        self.coordinator.wake_for(group.next_deadline())
        return failure is None

    def apply_consumer(self, group: ConsumerGroup, out: ConsumerOutput) -> ErrorClass | None:
        """Write a consumer group's records, report its events, re-arm the timer; the error to answer if
        they could not be written, else None."""
        failure = self.coordinator.write(self.coordinator.partition_holding(group.group_id),
                                         lambda: [consumer_records.encode(record, topic_id) for record in out.records])
        for event in out.events:
            self.coordinator.emit(group.group_id, protocol="consumer", **event)
        self.coordinator.wake_for(group.next_deadline())
        return failure

    # ------------------------------------------------------------ timers

    def tick(self, partition: Any, now_ms: int) -> list[int]:
        """Run every due deadline of a partition's groups, both kinds; their next deadlines."""
        deadlines = []
        for group in list(partition.groups.values()):
            deadline = group.next_deadline()
            if deadline is not None and deadline <= now_ms:
                self._deliver(partition, group, group.tick(now_ms))
                deadline = group.next_deadline()
            if deadline is not None:
                deadlines.append(deadline)
        for consumer in list(partition.consumer_groups.values()):
            deadline = consumer.next_deadline()
            if deadline is not None and deadline <= now_ms:
                self.apply_consumer(consumer, consumer.tick(now_ms))
                deadline = consumer.next_deadline()
            if deadline is not None:
                deadlines.append(deadline)
        return deadlines

    # ------------------------------------------------------------ loading and unloading a partition

    def load(self, partition: Any, records: list[tuple[bytes, bytes | None]]) -> None:
        """Rebuild a partition's groups of both kinds from its records (see `replay`)."""
        classic = [kv for kv in records if not consumer_records.is_consumer_group_record(kv[0])]
        stored = [kv for kv in records if consumer_records.is_consumer_group_record(kv[0])]
        partition.groups = replay_offsets_and_classic_groups(classic, self.config.group,
                                                             self.coordinator.clock_ms()).groups
        self._load_consumer_groups(partition, stored, self.coordinator.clock_ms())
        for group in partition.groups.values():
            self.coordinator.emit(group.group_id, event="loaded", partition=partition.index,
                                  state=group.state.value, generation=group.generation_id,
                                  members=len(group.members), offsets=len(group.offsets))

    def _load_consumer_groups(self, partition: Any, stored: list[tuple[bytes, bytes | None]], now_ms: int) -> None:
        """Replay a partition's consumer groups. Their offsets were replayed with the classic
        records, into a member-less classic group of the same id: they move over."""
        if not stored:
            return
        topics = consumer_group_wire.partition_counts(self.coordinator.broker)
        partition.consumer_groups = replay_consumer_groups(stored, topics, topic_id, self.config.consumer_group,
                                                           now_ms)
        for group_id, group in partition.consumer_groups.items():
            holder = partition.groups.get(group_id)
            if holder is not None and not holder.members:
                group.offsets = dict(holder.offsets)
                del partition.groups[group_id]
            self.coordinator.emit(group_id, event="loaded", protocol="consumer", group_epoch=group.group_epoch,
                                  members=len(group.members), offsets=len(group.offsets))

    def unload(self, partition: Any) -> None:
        """This broker no longer leads the partition: its classic groups die here and their parked
        requests learn it (NOT_COORDINATOR)."""
        for group in partition.groups.values():
            self._deliver(None, group, group.unload(self.coordinator.clock_ms()))
            self.coordinator.emit(group.group_id, event="unloaded", partition=partition.index)


def _not_stored(result: object, failure: ErrorClass) -> object:
    """What a reply becomes when its records could not be written: the write's error, as in Kafka."""
    if isinstance(result, SyncResult):
        return SyncResult(error=failure)
    if isinstance(result, JoinResult):
        return JoinResult(error=failure, member_id=result.member_id)
    return result
