"""The classic group coordinator in virtual time: the broker's own state machine (`ClassicGroup`), driven unchanged,
its deadlines on the virtual clock, its commits fenced by the broker's own rules."""

from __future__ import annotations

import uuid

from experiments.sim.kernel import Simulation, Timer
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
from modern.coordinator.records.offset_commit import OffsetAndMetadata
from rebalance import events as ev
from rebalance.events import EventRecorder
from rebalance.types import TopicPartition


class Coordinator:
    """The broker's group coordinator for one group: the real ClassicGroup, its deadlines on the virtual clock."""

    def __init__(self, sim: Simulation, group_id: str, recorder: EventRecorder, config: GroupConfig | None = None):
        self.sim, self.recorder = sim, recorder
        config = config or GroupConfig()
        # Kafka's member id: the client id and a random UUID (drawn from the seed, for replay)
        self.group = ClassicGroup(group_id, config, now_ms=0,
                                  new_member_id=lambda prefix: f"{prefix}-{uuid.UUID(int=sim.rng.getrandbits(128), version=4)}")
        self._tick: Timer | None = None

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
        error, _ = offsets_fence.commit_to_classic_group(self.group, request, self.sim.now_int_ms)
        self._schedule_tick()   # a commit counts as a sign of life
        reply(error)

    def committed(self, partitions) -> dict[TopicPartition, int]:
        """An OffsetFetch's answer: the group's committed offsets of `partitions`."""
        held = self.group.offsets
        return {tp: held[(tp.topic, tp.partition)].offset for tp in partitions if (tp.topic, tp.partition) in held}

    def _apply(self, out: Output, direct_reply=None) -> None:
        for transition in out.transitions:   # as the broker's GroupMetadataManager records them
            cause = {} if transition.cause is None else dict(
                rebalance_reason=transition.cause.reason.value, member_ids=list(transition.cause.members))
            self.recorder.emit(ev.COORDINATOR_EVENT, group=self.group.group_id, node=0, event="state",
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
