"""The classic group coordinator in virtual time: the broker's own state machine (`ClassicGroup`), driven unchanged,
its deadlines on the virtual clock, its commits fenced by the broker's own rules. With a log (a server fault may
move the group), it appends what the broker appends (the group's metadata when the group says to store it, every
commit), and a coordinator that takes the group over rebuilds it from those records as the broker does."""

from __future__ import annotations

import uuid

from experiments.sim.kernel import Simulation, Timer
from experiments.sim.records import wall_ms
from modern.coordinator import offset_metadata_manager as offsets_fence
from modern.coordinator.classic_group import (
    ClassicGroup,
    GroupConfig,
    Heartbeat,
    JoinGroup,
    LeavingMember,
    Output,
    SyncGroup,
)
from modern.coordinator.records.classic_group import group_metadata_record
from modern.coordinator.records.offset_commit import OffsetAndMetadata, offset_commit_record
from modern.coordinator.replay import replay_offsets_and_classic_groups
from rebalance import events as ev
from rebalance.events import EventRecorder
from rebalance.types import TopicPartition


class Coordinator:
    """The broker's group coordinator for one group: the real ClassicGroup, its deadlines on the virtual clock."""

    def __init__(self, sim: Simulation, group_id: str, recorder: EventRecorder, config: GroupConfig | None = None, *,
                 node: int = 0, log: list | None = None):
        self.sim, self.recorder, self.node, self.log = sim, recorder, node, log
        config = config or GroupConfig()
        # Kafka's member id: the client id and a random UUID (drawn from the seed, for replay)
        self.group = ClassicGroup(group_id, config, now_ms=sim.now_int_ms, new_member_id=self._new_member_id)
        self._tick: Timer | None = None

    def _new_member_id(self, prefix: str) -> str:
        return f"{prefix}-{uuid.UUID(int=self.sim.rng.getrandbits(128), version=4)}"

    @classmethod
    def loaded(cls, sim: Simulation, group_id: str, recorder: EventRecorder, log: list, *, node: int) -> Coordinator:
        """A broker that took the group's partition over: the group replayed from the partition's records
        (`replay_offsets_and_classic_groups`, the broker's own load), Stable with its members' sessions from now."""
        coordinator = cls(sim, group_id, recorder, node=node, log=log)
        loaded = replay_offsets_and_classic_groups(log, coordinator.group.config, sim.now_int_ms).groups.get(group_id)
        if loaded is not None:
            loaded._new_member_id = coordinator._new_member_id   # the replay's group draws ids from the seed too
            coordinator.group = loaded
        group = coordinator.group
        recorder.emit(ev.COORDINATOR_EVENT, group=group_id, node=node, event="loaded", state=group.state.value,
                      generation=group.generation_id, members=len(group.members), offsets=len(group.offsets))
        coordinator._schedule_tick()
        return coordinator

    def stop(self, *, unload: bool) -> None:
        """The broker died (`unload` False: nothing more happens here) or lost the partition (its parked requests
        are answered NOT_COORDINATOR, as the broker's unload answers them)."""
        if unload:
            self._apply(self.group.unload(self.sim.now_int_ms))
            self.recorder.emit(ev.COORDINATOR_EVENT, group=self.group.group_id, node=self.node, event="unloaded")
        if self._tick is not None:
            self._tick.cancel()
            self._tick = None

    def join(self, request: JoinGroup, reply) -> None:
        self._apply(self.group.handle_join(request, self.sim.now_int_ms, reply))

    def sync(self, request: SyncGroup, reply) -> None:
        self._apply(self.group.handle_sync(request, self.sim.now_int_ms, reply))

    def heartbeat(self, request: Heartbeat, reply) -> None:
        self._apply(self.group.handle_heartbeat(request, self.sim.now_int_ms), reply)

    def leave(self, member_id: str, reply) -> None:
        self._apply(self.group.handle_leave([LeavingMember(member_id=member_id)], self.sim.now_int_ms), reply)

    def commit(self, member_id: str, generation: int, offsets: dict[TopicPartition, int], reply) -> None:
        """An OffsetCommit, fenced as the broker fences it (offset_metadata_manager.commit_to_classic_group)."""
        request = offsets_fence.OffsetCommit(
            offsets={(tp.topic, tp.partition): OffsetAndMetadata(offset) for tp, offset in offsets.items()},
            member_id=member_id, generation_id=generation)
        error, stamped = offsets_fence.commit_to_classic_group(self.group, request, self.sim.now_int_ms)
        if self.log is not None:
            self.log += [offset_commit_record(self.group.group_id, topic, p, value) for (topic, p), value in stamped.items()]
        self._schedule_tick()   # a commit counts as a sign of life
        reply(error)

    def committed(self, partitions) -> dict[TopicPartition, int]:
        """An OffsetFetch's answer: the group's committed offsets of `partitions`."""
        held = self.group.offsets
        return {tp: held[(tp.topic, tp.partition)].offset for tp in partitions if (tp.topic, tp.partition) in held}

    def _apply(self, out: Output, direct_reply=None) -> None:
        if self.log is not None and out.store_group:
            self.log.append(group_metadata_record(self.group, wall_ms(self.sim.now_ms)))
        for transition in out.transitions:   # as the broker's GroupMetadataManager records them
            cause = {} if transition.cause is None else dict(
                rebalance_reason=transition.cause.reason.value, member_ids=list(transition.cause.members))
            self.recorder.emit(ev.COORDINATOR_EVENT, group=self.group.group_id, node=self.node, event="state",
                               from_state=transition.from_state.value, to_state=transition.to_state.value,
                               generation=self.group.generation_id, members=len(self.group.members),
                               reason=transition.reason, **cause)
        for token, result in out.replies:
            (token or direct_reply)(result)
        self._schedule_tick()

    def _schedule_tick(self) -> None:
        deadline = self.group.next_deadline()
        if self._tick is not None:
            if deadline is not None and self._tick.due_ms == deadline and not self._tick.cancelled:
                return
            self._tick.cancel()
            self._tick = None
        if deadline is not None:
            self._tick = self.sim.at(deadline, self._on_tick)

    def _on_tick(self) -> None:
        self._tick = None
        self._apply(self.group.tick(self.sim.now_int_ms))
