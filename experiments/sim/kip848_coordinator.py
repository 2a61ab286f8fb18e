"""The KIP-848 group coordinator in virtual time: the broker's own `ConsumerGroup`, driven unchanged, its deadlines on
the virtual clock, its commits fenced by member epoch as the broker fences them; a warm start loads the group as the
broker loads it from its log. With a log (a server fault may move the group), it appends the group's records and
every commit as the broker does, and a coordinator that takes the group over replays them as the broker does."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Protocol

from experiments.sim.kernel import Simulation, Timer
from modern.common import errors
from modern.coordinator import offset_metadata_manager as offsets_fence
from modern.coordinator.assignors import ASSIGNORS
from modern.coordinator.classic_group import GroupConfig
from modern.coordinator.consumer_group import (
    ConsumerGroup,
    ConsumerGroupConfig,
    HeartbeatRequest,
    Member,
    MemberState,
)
from modern.coordinator.records import consumer_group as records
from modern.coordinator.records.consumer_group import encode
from modern.coordinator.records.offset_commit import OffsetAndMetadata, offset_commit_record
from modern.coordinator.replay import replay_consumer_groups, replay_offsets_and_classic_groups
from rebalance import events as ev
from rebalance.events import EventRecorder
from rebalance.topic_ids import topic_id
from rebalance.types import TopicPartition


class LoadedMember(Protocol):
    """What a warm start needs of a member (experiments.sim.kip848.Kip848Member)."""

    member_id: str
    name: str
    topics: dict[str, int]
    assignor: str
    rebalance_timeout_ms: int


class Coordinator:
    """The broker's side of one consumer group: the real ConsumerGroup, its deadlines on the virtual clock."""

    def __init__(self, sim: Simulation, group_id: str, recorder: EventRecorder, topics: Mapping[str, int],
                 config: ConsumerGroupConfig | None = None, *, node: int = 0, log: list | None = None) -> None:
        self.sim, self.recorder, self.topics, self.node, self.log = sim, recorder, dict(topics), node, log
        self.group = ConsumerGroup(group_id, config or ConsumerGroupConfig(), now_ms=sim.now_int_ms)
        self._tick: Timer | None = None

    @classmethod
    def loaded(cls, sim: Simulation, group_id: str, recorder: EventRecorder, topics: Mapping[str, int],
               config: ConsumerGroupConfig, log: list, *, node: int) -> Coordinator:
        """A broker that took the group's partition over: the group as `GroupMetadataManager.load` rebuilds it, its
        consumer group records replayed (`replay_consumer_groups`, sessions from now) and the offsets replayed with
        the classic records moved over to it."""
        coordinator = cls(sim, group_id, recorder, topics, config, node=node, log=log)
        now = sim.now_int_ms
        stored = [kv for kv in log if records.is_consumer_group_record(kv[0])]
        offsets = replay_offsets_and_classic_groups([kv for kv in log if not records.is_consumer_group_record(kv[0])],
                                                    GroupConfig(), now).groups.get(group_id)
        group = replay_consumer_groups(stored, coordinator.topics, topic_id, config, now).get(group_id)
        if group is not None:
            coordinator.group = group
        if offsets is not None and not offsets.members:
            coordinator.group.offsets = dict(offsets.offsets)
        group = coordinator.group
        recorder.emit(ev.COORDINATOR_EVENT, group=group_id, node=node, protocol="consumer", event="loaded",
                      group_epoch=group.group_epoch, members=len(group.members), offsets=len(group.offsets))
        coordinator._schedule_tick()
        return coordinator

    def stop(self, *, unload: bool) -> None:
        """The broker died, or lost the partition (no request waits at a consumer group's coordinator)."""
        if unload:
            self.recorder.emit(ev.COORDINATOR_EVENT, group=self.group.group_id, node=self.node, protocol="consumer",
                               event="unloaded")
        if self._tick is not None:
            self._tick.cancel()
            self._tick = None

    def new_member_id(self) -> str:
        """KIP-848 v1: the client makes its member id, a random UUID (drawn from the seed, for replay): the
        server assignors order members by id, so which members give partitions to a newcomer varies as in
        Kafka."""
        return str(uuid.UUID(int=self.sim.rng.getrandbits(128), version=4))

    def heartbeat(self, request: HeartbeatRequest, reply) -> None:
        out = self.group.heartbeat(request, self.topics, self.sim.now_int_ms)
        self._events(out)
        reply(out.result)

    def _events(self, out) -> None:
        if self.log is not None:
            self.log += [encode(record, topic_id) for record in out.records]
        for event in out.events:   # as the broker's GroupMetadataManager records them
            self.recorder.emit(ev.COORDINATOR_EVENT, group=self.group.group_id, node=self.node, protocol="consumer",
                               **event)
        self._schedule_tick()

    def _schedule_tick(self) -> None:
        if self._tick is not None:
            self._tick.cancel()
            self._tick = None
        deadline = self.group.next_deadline()
        if deadline is not None:
            self._tick = self.sim.at(deadline, self._on_tick)

    def _on_tick(self) -> None:
        self._tick = None
        self._events(self.group.tick(self.sim.now_int_ms))

    def commit(self, member_id: str, epoch: int, offsets: dict[TopicPartition, int], reply) -> None:
        """An OffsetCommit v9, fenced by member epoch as the broker fences it (offset_metadata_manager)."""
        error = offsets_fence.consumer_commit_error(self.group, offsets_fence.OFFSET_COMMIT_MEMBER_EPOCH_VERSION,
                                                    member_id, epoch)
        if error is errors.NONE:
            stamped = {(tp.topic, tp.partition): OffsetAndMetadata(offset, commit_timestamp_ms=self.sim.now_int_ms)
                       for tp, offset in offsets.items()}
            if self.log is not None:
                self.log += [offset_commit_record(self.group.group_id, t, p, value) for (t, p), value in stamped.items()]
            self.group.offsets.update(stamped)
        reply(error)

    def committed(self, partitions) -> dict[TopicPartition, int]:
        held = self.group.offsets
        return {tp: held[(tp.topic, tp.partition)].offset for tp in partitions if (tp.topic, tp.partition) in held}

    def load_stable(self, members: Sequence[LoadedMember]) -> dict[str, frozenset[tuple[str, int]]]:
        """A warm start: the group as the coordinator loads it from its log, `members` stable at the epoch their
        joins would have reached (one each), on one target the assignor computed for all of them at once.
        Kafka's path when a coordinator takes over a group; here it stands in for a warm-up of N joins, each
        of which recomputes the target (O(N) each). Returns each member's partitions."""
        group_id, config, epoch = self.group.group_id, self.group.config, len(members)
        assignor = members[0].assignor if members else None
        subscriptions = {member.member_id: frozenset(member.topics) for member in members}
        subscribed = {topic for topics in subscriptions.values() for topic in topics}
        counts = {topic: n for topic, n in sorted(self.topics.items()) if topic in subscribed}
        target = ASSIGNORS[assignor](subscriptions, counts, {}, instance_ids={}) if members else {}
        written = [records.group_metadata(group_id, epoch)]
        for member in members:
            state = Member(member_id=member.member_id, instance_id=None, rack_id=None, client_id=member.name,
                           client_host="", subscribed_topics=tuple(sorted(member.topics)), server_assignor=assignor,
                           rebalance_timeout_ms=member.rebalance_timeout_ms, member_epoch=epoch,
                           previous_epoch=epoch - 1, state=MemberState.STABLE,
                           assigned=target.get(member.member_id, frozenset()))
            written += [records.member_metadata(group_id, member.member_id, state),
                        records.target_member(group_id, member.member_id, state.assigned),
                        records.current_assignment(group_id, member.member_id, state)]
        written.append(records.target_metadata(group_id, epoch))
        stored = [encode(record, topic_id) for record in written]
        self.group = replay_consumer_groups(stored, self.topics, topic_id, config, self.sim.now_int_ms).get(
            group_id, ConsumerGroup(group_id, config, now_ms=self.sim.now_int_ms))
        self._schedule_tick()
        return {member.member_id: target.get(member.member_id, frozenset()) for member in members}
