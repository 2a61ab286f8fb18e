"""KIP-848 in virtual time: the broker's consumer group state machine, driven unchanged, and a model of the
lab's KIP-848 client (Kafka 4's) around it.

Shared: `modern.coordinator.consumer_group.ConsumerGroup` (member epochs, the target assignment from the
server assignors, revocation before reassignment, session and rebalance deadlines) with Kafka 4's timing
(`rebalance.consumer_group_timing`: a 45 s session, a 5 s heartbeat), and `rebalance.heartbeat_kinds`, which
names each heartbeat as the real client names it (join, leave, ack, assignment, steady).

Modelled: the client (`modern/kip848/`). One heartbeat in flight at a time, every interval the coordinator
gives; an answer whose assignment differs from what the member holds is reconciled at once (the application
is idle): partitions to give up are revoked, new ones have their offsets fetched, and either sends an
acknowledging heartbeat straight away, reporting what the member owns. A member fenced or unknown to the
coordinator loses its partitions and joins again with epoch 0."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from experiments.sim.application import record_commit
from experiments.sim.classic import Network
from experiments.sim.kernel import Simulation, Timer
from modern.common import errors
from modern.coordinator import offset_metadata_manager as offsets_fence
from modern.coordinator.assignors import ASSIGNORS
from modern.coordinator.consumer_group import (
    ConsumerGroup,
    ConsumerGroupConfig,
    HeartbeatRequest,
    HeartbeatResult,
    Member,
    MemberState,
)
from modern.coordinator.records import consumer_group as records
from modern.coordinator.records.consumer_group import encode
from modern.coordinator.records.offset_commit import OffsetAndMetadata
from modern.coordinator.replay import replay_consumer_groups
from rebalance import events as ev
from rebalance import heartbeat_kinds
from rebalance.events import EventRecorder
from rebalance.topic_ids import topic_id
from rebalance.types import TopicPartition

JOIN_EPOCH, LEAVE_EPOCH = 0, -1
FENCED = (errors.FENCED_MEMBER_EPOCH, errors.UNKNOWN_MEMBER_ID)


class Coordinator:
    """The broker's side of one consumer group: the real ConsumerGroup, its deadlines on the virtual clock."""

    def __init__(self, sim: Simulation, group_id: str, recorder: EventRecorder, topics: Mapping[str, int],
                 config: ConsumerGroupConfig | None = None) -> None:
        self.sim, self.recorder, self.topics = sim, recorder, dict(topics)
        self.group = ConsumerGroup(group_id, config or ConsumerGroupConfig(), now_ms=0)
        self._tick: Timer | None = None

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
        for event in out.events:   # as the broker's GroupMetadataManager records them
            self.recorder.emit(ev.COORDINATOR_EVENT, group=self.group.group_id, node=0, protocol="consumer", **event)
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
            self.group.offsets.update({(tp.topic, tp.partition): OffsetAndMetadata(offset, commit_timestamp_ms=
                                                                                    self.sim.now_int_ms)
                                       for tp, offset in offsets.items()})
        reply(error)

    def committed(self, partitions) -> dict[TopicPartition, int]:
        held = self.group.offsets
        return {tp: held[(tp.topic, tp.partition)].offset for tp in partitions if (tp.topic, tp.partition) in held}

    def load_stable(self, members: list[Kip848Member]) -> dict[str, frozenset[tuple[str, int]]]:
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


class Kip848Member:
    """One member of a consumer group, as the lab's KIP-848 client behaves towards the coordinator."""

    def __init__(self, sim: Simulation, network: Network, coordinator: Coordinator, recorder: EventRecorder, *,
                 name: str, group: str, topics: dict[str, int], assignor: str,
                 rebalance_timeout_ms: int = 300_000) -> None:
        self.sim, self.network, self.coordinator, self.recorder = sim, network, coordinator, recorder
        self.name, self.group, self.topics, self.assignor = name, group, topics, assignor
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.member_id = coordinator.new_member_id()
        self.epoch = JOIN_EPOCH
        self.interval_ms = coordinator.group.config.heartbeat_interval_ms
        self.target: frozenset[TopicPartition] | None = None   # the last assignment the coordinator sent
        self.owned: frozenset[TopicPartition] = frozenset()
        self.reported: frozenset[TopicPartition] | None = None  # what the coordinator last heard the member owns
        self.in_flight = False
        self.ack_due = False
        self._next: Timer | None = None
        self._alive = False
        self._rebalance_started: float | None = None
        self._steps = 0
        self.positions: dict[TopicPartition, int] = {}    # next offset to fetch, per owned partition
        self.app = None                                   # experiments.sim.application.Application, when records flow

    def attach(self, app) -> None:
        self.app = app

    @property
    def generation(self) -> int:
        return self.epoch

    @property
    def stable(self) -> bool:
        return self._alive and self.target is not None and self.owned == self.target and not self.in_flight

    # -- what the driver does ------------------------------------------------------------------------

    def start(self) -> None:
        self._alive = True
        self.recorder.emit(ev.MEMBER_STARTED, self.name, group=self.group, strategy=self.assignor,
                           topics=sorted(self.topics), group_instance_id=None, pid=0)
        self._open_rebalance("join")
        self._request("FindCoordinator", self._beat_now)
        if self.app is not None:
            self.app.start()

    def leave(self) -> None:
        """A clean close, once the batch under way is handled (Spring commits what it kept first)."""
        if not self._alive:
            return
        if self.app is not None and self.app.handling:
            self.app.on_batch_done = self.leave
            return
        if self.app is not None:
            self.app.stop()
            self.app.commit_kept_before_revoking(set(self.owned), self._close)
        else:
            self._close()

    def _close(self) -> None:
        self._alive = False
        self._cancel_next()
        if self.owned:
            self.recorder.emit(ev.PARTITIONS_REVOKED, self.name, partitions=sorted(map(str, self.owned)))
        request = HeartbeatRequest(member_id=self.member_id, member_epoch=LEAVE_EPOCH)
        self._send(request, LEAVE_EPOCH, owned=None,   # the member stops once its leave heartbeat is answered
                   on_answer=lambda _answer: self.recorder.emit(ev.MEMBER_STOPPED, self.name, reason="close"))

    def crash(self) -> None:
        self._alive = False
        self._cancel_next()
        if self.app is not None:
            self.app.stop()

    def start_stable(self, assigned: frozenset[tuple[str, int]], epoch: int) -> None:
        """Begin as a member of a group the coordinator loaded (Coordinator.load_stable): owning `assigned`
        at `epoch`, its events those of a member that joined and reconciled, its first heartbeat at a seeded
        moment of its interval (members that joined one after another beat out of step)."""
        self._alive = True
        self.recorder.emit(ev.MEMBER_STARTED, self.name, group=self.group, strategy=self.assignor,
                           topics=sorted(self.topics), group_instance_id=None, pid=0)
        self._open_rebalance("join")
        self.epoch = epoch
        self.target = self.owned = self.reported = _ours(assigned)
        if self.owned:
            self.recorder.emit(ev.PARTITIONS_ASSIGNED, self.name, partitions=sorted(map(str, self.owned)), committed={})
        self._maybe_complete()
        self._schedule(self.sim.rng.random() * self.interval_ms)

    # -- heartbeats ----------------------------------------------------------------------------------

    def _beat_now(self) -> None:
        self._cancel_next()
        if not self._alive:
            return
        if self.in_flight:
            self.ack_due = True   # one heartbeat at a time: the next goes when this one is answered
            return
        send_all = self.epoch == JOIN_EPOCH
        owned = self.owned if (send_all or self.owned != self.reported) else None
        request = HeartbeatRequest(
            member_id=self.member_id, member_epoch=self.epoch,
            rebalance_timeout_ms=self.rebalance_timeout_ms if send_all else -1,
            subscribed_topics=tuple(sorted(self.topics)) if send_all else None,
            server_assignor=self.assignor if send_all else None, owned=None if owned is None else _wire(owned),
            client_id=self.name, member_id_from_client=True)
        self._send(request, self.epoch, owned=owned, on_answer=self._answered)

    def _answered(self, answer: HeartbeatResult, owned_sent: frozenset[TopicPartition] | None) -> None:
        self.in_flight = False
        if not self._alive:
            return
        if answer.error in FENCED:
            self._fenced()
            return
        if answer.error is not errors.NONE:
            self._schedule(self.interval_ms)
            return
        if owned_sent is not None:
            self.reported = owned_sent
        self.epoch = answer.member_epoch
        self.interval_ms = answer.heartbeat_interval_ms or self.interval_ms
        if answer.assignment is not None:
            self.target = _ours(answer.assignment)
        if self.app is None:
            self._reconcile()
        elif self.target is not None and self.target != self.owned:
            self._news()   # the application's next poll reconciles (Kafka runs the callbacks inside poll)
        if self.ack_due or self.owned != self.reported:
            self.ack_due = False
            self._beat_now()
        else:
            self._schedule(self.interval_ms)

    def _fenced(self) -> None:
        if self.owned:
            self.recorder.emit(ev.PARTITIONS_LOST, self.name, partitions=sorted(map(str, self.owned)))
        self.owned, self.target, self.reported, self.epoch = frozenset(), None, None, JOIN_EPOCH
        self.positions.clear()
        self._open_rebalance("fenced")
        self._beat_now()

    def _schedule(self, delay_ms: float) -> None:
        self._cancel_next()
        self._next = self.sim.after(delay_ms, self._beat_now)

    def _cancel_next(self) -> None:
        if self._next is not None:
            self._next.cancel()
            self._next = None

    # -- the application's thread ---------------------------------------------------------------------

    @property
    def may_commit(self) -> bool:
        """In the group (a member epoch given): a commit goes out, fenced by that epoch at the coordinator."""
        return self._alive and self.epoch > JOIN_EPOCH

    def _news(self) -> None:
        if self.app is not None:
            self.app.wake()

    def poll_group(self, then) -> None:
        """A poll's reconciliation step (the lab's client, as Kafka 4's, runs it on the polling thread): revoke what
        the target took away (Spring committing what it kept first) and acknowledge, then fetch the new partitions'
        offsets, assign them and acknowledge."""
        if not self._alive or self.target is None or self.target == self.owned:
            self._maybe_complete()
            then()
            return
        self._open_rebalance("assignment")
        revoked = self.owned - self.target

        def take_new() -> None:
            added = (self.target or frozenset()) - self.owned
            if not added:
                self._maybe_complete()
                then()
                return
            self._request("OffsetFetch", lambda: (self._assigned(frozenset(added)), then()))

        def give_up() -> None:
            self.owned = self.owned - revoked
            for tp in revoked:
                self.positions.pop(tp, None)
            self._steps += 1
            self.recorder.emit(ev.PARTITIONS_REVOKED, self.name, partitions=sorted(map(str, revoked)))
            self._beat_now()   # acknowledge at once
            take_new()

        if not revoked:
            take_new()
        elif self.app is not None:
            self.app.commit_kept_before_revoking(set(revoked), give_up)
        else:
            give_up()

    def commit(self, offsets: dict[TopicPartition, int], then) -> None:
        if not self.may_commit:
            record_commit(self, offsets, self.epoch, "UNKNOWN_MEMBER_ID")
            then("UNKNOWN_MEMBER_ID")
            return
        member_id, epoch = self.member_id, self.epoch

        def answered(error) -> None:
            name = None if error is errors.NONE else errors.name_of(error)
            record_commit(self, offsets, epoch, name)
            then(name)

        sent = self.sim.now_ms

        def at_coordinator() -> None:
            self.coordinator.commit(member_id, epoch, offsets, lambda error: self.sim.after(
                self.network.delay_ms(), lambda: arrive(error)))

        def arrive(error) -> None:
            self.recorder.emit(ev.COORDINATION_REQUEST, self.name, op="OffsetCommit", group=self.group,
                               latency_ms=round(self.sim.now_ms - sent, 3),
                               error=errors.name_of(error) if error is not errors.NONE else None)
            answered(error)

        self.sim.after(self.network.delay_ms(), at_coordinator)

    # -- reconciliation (the polling thread, idle) ----------------------------------------------------

    def _reconcile(self) -> None:
        if self.target is None or self.target == self.owned:
            self._maybe_complete()
            return
        self._open_rebalance("assignment")
        revoked = self.owned - self.target
        if revoked:
            self.owned = self.owned - revoked
            self._steps += 1
            self.recorder.emit(ev.PARTITIONS_REVOKED, self.name, partitions=sorted(map(str, revoked)))
        added = self.target - self.owned
        if added:
            self._request("OffsetFetch", lambda: self._assigned(frozenset(added)))
        else:
            self._maybe_complete()

    def _assigned(self, added: frozenset[TopicPartition]) -> None:
        if not self._alive:
            return
        if self.target is not None:
            added = added & self.target   # a later answer may have taken some back meanwhile
        self.owned = self.owned | added
        self._steps += 1
        committed = self.coordinator.committed(added) if self.app is not None else {}
        for tp in added:
            self.positions[tp] = committed.get(tp, 0)   # no committed offset: the earliest
        if added:
            self.recorder.emit(ev.PARTITIONS_ASSIGNED, self.name, partitions=sorted(map(str, added)),
                               committed={str(tp): offset for tp, offset in sorted(committed.items())})
        self._maybe_complete()
        self._beat_now()   # acknowledge at once

    def _open_rebalance(self, trigger: str) -> None:
        if self._rebalance_started is None:
            self._rebalance_started, self._steps = self.sim.now_ms, 0
            self.recorder.emit(ev.REBALANCE_STARTED, self.name, trigger=trigger, group=self.group)

    def _maybe_complete(self) -> None:
        if self._rebalance_started is not None and self.target is not None and self.owned == self.target:
            self.recorder.emit(ev.REBALANCE_COMPLETED, self.name, generation=self.epoch,
                               assigned=sorted(map(str, self.owned)),
                               duration_ms=round(self.sim.now_ms - self._rebalance_started, 3),
                               attempts=max(1, self._steps), protocol=self.assignor, leader=False,
                               member_id=self.member_id)
            self._rebalance_started = None

    # -- requests -------------------------------------------------------------------------------------

    def _send(self, request: HeartbeatRequest, epoch: int, *, owned, on_answer) -> None:
        """A ConsumerGroupHeartbeat, recorded with its kind (rebalance.heartbeat_kinds) when answered."""
        self.in_flight = epoch != LEAVE_EPOCH
        sent, held = self.sim.now_ms, self.target

        def at_coordinator() -> None:
            self.coordinator.heartbeat(request, lambda result: self.sim.after(self.network.delay_ms(),
                                                                             lambda: arrive(result)))

        def arrive(result: HeartbeatResult) -> None:
            assignment = None if result.assignment is None else _ours(result.assignment)
            detail = heartbeat_kinds.detail(member_epoch=epoch, owned_reported=owned is not None,
                                            assignment=assignment, held=held)
            self.recorder.emit(ev.COORDINATION_REQUEST, self.name, op=heartbeat_kinds.API, group=self.group,
                               latency_ms=round(self.sim.now_ms - sent, 3),
                               error=errors.name_of(result.error) if result.error is not errors.NONE else None,
                               detail=detail)
            if epoch == LEAVE_EPOCH:
                on_answer(result)
            else:
                on_answer(result, owned)

        self.sim.after(self.network.delay_ms(), at_coordinator)

    def _request(self, op: str, on_answer) -> None:
        """A request the model counts but the coordinator's state machine does not serve (the lookup, the
        offsets' fetch): answered after a round trip."""
        sent = self.sim.now_ms

        def arrive() -> None:
            self.recorder.emit(ev.COORDINATION_REQUEST, self.name, op=op, group=self.group,
                               latency_ms=round(self.sim.now_ms - sent, 3), error=None)
            on_answer()

        self.sim.after(self.network.delay_ms() * 2, arrive)


def _wire(partitions: frozenset[TopicPartition]) -> frozenset[tuple[str, int]]:
    """Partitions as the coordinator's state machine holds them: (topic, partition) pairs."""
    return frozenset((tp.topic, tp.partition) for tp in partitions)


def _ours(partitions) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(topic, partition) for topic, partition in partitions)
