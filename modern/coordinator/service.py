"""The group coordinator inside a lab broker: Kafka's group APIs over modern.coordinator.classic_group.

The broker loads `CoordinatorExtension`; it registers the group APIs in the broker's handler
registry and follows the leadership of `__consumer_offsets` partitions. A group lives on
partition `abs(hash(group)) % 50`; the broker leading that partition is its coordinator:
it replays the partition when it takes it over, writes GroupMetadata and offset records
to it, and hands everything back (answering parked requests NOT_COORDINATOR) when it
loses it. Every group decision is made by `modern.coordinator.classic_group.ClassicGroup`; this module only
decodes requests, keeps the clock, parks futures, persists, and encodes answers.

Broker-side settings are a `CoordinatorConfig` (modern/coordinator/config.py: from the constructor,
or from environment variables named after Kafka's configs when the broker's CLI builds the extension).

Consumer groups (KIP-848, APIs 68 and 69) live beside classic groups in the same partitions;
`modern.coordinator.consumer_groups` serves them and keeps a group id to one kind.

Taking a partition over is not instant in Kafka: the new coordinator reads the partition
back and answers COORDINATOR_LOAD_IN_PROGRESS meanwhile. `load_delay_ms` stands for that
read: the partition's groups come to life only that long after leadership arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.admin import DescribeGroupsResponse, ListGroupsResponse
from kafka.protocol.api_key import ApiKey
from kafka.protocol.consumer import (
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorResponse

from modern.common import errors
from modern.common.errors import ErrorClass
from modern.coordinator import consumer_group_wire, offset_wire
from modern.coordinator.classic_group import (
    ClassicGroup,
    CommitResult,
    Heartbeat,
    JoinGroup,
    JoinResult,
    LeavingMember,
    OffsetCommit,
    Output,
    SyncGroup,
    SyncResult,
)
from modern.coordinator.config import CoordinatorConfig
from modern.coordinator.consumer_group import ConsumerGroup
from modern.coordinator.consumer_groups import ConsumerGroupService
from modern.coordinator.records.classic_group import group_metadata_record
from modern.coordinator.records.consumer_group import is_consumer_group_record
from modern.coordinator.records.offset_commit import offset_commit_record
from modern.coordinator.replay import replay_offsets_and_classic_groups
from rebalance.events import COORDINATOR_EVENT, EventRecorder, NullRecorder
from rebalance.javahash import coordinator_partition

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
COORDINATOR_TYPE_GROUP = 0

# API -> (min, max) version served.
VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.FindCoordinator: (0, 4),
    ApiKey.JoinGroup: (0, 9),
    ApiKey.SyncGroup: (0, 5),
    ApiKey.Heartbeat: (0, 4),
    ApiKey.LeaveGroup: (0, 5),
    ApiKey.OffsetCommit: (0, 9),   # v9: a consumer group member commits with its member epoch
    ApiKey.OffsetFetch: (0, 9),
    ApiKey.DescribeGroups: (0, 5),
    ApiKey.ListGroups: (0, 4),
}

def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class _Partition:
    """One __consumer_offsets partition this broker leads: its groups, as replayed and since."""

    index: int
    groups: dict[str, ClassicGroup] = field(default_factory=dict)
    consumer_groups: dict[str, ConsumerGroup] = field(default_factory=dict)
    appended: int = 0


class CoordinatorExtension:
    def __init__(self, config: CoordinatorConfig | None = None, *, recorder: EventRecorder | None = None) -> None:
        self.config = config or CoordinatorConfig.from_env()
        if recorder is None and self.config.events_path:
            recorder = EventRecorder(self.config.events_path, run_id=self.config.run_id, backend="modern")
        self.recorder = recorder or NullRecorder()
        self.broker: Any = None
        self._partitions: dict[int, _Partition] = {}
        self._loading: dict[int, asyncio.TimerHandle] = {}   # partitions taken over, not loaded yet
        self._partition_of: dict[str, int] = {}     # group id -> its partition (the hash is not free)
        self._wake = asyncio.Event()
        self._next_wake_ms: int | None = None
        self._timer: asyncio.Task | None = None
        self.requests_served = 0
        self.failure: BaseException | None = None
        self.consumer_groups = ConsumerGroupService(self, self.config.consumer_group)

    # ------------------------------------------------------------ BrokerExtension

    def install(self, broker: Any, registry: Any) -> None:
        self.broker = broker
        handlers = {
            ApiKey.FindCoordinator: self.find_coordinator,
            ApiKey.JoinGroup: self.join_group,
            ApiKey.SyncGroup: self.sync_group,
            ApiKey.Heartbeat: self.heartbeat,
            ApiKey.LeaveGroup: self.leave_group,
            ApiKey.OffsetCommit: self.offset_commit,
            ApiKey.OffsetFetch: self.offset_fetch,
            ApiKey.DescribeGroups: self.describe_groups,
            ApiKey.ListGroups: self.list_groups,
        }
        for key, handler in handlers.items():
            low, high = VERSIONS[key]
            registry.register(key, handler, min_version=low, max_version=high)
        low, high = consumer_group_wire.HEARTBEAT_VERSIONS
        registry.register(ApiKey.ConsumerGroupHeartbeat, self.consumer_groups.heartbeat, min_version=low,
                          max_version=high)
        low, high = consumer_group_wire.DESCRIBE_VERSIONS
        registry.register(ApiKey.ConsumerGroupDescribe, self.consumer_groups.describe, min_version=low,
                          max_version=high)
        broker.cluster.on_leadership_change(self._on_leadership_change)

    async def start(self) -> None:
        self._wake = asyncio.Event()
        for index in range(self._partition_count()):
            if index not in self._partitions and self.broker.log(OFFSETS_TOPIC, index) is not None:
                self._begin_load(index)
        self._timer = asyncio.get_running_loop().create_task(self._run_timers(), name="group-timers")
        self._timer.add_done_callback(self._timer_done)

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            await asyncio.gather(self._timer, return_exceptions=True)  # a failure was logged when it happened
        for handle in self._loading.values():
            handle.cancel()
        self._loading.clear()
        for index in list(self._partitions):
            self._unload(index)
        self.recorder.close()

    # ------------------------------------------------------------ leadership and loading

    def _partition_count(self) -> int:
        config = getattr(self.broker, "config", None)
        return getattr(config, "offsets_topic_partitions", 50)

    def _on_leadership_change(self, change: Any) -> None:
        if change.topic != OFFSETS_TOPIC:
            return
        if change.local and change.partition not in self._partitions:
            self._begin_load(change.partition)
        elif not change.local:
            pending = self._loading.pop(change.partition, None)
            if pending is not None:
                pending.cancel()
            if change.partition in self._partitions:
                self._unload(change.partition)

    def _begin_load(self, index: int) -> None:
        """Load now, or after the configured load delay (until then `_lookup` answers LOAD_IN_PROGRESS)."""
        if index in self._loading:
            return
        if self.config.load_delay_ms <= 0:
            self._load(index)
            return
        self._loading[index] = asyncio.get_running_loop().call_later(
            self.config.load_delay_ms / 1000, self._finish_load, index)

    def _finish_load(self, index: int) -> None:
        self._loading.pop(index, None)
        if index not in self._partitions and self.broker.log(OFFSETS_TOPIC, index) is not None:
            self._load(index)

    def _load(self, index: int) -> None:
        partition_log = self.broker.log(OFFSETS_TOPIC, index)
        records = [(r.key, r.value) for r in partition_log.read_records(0)]
        consumer_records = [kv for kv in records if is_consumer_group_record(kv[0])]
        classic_records = [kv for kv in records if not is_consumer_group_record(kv[0])]
        loaded = replay_offsets_and_classic_groups(classic_records, self.config.group, monotonic_ms())
        self._partitions[index] = _Partition(index, loaded.groups)
        self.consumer_groups.load(self._partitions[index], consumer_records, monotonic_ms())
        for group in loaded.groups.values():
            self._emit(group.group_id, event="loaded", partition=index, state=group.state.value,
                       generation=group.generation_id, members=len(group.members), offsets=len(group.offsets))
        log.debug("coordinator: loaded %s-%s (%d records, %d groups)", OFFSETS_TOPIC, index, len(records),
                 len(loaded.groups))
        self._wake.set()

    def _unload(self, index: int) -> None:
        partition = self._partitions.pop(index)
        for group in partition.groups.values():
            self._deliver(None, group, group.unload(monotonic_ms()))
            self._emit(group.group_id, event="unloaded", partition=index)

    def _partition_for(self, group_id: str) -> tuple[_Partition | None, ErrorClass | None]:
        """The partition holding the group if this broker coordinates it, else the error to answer."""
        if self.failure is not None:
            raise RuntimeError("the coordinator's group timers failed") from self.failure
        if not group_id:
            return None, errors.INVALID_GROUP_ID
        index = self._partition_index(group_id)
        partition = self._partitions.get(index)
        if partition is None:
            if index in self._loading or self.broker.cluster.leader_for(OFFSETS_TOPIC, index) == self.broker.node_id:
                return None, errors.COORDINATOR_LOAD_IN_PROGRESS  # ours, but not read back (or not open) yet
            return None, errors.NOT_COORDINATOR
        return partition, None

    def _lookup(self, group_id: str, *, create: bool) -> tuple[ClassicGroup | None, ErrorClass | None]:
        """The classic group if this broker coordinates it (creating it on request), else the error to answer."""
        partition, error = self._partition_for(group_id)
        if error is not None:
            return None, error
        if group_id in partition.consumer_groups:
            return None, errors.GROUP_ID_NOT_FOUND  # Kafka: "Group ... is not a classic group."
        group = partition.groups.get(group_id)
        if group is None and create:
            group = partition.groups[group_id] = ClassicGroup(group_id, self.config.group, now_ms=monotonic_ms())
        return group, None

    # ------------------------------------------------------------ applying a group's output

    def _deliver(self, partition: _Partition | None, group: ClassicGroup, out: Output) -> bool:
        """Persist what changed, then release the replies (Kafka answers after the append)."""
        stored = self._persist(partition, group, out) if partition is not None else True
        for transition in out.transitions:
            self._emit(group.group_id, event="state", from_state=transition.from_state.value,
                       to_state=transition.to_state.value, generation=group.generation_id,
                       members=len(group.members), reason=transition.reason)
        for token, result in out.replies:
            if not stored:
                result = _not_stored(result)
            if isinstance(token, asyncio.Future) and not token.done():
                token.set_result(result)
        deadline = group.next_deadline()
        if deadline is not None and (self._next_wake_ms is None or deadline < self._next_wake_ms):
            self._wake.set()
        return stored

    def _persist(self, partition: _Partition, group: ClassicGroup, out: Output) -> bool:
        """Append what changed; False when the log is gone (leadership moved away meanwhile)."""
        records = []
        if out.store_group:
            records.append(group_metadata_record(group, wall_ms()))
        for (topic, index), value in out.committed.items():
            records.append(offset_commit_record(group.group_id, topic, index, value))
        return self._append(partition, records)

    def append_for_group(self, group_id: str, records: list) -> bool:
        """Append a group's records to its partition; False when this broker no longer leads it."""
        partition = self._partitions.get(self._partition_index(group_id))
        return partition is not None and self._append(partition, records)

    def _append(self, partition: _Partition, records: list) -> bool:
        if not records:
            return True
        partition_log = self.broker.log(OFFSETS_TOPIC, partition.index)
        if partition_log is None:
            log.warning("coordinator: %s-%s closed before an append", OFFSETS_TOPIC, partition.index)
            return False
        partition_log.append_records(records)
        partition.appended += len(records)
        if partition.appended >= self.config.compact_after_records:
            partition_log.compact()
            partition.appended = 0
        return True

    def _apply(self, group: ClassicGroup, out: Output) -> bool:
        """Persist and deliver a group's output; False when its records could not be written."""
        return self._deliver(self._partitions.get(self._partition_index(group.group_id)), group, out)

    def _partition_index(self, group_id: str) -> int:
        index = self._partition_of.get(group_id)
        if index is None:
            if len(self._partition_of) > 100_000:
                self._partition_of.clear()
            index = self._partition_of[group_id] = coordinator_partition(group_id, self._partition_count())
        return index

    def clock_ms(self) -> int:
        return monotonic_ms()

    def wake_for(self, deadline: int | None) -> None:
        """Make the timer task look again if a deadline comes before its next wake-up."""
        if deadline is not None and (self._next_wake_ms is None or deadline < self._next_wake_ms):
            self._wake.set()

    def _emit(self, group_id: str, **fields: object) -> None:
        node = getattr(self.broker, "node_id", None)
        self.recorder.emit(COORDINATOR_EVENT, group=group_id, node=node, **fields)

    # ------------------------------------------------------------ timers

    async def _run_timers(self) -> None:
        """Sleep until the earliest group deadline (or until woken by a request), then tick."""
        while True:
            now = monotonic_ms()
            deadlines = []
            for partition in list(self._partitions.values()):
                for group in list(partition.groups.values()):
                    deadline = group.next_deadline()
                    if deadline is not None and deadline <= now:
                        self._deliver(partition, group, group.tick(now))
                        deadline = group.next_deadline()
                    if deadline is not None:
                        deadlines.append(deadline)
                deadlines.extend(self.consumer_groups.tick(partition, now))
            self._next_wake_ms = min(deadlines, default=None)
            self._wake.clear()
            timeout = None if self._next_wake_ms is None else max(0, self._next_wake_ms - monotonic_ms()) / 1000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    def _timer_done(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            # Without timers no session would ever expire: refuse to serve rather than limp on.
            self.failure = task.exception()
            log.error("coordinator: the group timer task failed; group requests will fail", exc_info=self.failure)

    # ------------------------------------------------------------ FindCoordinator

    async def find_coordinator(self, ctx: Any, request: Any) -> Any:
        self.requests_served += 1
        version = ctx.api_version
        response_cls = FindCoordinatorResponse[version]
        if version >= 4:
            coordinators = [self._coordinator_for(key, request.key_type, ctx.client_id) for key in request.coordinator_keys]
            return response_cls(throttle_time_ms=0, coordinators=[
                FindCoordinatorResponse.Coordinator(key=key, node_id=node, host=host, port=port,
                                                    error_code=error.errno, error_message=None)
                for key, node, host, port, error in coordinators
            ])
        key_type = request.key_type if version >= 1 else COORDINATOR_TYPE_GROUP
        _, node, host, port, error = self._coordinator_for(request.key, key_type, ctx.client_id)
        return response_cls(throttle_time_ms=0, error_code=error.errno, error_message=None,
                            node_id=node, host=host, port=port)

    def _coordinator_for(self, key: str, key_type: int, client_id: str | None) -> tuple:
        if key_type != COORDINATOR_TYPE_GROUP:
            return key, -1, "", -1, errors.COORDINATOR_NOT_AVAILABLE  # no transaction coordinator here
        if not key:
            return key, -1, "", -1, errors.INVALID_REQUEST
        leader = self.broker.cluster.leader_for(OFFSETS_TOPIC, self._partition_index(key))
        try:
            host, port = self.broker.advertised_address(leader, client_id)
        except KeyError:
            return key, -1, "", -1, errors.COORDINATOR_NOT_AVAILABLE
        return key, leader, host, port, errors.NONE

    # ------------------------------------------------------------ JoinGroup / SyncGroup

    async def join_group(self, ctx: Any, request: Any) -> Any:
        self.requests_served += 1
        version = ctx.api_version
        rebalance_timeout = request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms
        group, error = self._lookup(request.group_id, create=not request.member_id)
        if error is None and group is None:
            error = errors.UNKNOWN_MEMBER_ID  # a member id for a group this coordinator does not know
        if error is not None:
            return self._join_response(version, JoinResult(error=error, member_id=request.member_id))
        join = JoinGroup(
            member_id=request.member_id,
            group_instance_id=request.group_instance_id if version >= 5 else None,
            client_id=ctx.client_id or "",
            client_host=f"/{ctx.client_host}",
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout,
            protocol_type=request.protocol_type,
            protocols=tuple((p.name, bytes(p.metadata)) for p in request.protocols),
            require_known_member_id=version >= 4,
            supports_skip_assignment=version >= 9,
        )
        reply = asyncio.get_running_loop().create_future()
        self._apply(group, group.handle_join(join, monotonic_ms(), reply))
        return self._join_response(version, await reply)

    @staticmethod
    def _join_response(version: int, result: Any) -> Any:
        return JoinGroupResponse[version](
            throttle_time_ms=0,
            error_code=result.error.errno,
            generation_id=result.generation_id,
            protocol_type=result.protocol_type,
            protocol_name=result.protocol_name if version >= 7 else (result.protocol_name or ""),
            leader=result.leader,
            skip_assignment=result.skip_assignment,
            member_id=result.member_id,
            members=[
                JoinGroupResponse.JoinGroupResponseMember(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                                          metadata=m.metadata)
                for m in result.members
            ],
        )

    async def sync_group(self, ctx: Any, request: Any) -> Any:
        self.requests_served += 1
        version = ctx.api_version
        group, error = self._lookup(request.group_id, create=False)
        if error is None and group is None:
            error = errors.UNKNOWN_MEMBER_ID
        if error is not None:
            return SyncGroupResponse[version](throttle_time_ms=0, error_code=error.errno, protocol_type=None,
                                              protocol_name=None, assignment=b"")
        sync = SyncGroup(
            member_id=request.member_id,
            generation_id=request.generation_id,
            group_instance_id=request.group_instance_id if version >= 3 else None,
            protocol_type=request.protocol_type if version >= 5 else None,
            protocol_name=request.protocol_name if version >= 5 else None,
            assignments={a.member_id: bytes(a.assignment) for a in request.assignments},
        )
        reply = asyncio.get_running_loop().create_future()
        self._apply(group, group.handle_sync(sync, monotonic_ms(), reply))
        result = await reply
        return SyncGroupResponse[version](throttle_time_ms=0, error_code=result.error.errno,
                                          protocol_type=result.protocol_type, protocol_name=result.protocol_name,
                                          assignment=result.assignment)

    # ------------------------------------------------------------ Heartbeat / LeaveGroup

    async def heartbeat(self, ctx: Any, request: Any) -> Any:
        self.requests_served += 1
        group, error = self._lookup(request.group_id, create=False)
        if error is errors.COORDINATOR_LOAD_IN_PROGRESS:
            # Kafka answers a heartbeat blindly while the group loads (GroupCoordinatorService.heartbeat):
            # the member keeps its rhythm; its next request after the load meets the loaded group.
            error = errors.NONE
        if error is None and group is None:
            error = errors.UNKNOWN_MEMBER_ID
        if error is None:
            beat = Heartbeat(member_id=request.member_id, generation_id=request.generation_id,
                             group_instance_id=request.group_instance_id if ctx.api_version >= 3 else None)
            out = group.handle_heartbeat(beat, monotonic_ms())
            self._apply(group, out)
            error = out.replies[0][1].error
        return HeartbeatResponse[ctx.api_version](throttle_time_ms=0, error_code=error.errno)

    async def leave_group(self, ctx: Any, request: Any) -> Any:
        self.requests_served += 1
        version = ctx.api_version
        if version >= 3:
            leaving = [LeavingMember(member_id=m.member_id, group_instance_id=m.group_instance_id)
                       for m in request.members]
        else:
            leaving = [LeavingMember(member_id=request.member_id)]
        group, error = self._lookup(request.group_id, create=False)
        outcomes: list[tuple[LeavingMember, ErrorClass]]
        if error is None and group is None:
            outcomes = [(who, errors.UNKNOWN_MEMBER_ID) for who in leaving]
        elif error is None:
            out = group.handle_leave(leaving, monotonic_ms())
            self._apply(group, out)
            result = out.replies[-1][1]
            error, outcomes = result.error, list(result.members)
        else:
            outcomes = []
        if version < 3 and error is None:
            error = outcomes[0][1]  # one member: its error is the answer
        return LeaveGroupResponse[version](
            throttle_time_ms=0,
            error_code=(error or errors.NONE).errno,
            members=[LeaveGroupResponse.MemberResponse(member_id=who.member_id,
                                                       group_instance_id=who.group_instance_id,
                                                       error_code=member_error.errno)
                     for who, member_error in outcomes],
        )

    # ------------------------------------------------------------ offsets

    async def offset_commit(self, ctx: Any, request: Any) -> Any:
        self.requests_served += 1
        version = ctx.api_version
        generation = request.generation_id_or_member_epoch if version >= 1 else -1
        member_id = request.member_id if version >= 1 else ""
        offsets = offset_wire.committed_offsets(request, version, wall_ms())
        consumer = self.consumer_groups.group(request.group_id)
        if consumer is not None:
            group, error = None, self.consumer_groups.commit_error(consumer, version, member_id, generation)
            if error is errors.NONE:
                error = self._commit_to_consumer_group(consumer, offsets)
        else:
            group, error = self._lookup(request.group_id, create=generation < 0)
        if consumer is None and error is None and group is None:
            error = errors.ILLEGAL_GENERATION  # Kafka: an unknown group with a generation is a stale member
        if consumer is None and error is None:
            commit = OffsetCommit(offsets=offsets, member_id=member_id, generation_id=generation,
                                  group_instance_id=request.group_instance_id if version >= 7 else None)
            out = group.handle_commit(commit, monotonic_ms())
            stored = self._apply(group, out)
            error = out.replies[0][1].error if stored else errors.NOT_COORDINATOR
        return offset_wire.commit_response(version, offsets, error)

    def _commit_to_consumer_group(self, group: ConsumerGroup, offsets: dict) -> ErrorClass:
        partition = self._partitions.get(self._partition_index(group.group_id))
        records = [offset_commit_record(group.group_id, topic, index, value)
                   for (topic, index), value in offsets.items()]
        if partition is None or not self._append(partition, records):
            return errors.NOT_COORDINATOR
        group.offsets.update(offsets)
        return errors.NONE

    async def offset_fetch(self, ctx: Any, request: Any) -> Any:
        self.requests_served += 1
        return offset_wire.fetch_response(ctx.api_version, request, self._fetch_offsets)

    def _fetch_offsets(self, group_id: str, requested: list[tuple[str, list[int]]] | None,
                       member_id: str | None = None, member_epoch: int = -1) -> tuple[ErrorClass, list]:
        """(error, [(topic, [(partition, offset, leader_epoch, metadata)])]); -1 where nothing is committed."""
        consumer = self.consumer_groups.group(group_id)
        if consumer is not None:
            error = self.consumer_groups.fetch_error(consumer, member_id, member_epoch)
            if error is not errors.NONE:
                return error, []
            offsets = consumer.offsets
        else:
            group, error = self._lookup(group_id, create=False)
            if error is not None:
                return error, []
            offsets = group.offsets if group is not None else {}
        if requested is None:  # every committed offset of the group
            requested_by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(offsets):
                requested_by_topic.setdefault(topic, []).append(partition)
            requested = list(requested_by_topic.items())
        found = []
        for topic, partitions in requested:
            rows = []
            for partition in partitions:
                committed = offsets.get((topic, partition))
                if committed is None:
                    rows.append((partition, -1, -1, ""))
                else:
                    rows.append((partition, committed.offset, committed.leader_epoch, committed.metadata))
            found.append((topic, rows))
        return errors.NONE, found

    # ------------------------------------------------------------ tools

    async def describe_groups(self, ctx: Any, request: Any) -> Any:
        self.requests_served += 1
        described_cls = DescribeGroupsResponse.DescribedGroup
        member_cls = described_cls.DescribedGroupMember
        answers = []
        for group_id in request.groups:
            group, error = self._lookup(group_id, create=False)
            if error is errors.GROUP_ID_NOT_FOUND and ctx.api_version < 6:
                error = None  # Kafka: a consumer group is Dead without an error before DescribeGroups v6
            if error is not None or group is None:
                answers.append(described_cls(error_code=(error or errors.NONE).errno, group_id=group_id,
                                             group_state="Dead", protocol_type="", protocol_data="", members=[]))
                continue
            description = group.describe()
            answers.append(described_cls(
                error_code=errors.NONE.errno, group_id=group_id, group_state=description.state.value,
                protocol_type=description.protocol_type, protocol_data=description.protocol_name,
                members=[member_cls(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                    client_id=m.client_id, client_host=m.client_host,
                                    member_metadata=m.metadata, member_assignment=m.assignment)
                         for m in description.members]))
        return DescribeGroupsResponse[ctx.api_version](throttle_time_ms=0, groups=answers)

    async def list_groups(self, ctx: Any, request: Any) -> Any:
        self.requests_served += 1
        wanted_states = set(request.states_filter or ()) if ctx.api_version >= 4 else set()
        listed = []
        for partition in self._partitions.values():
            for group in partition.groups.values():
                if wanted_states and group.state.value not in wanted_states:
                    continue
                listed.append(ListGroupsResponse.ListedGroup(group_id=group.group_id,
                                                             protocol_type=group.protocol_type or "",
                                                             group_state=group.state.value, group_type="classic"))
            for consumer in partition.consumer_groups.values():
                if wanted_states and consumer.state().value not in wanted_states:
                    continue
                listed.append(ListGroupsResponse.ListedGroup(group_id=consumer.group_id, protocol_type="consumer",
                                                             group_state=consumer.state().value,
                                                             group_type="consumer"))
        return ListGroupsResponse[ctx.api_version](throttle_time_ms=0, error_code=errors.NONE.errno,
                                                   groups=sorted(listed, key=lambda g: g.group_id))



def _not_stored(result: object) -> object:
    """What a reply becomes when its records could not be written: NOT_COORDINATOR, as in Kafka."""
    if isinstance(result, CommitResult):
        return CommitResult(errors.NOT_COORDINATOR)
    if isinstance(result, SyncResult):
        return SyncResult(error=errors.NOT_COORDINATOR)
    if isinstance(result, JoinResult):
        return JoinResult(error=errors.NOT_COORDINATOR, member_id=result.member_id)
    return result
