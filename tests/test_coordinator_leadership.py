"""The coordinator's handlers against a stand-in broker: leadership moves, loading, lost appends.

The stand-in offers exactly the broker interface the coordinator uses (docs/broker.md), with
real `PartitionLog`s, so a leadership change can be staged without processes or sockets.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from kafka.protocol.consumer import (
    HeartbeatRequest,
    JoinGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest

from broker.log import PartitionLog
from broker.registry import HandlerRegistry
from broker.view import LeadershipChange
from modern.common import errors
from modern.coordinator.classic_group import GroupConfig
from modern.coordinator.service import OFFSETS_TOPIC, CoordinatorConfig, CoordinatorExtension
from rebalance.javahash import coordinator_partition

GROUP = "leadership-group"
INDEX = coordinator_partition(GROUP)


class StandInBroker:
    def __init__(self, node_id: int, logs: dict) -> None:
        self.node_id = node_id
        self.config = SimpleNamespace(offsets_topic_partitions=50)
        self.logs = logs                  # shared "storage": (topic, partition) -> PartitionLog
        self.leading: set[int] = set()
        self.leader = node_id
        self._callbacks = []
        self.cluster = SimpleNamespace(leader_for=lambda topic, p: self.leader,
                                       on_leadership_change=self._callbacks.append)

    def log(self, topic, partition):
        return self.logs.get((topic, partition)) if partition in self.leading else None

    def advertised_address(self, node_id, client_id):
        return "127.0.0.1", 9000 + node_id

    def gain(self, partition: int) -> None:
        self.leading.add(partition)
        self.leader = self.node_id
        self.logs.setdefault((OFFSETS_TOPIC, partition), PartitionLog(OFFSETS_TOPIC, partition))
        for callback in self._callbacks:
            callback(LeadershipChange(OFFSETS_TOPIC, partition, self.node_id, local=True))

    def lose(self, partition: int, new_leader: int) -> None:
        self.leading.discard(partition)
        self.leader = new_leader
        for callback in self._callbacks:
            callback(LeadershipChange(OFFSETS_TOPIC, partition, new_leader, local=False))


def ctx(version: int, client_id: str = "c") -> SimpleNamespace:
    return SimpleNamespace(api_version=version, client_id=client_id, client_host="127.0.0.1")


def join_request(member_id: str = "") -> object:
    return JoinGroupRequest[5](group_id=GROUP, session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                               member_id=member_id, group_instance_id=None, protocol_type="consumer",
                               protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"m")])


def commit_request(member_id: str, generation: int, offset: int) -> object:
    topic_cls = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest[7](group_id=GROUP, generation_id_or_member_epoch=generation, member_id=member_id,
                                  group_instance_id=None, topics=[topic_cls(name="t", partitions=[
                                      topic_cls.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                                             committed_leader_epoch=-1,
                                                                             committed_metadata="")])])


def make(node_id: int, logs: dict) -> tuple[StandInBroker, CoordinatorExtension]:
    broker = StandInBroker(node_id, logs)
    extension = CoordinatorExtension(CoordinatorConfig(group=GroupConfig(initial_rebalance_delay_ms=0)))
    extension.install(broker, HandlerRegistry())
    return broker, extension


def test_group_moves_to_a_new_coordinator_with_its_offsets_and_parked_joins_learn_it():
    async def scenario() -> None:
        logs: dict = {}
        first_broker, first = make(0, logs)
        first_broker.gain(INDEX)
        await first.start()
        answer = await first.join_group(ctx(5), join_request())
        member = answer.member_id
        joined = await first.join_group(ctx(5), join_request(member))
        assert joined.error_code == 0 and joined.generation_id == 1
        synced = await first.sync_group(ctx(3), SyncGroupRequest[3](
            group_id=GROUP, generation_id=1, member_id=member, group_instance_id=None,
            assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=member, assignment=b"a")]))
        assert synced.error_code == 0
        committed = await first.offset_commit(ctx(7), commit_request(member, 1, 42))
        assert committed.topics[0].partitions[0].error_code == 0

        # A second member's join is parked when the partition moves away: it learns NOT_COORDINATOR.
        parked = asyncio.ensure_future(first.join_group(ctx(5, "late"), join_request()))
        second_id = (await parked).member_id
        parked = asyncio.ensure_future(first.join_group(ctx(5, "late"), join_request(second_id)))
        await asyncio.sleep(0)
        first_broker.lose(INDEX, new_leader=1)
        assert errors.for_code((await parked).error_code) is errors.NOT_COORDINATOR
        beat = await first.heartbeat(ctx(3), HeartbeatRequest[3](group_id=GROUP, generation_id=1, member_id=member,
                                                                 group_instance_id=None))
        assert errors.for_code(beat.error_code) is errors.NOT_COORDINATOR

        # The new coordinator replays the same log: same generation, same member, same offsets.
        second_broker, second = make(1, logs)
        second_broker.gain(INDEX)
        await second.start()
        beat = await second.heartbeat(ctx(3), HeartbeatRequest[3](group_id=GROUP, generation_id=1, member_id=member,
                                                                  group_instance_id=None))
        assert beat.error_code == 0
        fetched = await second.offset_fetch(ctx(7), OffsetFetchRequest[7](group_id=GROUP, topics=[
            OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0])], require_stable=False))
        assert fetched.topics[0].partitions[0].committed_offset == 42
        await first.stop()
        await second.stop()

    asyncio.run(scenario())


def test_a_commit_whose_log_is_gone_answers_not_coordinator():
    async def scenario() -> None:
        logs: dict = {}
        broker, coordinator = make(0, logs)
        broker.gain(INDEX)
        await coordinator.start()
        broker.leading.discard(INDEX)  # the log closed; the leadership news has not arrived yet
        answer = await coordinator.offset_commit(ctx(7), commit_request("", -1, 5))
        assert errors.for_code(answer.topics[0].partitions[0].error_code) is errors.NOT_COORDINATOR
        await coordinator.stop()

    asyncio.run(scenario())


def test_find_coordinator_names_the_partition_leader():
    async def scenario() -> None:
        broker, coordinator = make(0, {})
        broker.leader = 2
        answer = await coordinator.find_coordinator(ctx(3), FindCoordinatorRequest[3](key=GROUP, key_type=0))
        assert (answer.error_code, answer.node_id, answer.port) == (0, 2, 9002)
        answer = await coordinator.find_coordinator(ctx(3), FindCoordinatorRequest[3](key=GROUP, key_type=1))
        assert errors.for_code(answer.error_code) is errors.COORDINATOR_NOT_AVAILABLE
        not_ours = await coordinator.join_group(ctx(5), join_request())
        assert errors.for_code(not_ours.error_code) is errors.NOT_COORDINATOR

    asyncio.run(scenario())


def test_a_new_coordinator_answers_load_in_progress_until_it_has_read_the_partition_back():
    async def scenario() -> None:
        logs: dict = {}
        broker = StandInBroker(1, logs)
        coordinator = CoordinatorExtension(CoordinatorConfig(group=GroupConfig(initial_rebalance_delay_ms=0),
                                                             load_delay_ms=300))
        coordinator.install(broker, HandlerRegistry())
        await coordinator.start()
        broker.gain(INDEX)
        loading = await coordinator.join_group(ctx(5), join_request())
        assert errors.for_code(loading.error_code) is errors.COORDINATOR_LOAD_IN_PROGRESS
        fetch = OffsetFetchRequest[7](group_id=GROUP, topics=None, require_stable=False)
        assert errors.for_code((await coordinator.offset_fetch(ctx(7), fetch)).error_code) is \
            errors.COORDINATOR_LOAD_IN_PROGRESS
        while errors.for_code((answer := await coordinator.join_group(ctx(5), join_request())).error_code) is \
                errors.COORDINATOR_LOAD_IN_PROGRESS:
            await asyncio.sleep(0.05)  # a client retries after its backoff
        assert errors.for_code(answer.error_code) is errors.MEMBER_ID_REQUIRED
        await coordinator.stop()

    asyncio.run(scenario())


def test_losing_a_partition_while_loading_cancels_the_load():
    async def scenario() -> None:
        broker = StandInBroker(1, {})
        coordinator = CoordinatorExtension(CoordinatorConfig(load_delay_ms=100))
        coordinator.install(broker, HandlerRegistry())
        await coordinator.start()
        broker.gain(INDEX)
        broker.lose(INDEX, new_leader=2)
        await asyncio.sleep(0.2)
        answer = await coordinator.join_group(ctx(5), join_request())
        assert errors.for_code(answer.error_code) is errors.NOT_COORDINATOR
        await coordinator.stop()

    asyncio.run(scenario())


def test_a_heartbeat_to_a_loading_coordinator_is_answered_none():
    """Kafka's coordinator (3.7's GroupCoordinatorService.heartbeat, and trunk's) answers a classic
    Heartbeat blindly with NONE while the group is still loading: the member keeps its session and
    its rhythm. Join, sync, commit and fetch are told COORDINATOR_LOAD_IN_PROGRESS."""
    async def scenario() -> None:
        broker = StandInBroker(1, {})
        coordinator = CoordinatorExtension(CoordinatorConfig(group=GroupConfig(initial_rebalance_delay_ms=0),
                                                             load_delay_ms=300))
        coordinator.install(broker, HandlerRegistry())
        await coordinator.start()
        broker.gain(INDEX)
        beat = await coordinator.heartbeat(ctx(3), HeartbeatRequest[3](group_id=GROUP, generation_id=1,
                                                                       member_id="m-1", group_instance_id=None))
        assert errors.for_code(beat.error_code) is errors.NONE
        joined = await coordinator.join_group(ctx(5), join_request())
        assert errors.for_code(joined.error_code) is errors.COORDINATOR_LOAD_IN_PROGRESS
        committed = await coordinator.offset_commit(ctx(7), commit_request("m-1", 1, 5))
        assert errors.for_code(committed.topics[0].partitions[0].error_code) is errors.COORDINATOR_LOAD_IN_PROGRESS
        broker.lose(INDEX, new_leader=2)   # not (or no longer) the coordinator: that is still said
        beat = await coordinator.heartbeat(ctx(3), HeartbeatRequest[3](group_id=GROUP, generation_id=1,
                                                                       member_id="m-1", group_instance_id=None))
        assert errors.for_code(beat.error_code) is errors.NOT_COORDINATOR
        await coordinator.stop()

    asyncio.run(scenario())
