"""The group coordinator inside a lab broker: what the broker loads (Kafka's GroupCoordinatorService).

The broker loads `CoordinatorExtension`; it registers the group APIs in the broker's handler registry,
routes each to the manager that owns its concern, and follows the leadership of `__consumer_offsets`
partitions:
- `group_metadata_manager.GroupMetadataManager`: membership of both group kinds (JoinGroup, SyncGroup,
  Heartbeat, LeaveGroup, DescribeGroups, ListGroups; ConsumerGroupHeartbeat, ConsumerGroupDescribe);
- `offset_metadata_manager.OffsetMetadataManager`: OffsetCommit and OffsetFetch for both kinds;
- this module: FindCoordinator, the partitions, the clock, the appends, the timer task, the events.

A group lives on partition `abs(hash(group)) % 50`; the broker leading that partition is its coordinator:
it replays the partition when it takes it over (`replay`), writes the group's records to it
(`records/`), and hands everything back (answering parked requests NOT_COORDINATOR) when it loses it.

Taking a partition over is not instant in Kafka: the new coordinator reads the partition back and
answers COORDINATOR_LOAD_IN_PROGRESS meanwhile. `load_delay_ms` stands for that read: the partition's
groups come to life only that long after leadership arrives.

Broker-side settings are a `CoordinatorConfig` (modern/coordinator/config.py: from the constructor,
or from environment variables named after Kafka's configs when the broker's CLI builds the extension).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.api_key import ApiKey
from kafka.protocol.metadata import FindCoordinatorResponse

from modern.common import errors
from modern.common.errors import ErrorClass
from modern.coordinator import consumer_group_wire
from modern.coordinator.classic_group import ClassicGroup
from modern.coordinator.config import CoordinatorConfig
from modern.coordinator.consumer_group import ConsumerGroup
from modern.coordinator.group_metadata_manager import GroupMetadataManager
from modern.coordinator.offset_metadata_manager import OffsetMetadataManager
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
    ApiKey.ConsumerGroupHeartbeat: consumer_group_wire.HEARTBEAT_VERSIONS,
    ApiKey.ConsumerGroupDescribe: consumer_group_wire.DESCRIBE_VERSIONS,
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
    appended: int = 0          # records since the last compaction
    appended_bytes: int = 0    # their keys' and values' bytes


class CoordinatorExtension:
    def __init__(self, config: CoordinatorConfig | None = None, *, recorder: EventRecorder | None = None) -> None:
        self.config = config or CoordinatorConfig.from_env()
        if recorder is None and self.config.events_path:
            recorder = EventRecorder(self.config.events_path, run_id=self.config.run_id, backend="modern")
        self.recorder = recorder or NullRecorder()
        self.broker: Any = None
        self._partitions: dict[int, _Partition] = {}
        self._loading: dict[int, asyncio.TimerHandle] = {}   # partitions taken over, not loaded yet
        self._index_of: dict[str, int] = {}         # group id -> its partition (the hash is not free)
        self._wake = asyncio.Event()
        self._next_wake_ms: int | None = None
        self._timer: asyncio.Task | None = None
        self.requests_served = 0
        self.failure: BaseException | None = None
        self.groups = GroupMetadataManager(self, self.config)
        self.offsets = OffsetMetadataManager(self, self.groups)

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
            ApiKey.ConsumerGroupHeartbeat: self.consumer_group_heartbeat,
            ApiKey.ConsumerGroupDescribe: self.consumer_group_describe,
        }
        for key, handler in handlers.items():
            low, high = VERSIONS[key]
            registry.register(key, handler, min_version=low, max_version=high)
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

    # ------------------------------------------------------------ routing: each API to its manager

    async def join_group(self, ctx: Any, request: Any) -> Any:
        self.requests_served += 1
        return await self.groups.join_group(ctx, request)

    async def sync_group(self, ctx: Any, request: Any) -> Any:
        self.requests_served += 1
        return await self.groups.sync_group(ctx, request)

    async def heartbeat(self, ctx: Any, request: Any) -> Any:
        self.requests_served += 1
        return await self.groups.heartbeat(ctx, request)

    async def leave_group(self, ctx: Any, request: Any) -> Any:
        self.requests_served += 1
        return await self.groups.leave_group(ctx, request)

    async def describe_groups(self, ctx: Any, request: Any) -> Any:
        self.requests_served += 1
        return await self.groups.describe_groups(ctx, request)

    async def list_groups(self, ctx: Any, request: Any) -> Any:
        self.requests_served += 1
        return await self.groups.list_groups(ctx, request)

    async def consumer_group_heartbeat(self, ctx: Any, request: Any) -> Any:
        self.requests_served += 1
        return await self.groups.consumer_group_heartbeat(ctx, request)

    async def consumer_group_describe(self, ctx: Any, request: Any) -> Any:
        self.requests_served += 1
        return await self.groups.consumer_group_describe(ctx, request)

    async def offset_commit(self, ctx: Any, request: Any) -> Any:
        self.requests_served += 1
        return await self.offsets.offset_commit(ctx, request)

    async def offset_fetch(self, ctx: Any, request: Any) -> Any:
        self.requests_served += 1
        return await self.offsets.offset_fetch(ctx, request)

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
        """Load now, or after the configured load delay (until then `partition_for` answers LOAD_IN_PROGRESS)."""
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
        partition = _Partition(index)
        self.groups.load(partition, records)
        self._partitions[index] = partition
        log.debug("coordinator: loaded %s-%s (%d records, %d groups)", OFFSETS_TOPIC, index, len(records),
                  len(partition.groups))
        self._wake.set()

    def _unload(self, index: int) -> None:
        self.groups.unload(self._partitions.pop(index))

    # ------------------------------------------------------------ what the managers ask of the service

    def partition_for(self, group_id: str, *, allow_empty: bool = False) -> tuple[_Partition | None, ErrorClass | None]:
        """The partition holding the group if this broker coordinates it, else the error to answer. The
        group id "" is valid only where Kafka keeps it valid (`allow_empty`: offsets and DescribeGroups)."""
        if self.failure is not None:
            raise RuntimeError("the coordinator's group timers failed") from self.failure
        if not group_id and not allow_empty:
            return None, errors.INVALID_GROUP_ID
        index = self._partition_index(group_id)
        partition = self._partitions.get(index)
        if partition is None:
            if index in self._loading or self.broker.cluster.leader_for(OFFSETS_TOPIC, index) == self.broker.node_id:
                return None, errors.COORDINATOR_LOAD_IN_PROGRESS  # ours, but not read back (or not open) yet
            return None, errors.NOT_COORDINATOR
        return partition, None

    def partition_holding(self, group_id: str) -> _Partition | None:
        """The loaded partition of the group, or None when this broker does not lead it."""
        return self._partitions.get(self._partition_index(group_id))

    def partitions(self) -> list[_Partition]:
        return list(self._partitions.values())

    def write(self, partition: _Partition | None, build: Callable[[], list]) -> ErrorClass | None:
        """Build a group's records and append them: None when written, else the error to answer.
        A record with a string longer than its 2-byte length allows cannot be written; Kafka fails
        that write (its record serialisation throws) and answers UNKNOWN_SERVER_ERROR."""
        if partition is None:
            return errors.NOT_COORDINATOR
        try:
            records = build()
        except struct.error:
            return errors.UNKNOWN_SERVER_ERROR
        return None if self.append(partition, records) else errors.NOT_COORDINATOR

    def append(self, partition: _Partition, records: list) -> bool:
        """Append to a partition's log; False when the log is gone (leadership moved away meanwhile)."""
        if not records:
            return True
        partition_log = self.broker.log(OFFSETS_TOPIC, partition.index)
        if partition_log is None:
            log.warning("coordinator: %s-%s closed before an append", OFFSETS_TOPIC, partition.index)
            return False
        partition_log.append_records(records)
        partition.appended += len(records)
        partition.appended_bytes += sum(len(key or b"") + len(value or b"") for key, value in records)
        if partition.appended >= self.config.compact_after_records or \
                partition.appended_bytes >= self.config.compact_after_bytes:
            partition_log.compact()
            partition.appended = partition.appended_bytes = 0
        return True

    def _partition_index(self, group_id: str) -> int:
        index = self._index_of.get(group_id)
        if index is None:
            if len(self._index_of) > 100_000:
                self._index_of.clear()
            index = self._index_of[group_id] = coordinator_partition(group_id, self._partition_count())
        return index

    def clock_ms(self) -> int:
        """The groups' clock: monotonic, so that a wall-clock step moves no deadline."""
        return monotonic_ms()

    def wall_ms(self) -> int:
        """The time written into records (commit timestamps, a group's state timestamp)."""
        return wall_ms()

    def wake_for(self, deadline: int | None) -> None:
        """Make the timer task look again if a deadline comes before its next wake-up."""
        if deadline is not None and (self._next_wake_ms is None or deadline < self._next_wake_ms):
            self._wake.set()

    def emit(self, group_id: str, **fields: object) -> None:
        node = getattr(self.broker, "node_id", None)
        self.recorder.emit(COORDINATOR_EVENT, group=group_id, node=node, **fields)

    # ------------------------------------------------------------ timers

    async def _run_timers(self) -> None:
        """Sleep until the earliest group deadline (or until woken by a request), then tick."""
        while True:
            now = monotonic_ms()
            deadlines = []
            for partition in list(self._partitions.values()):
                deadlines.extend(self.groups.tick(partition, now))
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
