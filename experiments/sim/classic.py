"""The classic protocol in virtual time: the coordinator's own state machine, driven unchanged, and a model of
Kafka 3.7's classic client around it.

Shared with the real broker: `modern.coordinator.classic_group.ClassicGroup` (every JoinGroup, SyncGroup,
Heartbeat and LeaveGroup, the join and sync deadlines, session expiry), the client-side assignors
(`rebalance.assignors`) and the consumer protocol's encoding (`modern.classic.consumer_protocol`).

Modelled (the real client is threaded code): the member's requests, in the order `modern/classic/`
sends them. A member finds the coordinator, joins (MEMBER_ID_REQUIRED first, then with its id), the leader
assigns, every member syncs and fetches its committed offsets; the heartbeat thread beats every
heartbeat.interval.ms and a REBALANCE_IN_PROGRESS answer sends the member back to JoinGroup, an eager member
revoking everything first. The model's application is idle (a herd experiment's): the join steps the real
client runs on the application's thread at its next poll run here at once."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import Enum

from experiments.sim.application import record_commit
from experiments.sim.kernel import Simulation, Timer
from modern.classic.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from modern.common import errors
from modern.coordinator import offset_metadata_manager as offsets_fence
from modern.coordinator.classic_group import (
    ClassicGroup,
    GroupConfig,
    Heartbeat,
    HeartbeatResult,
    JoinGroup,
    JoinResult,
    LeavingMember,
    Output,
    SyncGroup,
    SyncResult,
)
from modern.coordinator.records.offset_commit import OffsetAndMetadata
from rebalance import events as ev
from rebalance.assignors import get_assignor
from rebalance.assignors.base import RebalanceProtocol
from rebalance.events import EventRecorder
from rebalance.types import Subscription, TopicPartition

PROTOCOL_TYPE = "consumer"
NETWORK_ONE_WAY_MS = 0.25          # loopback, as the lab's runs have it: requests answer in well under 1 ms
NETWORK_JITTER_MS = 0.15


@dataclass(frozen=True, kw_only=True)
class ClientTiming:
    """The classic client's settings that time its group requests (Kafka 3.7's defaults)."""

    session_timeout_ms: int
    heartbeat_interval_ms: int = 3_000
    rebalance_timeout_ms: int = 300_000       # max.poll.interval.ms
    retry_backoff_ms: int = 100


class Network:
    """One-way delays between a member and the coordinator: loopback plus a seeded jitter."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    def delay_ms(self) -> float:
        return NETWORK_ONE_WAY_MS + self.sim.rng.random() * NETWORK_JITTER_MS


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


class State(Enum):
    STOPPED = "stopped"
    UNJOINED = "unjoined"     # out of the group (fenced) until the application's next poll rejoins
    JOINING = "joining"
    SYNCING = "syncing"
    STABLE = "stable"


class ClassicMember:
    """One member of the group, as the lab's classic client behaves towards the coordinator.

    Without an application (a herd: nobody polls) each step of a join runs as soon as its answer arrives. With one
    (`attach`), the steps Kafka 3.7 runs on the application's thread wait for its next poll (`poll_group`): the
    JoinGroup's answer (the leader assigns there), the finished join applied (revocations, the new partitions'
    offsets fetched), a rejoin prepared (an eager member revoking everything first)."""

    def __init__(self, sim: Simulation, network: Network, coordinator: Coordinator, recorder: EventRecorder, *,
                 name: str, group: str, topics: dict[str, int], strategy: str, timing: ClientTiming) -> None:
        self.sim, self.network, self.coordinator, self.recorder = sim, network, coordinator, recorder
        self.name, self.group, self.topics, self.timing = name, group, topics, timing
        self.assignor = get_assignor(strategy)
        self.cooperative = self.assignor.rebalance_protocol is RebalanceProtocol.COOPERATIVE
        self.state = State.STOPPED
        self.member_id = ""
        self.generation = -1
        self.owned: frozenset[TopicPartition] = frozenset()
        self.positions: dict[TopicPartition, int] = {}    # next offset to fetch, per owned partition
        self.attempts = 0
        self.round_started_ms = 0.0
        self._heartbeat: Timer | None = None
        self._alive = False
        self.app = None                                   # experiments.sim.application.Application, when records flow
        self._rejoin_reason: str | None = None            # a rejoin asked for, waiting for the application's poll
        self._answer: tuple[str, object] | None = None    # a JoinGroup's or SyncGroup's answer, waiting for it too

    def attach(self, app) -> None:
        self.app = app

    # -- what the driver does to a member -----------------------------------------------------------

    def start(self) -> None:
        self._alive = True
        self.recorder.emit(ev.MEMBER_STARTED, self.name, group=self.group, strategy=self.assignor.name,
                           topics=sorted(self.topics), group_instance_id=None, pid=0)
        self._begin_round("join")
        self._request("FindCoordinator", lambda: self._send_join())
        if self.app is not None:
            self.app.start()

    def leave(self) -> None:
        """A clean close, once the batch under way is handled (a pod's consumer stopping): revoke (eager and
        cooperative alike at close; Spring commits what it kept first), LeaveGroup, stop."""
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
        self._stop_heartbeats()
        self._revoke(self.owned)
        member_id, self._alive, self.state = self.member_id, False, State.STOPPED
        self._request("LeaveGroup", lambda _answer: self.recorder.emit(ev.MEMBER_STOPPED, self.name, reason="close"),
                      to_coordinator=lambda reply: self.coordinator.leave(member_id, reply))

    def crash(self) -> None:
        """The process is gone: no request, no event; the coordinator learns of it by its session."""
        self._stop_heartbeats()
        self._alive, self.state = False, State.STOPPED
        if self.app is not None:
            self.app.stop()

    @property
    def stable(self) -> bool:
        return self._alive and self.state is State.STABLE

    @property
    def may_commit(self) -> bool:
        """Kafka 3.7 sends a commit only from a stable member (generationIfStable); else it refuses it at once."""
        return self.stable

    # -- the application's thread ---------------------------------------------------------------------

    def poll_group(self, then) -> None:
        """The group's steps that wait for a poll, then `then` (the poll goes on to fetch)."""
        if not self._alive:
            return
        if self._answer is not None:
            kind, answer = self._answer
            self._answer = None
            if kind == "join":
                self._on_join_answer(answer)
                then()
            else:
                self._on_sync_answer(answer, then)
            return
        if self._rejoin_reason is not None and self.state in (State.STABLE, State.UNJOINED):
            reason, self._rejoin_reason = self._rejoin_reason, None
            self._rejoin(reason, then)
            return
        then()

    def _news(self) -> None:
        if self.app is not None:
            self.app.wake()

    def commit(self, offsets: dict[TopicPartition, int], then) -> None:
        if not self.may_commit:
            record_commit(self, offsets, self.generation, "REBALANCE_IN_PROGRESS")
            then("REBALANCE_IN_PROGRESS")
            return
        member_id, generation = self.member_id, self.generation

        def answered(error) -> None:
            name = None if error is errors.NONE else errors.name_of(error)
            record_commit(self, offsets, generation, name)
            if error in (errors.UNKNOWN_MEMBER_ID, errors.ILLEGAL_GENERATION, errors.FENCED_INSTANCE_ID) \
                    and self.state is State.STABLE and self.generation == generation:
                self._lose_membership(keep_id=error is errors.ILLEGAL_GENERATION)
                self.state, self._rejoin_reason = State.UNJOINED, f"commit: {name}"
            then(name)

        self._request("OffsetCommit", answered, to_coordinator=lambda reply: self.coordinator.commit(
            member_id, generation, offsets, reply))

    # -- the join -----------------------------------------------------------------------------------

    def _begin_round(self, trigger: str) -> None:
        self.state, self.attempts, self.round_started_ms = State.JOINING, 0, self.sim.now_ms
        self.recorder.emit(ev.REBALANCE_STARTED, self.name, trigger=trigger, group=self.group)

    def _send_join(self) -> None:
        if not self._alive:
            return
        self.attempts += 1
        subscription = Subscription(topics=tuple(sorted(self.topics)), owned_partitions=tuple(sorted(self.owned)),
                                    generation=self.generation)
        request = JoinGroup(session_timeout_ms=self.timing.session_timeout_ms,
                            rebalance_timeout_ms=self.timing.rebalance_timeout_ms, protocol_type=PROTOCOL_TYPE,
                            protocols=((self.assignor.name, encode_subscription(subscription)),),
                            member_id=self.member_id, client_id=self.name, require_known_member_id=True)
        self._request("JoinGroup", self._joined, to_coordinator=lambda reply: self.coordinator.join(request, reply))

    def _joined(self, answer: JoinResult) -> None:
        if not self._alive:
            return
        if self.app is None:
            self._on_join_answer(answer)
        else:   # read by the application's next poll
            self._answer = ("join", answer)
            self._news()

    def _on_join_answer(self, answer: JoinResult) -> None:
        if answer.error is errors.MEMBER_ID_REQUIRED:
            self.member_id = answer.member_id
            self._send_join()
            return
        if answer.error is not errors.NONE:
            self._join_failed(answer.error)
            return
        self.generation, self.member_id = answer.generation_id, answer.member_id
        self.state = State.SYNCING
        self._start_heartbeats()          # heartbeats start with the JoinGroup's answer, as Kafka's
        plan: dict[str, bytes] = {}
        if answer.leader == answer.member_id:
            subscriptions = {m.member_id: decode_subscription(m.metadata, m.group_instance_id) for m in answer.members}
            assigned = self.assignor.assign(self.topics, subscriptions)
            plan = {member: encode_assignment(assignment) for member, assignment in assigned.items()}
        request = SyncGroup(member_id=self.member_id, generation_id=self.generation, protocol_type=PROTOCOL_TYPE,
                            protocol_name=answer.protocol_name, assignments=plan)
        self._request("SyncGroup", self._synced, to_coordinator=lambda reply: self.coordinator.sync(request, reply))

    def _synced(self, answer: SyncResult) -> None:
        if not self._alive:
            return
        if self.app is None:
            self._on_sync_answer(answer, lambda: None)
        else:   # the round's thread reads it; the finished join is applied at the next poll
            self._answer = ("sync", answer)
            self._news()

    def _on_sync_answer(self, answer: SyncResult, then) -> None:
        if answer.error is not errors.NONE:
            self._join_failed(answer.error)
            then()
            return
        assigned = frozenset(decode_assignment(answer.assignment).partitions)
        added = assigned - self.owned
        revoked = self.owned - assigned
        rejoin = self.cooperative and bool(revoked)
        fetch = assigned if not self.cooperative else added

        def fetch_offsets() -> None:
            if self.cooperative and revoked:
                self._revoke(revoked)
            self._request("OffsetFetch", lambda: self._completed(assigned, fetch, rejoin=rejoin, then=then))

        if self.app is not None and self.cooperative and revoked:
            self.app.commit_kept_before_revoking(set(revoked), fetch_offsets)
        else:
            fetch_offsets()

    def _completed(self, assigned: frozenset[TopicPartition], fetched: frozenset[TopicPartition], *,
                   rejoin: bool, then) -> None:
        if not self._alive:
            return
        self.owned = assigned
        for tp in list(self.positions):
            if tp not in assigned:
                del self.positions[tp]
        committed = self.coordinator.committed(fetched) if self.app is not None else {}
        for tp in fetched:
            self.positions[tp] = committed.get(tp, 0)   # no committed offset: the earliest, as the lab's members reset
        if fetched:
            self.recorder.emit(ev.PARTITIONS_ASSIGNED, self.name, partitions=sorted(map(str, fetched)),
                               committed={str(tp): offset for tp, offset in sorted(committed.items())})
        self.state = State.STABLE
        self.recorder.emit(ev.REBALANCE_COMPLETED, self.name, generation=self.generation,
                           assigned=sorted(map(str, assigned)),
                           duration_ms=round(self.sim.now_ms - self.round_started_ms, 3), attempts=self.attempts,
                           protocol=self.assignor.name, leader=self.coordinator.group.leader_id == self.member_id,
                           member_id=self.member_id)
        if rejoin:   # KIP-429: what was given up goes to its new owner in a follow-up round, in the same poll
            self._rejoin("cooperative: revoked partitions", then)
        else:
            then()

    def _join_failed(self, error) -> None:
        if error in (errors.UNKNOWN_MEMBER_ID, errors.ILLEGAL_GENERATION, errors.FENCED_INSTANCE_ID):
            self._lose_membership(keep_id=error is errors.ILLEGAL_GENERATION)
        self.sim.after(0 if error is errors.REBALANCE_IN_PROGRESS else self.timing.retry_backoff_ms, self._send_join)

    def _lose_membership(self, *, keep_id: bool) -> None:
        if self.owned:
            self.recorder.emit(ev.PARTITIONS_LOST, self.name, partitions=sorted(map(str, self.owned)))
        self.owned, self.generation = frozenset(), -1
        self.positions.clear()
        if not keep_id:
            self.member_id = ""

    def _rejoin(self, trigger: str, then=lambda: None) -> None:
        """A rejoin: eager members give up everything before their JoinGroup (Kafka's onJoinPrepare; Spring commits
        what it kept first)."""
        self._begin_round(trigger)
        if self.cooperative or not self.owned:
            self._send_join()
            then()
            return

        def give_up() -> None:
            self._revoke(self.owned)
            self.owned = frozenset()
            self.positions.clear()
            self._send_join()
            then()

        if self.app is not None:
            self.app.commit_kept_before_revoking(set(self.owned), give_up)
        else:
            give_up()

    def _revoke(self, partitions: frozenset[TopicPartition]) -> None:
        if partitions:
            for tp in partitions:
                self.positions.pop(tp, None)
            self.recorder.emit(ev.PARTITIONS_REVOKED, self.name, partitions=sorted(map(str, partitions)))

    # -- the heartbeat thread -----------------------------------------------------------------------

    def _start_heartbeats(self) -> None:
        self._stop_heartbeats()
        self._heartbeat = self.sim.after(self.timing.heartbeat_interval_ms, self._beat)

    def _stop_heartbeats(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None

    def _beat(self) -> None:
        self._heartbeat = None
        if not self._alive or self.state is State.JOINING:
            return   # the heartbeat thread is disabled until the member has joined (hasNotJoinedGroup)
        request = Heartbeat(member_id=self.member_id, generation_id=self.generation)
        self._request("Heartbeat", self._beaten, to_coordinator=lambda reply: self.coordinator.heartbeat(request, reply),
                      detail="steady")

    def _beaten(self, answer: HeartbeatResult) -> None:
        if not self._alive:
            return
        self._start_heartbeats()
        if answer.error is errors.REBALANCE_IN_PROGRESS and self.state is State.STABLE:
            if self.app is None:
                self._rejoin("heartbeat: REBALANCE_IN_PROGRESS")
            else:   # the application's next poll prepares and sends the JoinGroup
                self._rejoin_reason = self._rejoin_reason or "heartbeat: REBALANCE_IN_PROGRESS"
                self._news()
        elif answer.error in (errors.UNKNOWN_MEMBER_ID, errors.ILLEGAL_GENERATION, errors.FENCED_INSTANCE_ID):
            self._stop_heartbeats()
            self._lose_membership(keep_id=answer.error is errors.ILLEGAL_GENERATION)
            if self.app is None:
                self._rejoin(f"heartbeat: {errors.name_of(answer.error)}")
            else:
                self.state = State.UNJOINED   # no partitions, no generation: the next poll rejoins
                self._rejoin_reason = f"heartbeat: {errors.name_of(answer.error)}"
                self._news()

    # -- requests -----------------------------------------------------------------------------------

    def _request(self, op: str, on_answer, *, to_coordinator=None, detail: str | None = None) -> None:
        """One request: on the wire for a network delay each way; the coordinator's answer (or, for a request
        the model only counts, an answer at once) comes back to `on_answer`. Recorded as the real client
        records it: a coordination_request with its latency and error, when the answer arrives."""
        sent = self.sim.now_ms

        def answered(result=None) -> None:
            def arrive() -> None:
                error = getattr(result, "error", None)
                self.recorder.emit(ev.COORDINATION_REQUEST, self.name, op=op, group=self.group,
                                   latency_ms=round(self.sim.now_ms - sent, 3),
                                   error=errors.name_of(error) if error not in (None, errors.NONE) else None,
                                   **({"detail": detail} if detail else {}))
                on_answer(*(() if result is None else (result,)))
            self.sim.after(self.network.delay_ms(), arrive)

        if to_coordinator is None:
            self.sim.after(self.network.delay_ms(), answered)
        else:
            self.sim.after(self.network.delay_ms(), lambda: to_coordinator(answered))


