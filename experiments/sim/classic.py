"""Kafka 3.7's classic client in virtual time, around the coordinator's own state machine (`classic_coordinator`).

Shared with the real client and broker: the coordinator's `ClassicGroup` (every JoinGroup, SyncGroup, Heartbeat
and LeaveGroup, the join and sync deadlines, session expiry), the client-side assignors (`rebalance.assignors`),
the consumer protocol's encoding (`modern.classic.consumer_protocol`) and the client's settings as the real member
reads them (`ClientTiming.of`).

Modelled (the real client is threaded code): the member's requests, in the order `modern/classic/` sends them. A
member finds the coordinator, joins (MEMBER_ID_REQUIRED first, then with its id), the leader assigns, every member
syncs and fetches the committed offsets of the partitions new to it (none asked when none are new). The heartbeat
thread beats every heartbeat.interval.ms; a REBALANCE_IN_PROGRESS answer sends the member back to JoinGroup
(Kafka's onJoinPrepare first: the application commits, an eager member revokes everything); a heartbeat unanswered
until the session runs out is given up and the coordinator looked up again. Commits go out one at a time and are
given up after request.timeout.ms. Without an application (a herd: nobody polls) each step of a join runs as soon
as its answer arrives; with one, the steps Kafka runs on the application's thread wait for its next poll. The
faults split brain puts on a member, its process paused and its coordination link cut, act through its clock and
the network (`network`)."""

from __future__ import annotations

from collections.abc import Callable

from experiments.sim.application import record_commit
from experiments.sim.classic_coordinator import Coordinator
from experiments.sim.classic_heartbeat import HeartbeatThread
from experiments.sim.classic_timing import ClientTiming, State
from experiments.sim.kernel import Simulation, Timer
from experiments.sim.network import MemberClock, Network, exchange
from experiments.sim.recorders import member_closed
from modern.classic.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from modern.common import errors
from modern.coordinator.classic_group import (
    JoinGroup,
    JoinResult,
    SyncGroup,
    SyncResult,
)
from rebalance import events as ev
from rebalance.assignors import get_assignor
from rebalance.assignors.base import RebalanceProtocol
from rebalance.events import EventRecorder
from rebalance.types import Subscription, TopicPartition

PROTOCOL_TYPE = "consumer"
CLOSED_AFTER_LEAVE_MS = 0.2   # from the LeaveGroup's answer to the closed client's member_stopped


class ClassicMember(HeartbeatThread):
    """One member of the group, as the lab's classic client behaves towards the coordinator.

    Without an application (a herd: nobody polls) each step of a join runs as soon as its answer arrives. With one
    (`attach`), the steps Kafka 3.7 runs on the application's thread wait for its next poll (`poll_group`): the
    JoinGroup's answer (the leader assigns there), the finished join applied (revocations, the new partitions'
    offsets fetched), a rejoin prepared (an eager member revoking everything first)."""

    def __init__(self, sim: Simulation, network: Network, coordinator: Coordinator, recorder: EventRecorder, *,
                 name: str, group: str, topics: dict[str, int], strategy: str, timing: ClientTiming,
                 client_id: str | None = None) -> None:
        self.sim, self.network, self.coordinator, self.recorder = sim, network, coordinator, recorder
        self.on_stopped: Callable[[], None] | None = None   # a restart waiting for the clean close
        self.name, self.group, self.topics, self.timing = name, group, topics, timing
        # The client.id the coordinator makes the member id from (`<client.id>-<uuid>`): the range and round-robin
        # assignors hand partitions out in member-id order (rebalance.member.pod_client_id)
        self.client_id = client_id or name
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
        self.clock = MemberClock(sim)                     # this member's process: its threads pause together
        self.coordinator_known = True                     # found by the start's FindCoordinator
        self._session_from_ms = 0.0                       # the session runs from the last heartbeat answered
        self._looking = False                             # a FindCoordinator out
        self._commit_line: list[tuple[dict[TopicPartition, int], float, object]] = []   # (offsets, deadline, then)
        self.auto_commits_at_once = None                  # Kafka 3.7's auto-commit does not wait for the last one
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
        self.state = State.JOINING
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
            self.app.commit_before_closing(self._close)
        else:
            self._close()

    def _close(self) -> None:
        self._stop_heartbeats()
        self._revoke(self.owned)
        member_id, self._alive, self.state = self.member_id, False, State.STOPPED
        # The real member logs member_stopped once its client has closed, a fraction of a millisecond after the
        # LeaveGroup's answer (0.17 ms in a herd run): the summary then charges that LeaveGroup to the change before.
        self._request("LeaveGroup", lambda _answer: self.sim.after(CLOSED_AFTER_LEAVE_MS, lambda: member_closed(self)),
                      to_coordinator=lambda reply: self.coordinator.leave(member_id, reply))

    def crash(self) -> None:
        """The process is gone: no request, no event; the coordinator learns of it by its session."""
        self._stop_heartbeats()
        self.clock.pause()   # for good: nothing of this process runs again (a restart is a new member)
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

    @property
    def may_auto_commit(self) -> bool:
        """An auto-commit goes out only to a known coordinator from a stable member with no rejoin pending
        (`ConsumerCoordinator.maybeAutoCommitOffsetsAsync`)."""
        return self.stable and self.coordinator_known and self._rejoin_reason is None

    def pause(self) -> None:
        """SIGSTOP: every thread of the process stops where it is."""
        self.clock.pause()

    def resume(self) -> None:
        if self._alive:   # a process killed while stopped stays gone
            self.clock.resume()

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

    def idle_wait_ms(self) -> float | None:
        """A poll with nothing to fetch waits the whole poll wait, or until the group's news wakes it (the lab's
        classic client wakes its fetch on a join's news, as Kafka's ConsumerNetworkClient.wakeup does)."""
        return None

    def _news(self) -> None:
        if self.app is not None:
            self.app.wake()

    def commit(self, offsets: dict[TopicPartition, int], then) -> None:
        """An OffsetCommit of this generation, refused at once unless the member is stable. Commits go out one
        at a time in the order made (`modern.classic.commit_line`); one still waiting when request.timeout.ms
        has passed since it was made fails with REQUEST_TIMED_OUT, one sent and unanswered that long with
        COORDINATOR_NOT_AVAILABLE (the coordinator is then looked up again)."""
        if not self.may_commit:
            record_commit(self, offsets, self.generation, "REBALANCE_IN_PROGRESS")
            then("REBALANCE_IN_PROGRESS")
            return
        self._commit_line.append((dict(offsets), self.sim.now_ms + self.timing.request_timeout_ms, then))
        if len(self._commit_line) == 1:
            self._send_commit()

    def _send_commit(self) -> None:
        offsets, deadline, then = self._commit_line[0]
        member_id, generation = self.member_id, self.generation

        def done(name: str | None) -> None:
            self._commit_line.pop(0)
            while self._commit_line and self._commit_line[0][1] <= self.sim.now_ms:   # their turn came too late
                late, _, late_then = self._commit_line.pop(0)
                record_commit(self, late, generation, "REQUEST_TIMED_OUT")
                late_then("REQUEST_TIMED_OUT")
            if self._commit_line and self._alive:
                self._send_commit()
            then(name)

        if not self.may_commit:   # its turn came after the member left its generation: not sent
            name = "REBALANCE_IN_PROGRESS" if self.state in (State.JOINING, State.SYNCING) else "UNKNOWN_MEMBER_ID"
            record_commit(self, offsets, generation, name)
            done(name)
            return

        def answered(error) -> None:
            name = None if error is errors.NONE else errors.name_of(error)
            record_commit(self, offsets, generation, name)
            if error in (errors.UNKNOWN_MEMBER_ID, errors.ILLEGAL_GENERATION, errors.FENCED_INSTANCE_ID) \
                    and self.state is State.STABLE and self.generation == generation:
                self._lose_membership(keep_id=error is errors.ILLEGAL_GENERATION)
                self.state, self._rejoin_reason = State.UNJOINED, f"commit: {name}"
                self._news()
            done(name)

        def timed_out() -> None:
            self.coordinator_known = False
            record_commit(self, offsets, generation, "COORDINATOR_NOT_AVAILABLE")
            done("COORDINATOR_NOT_AVAILABLE")

        self._request("OffsetCommit", answered, to_coordinator=lambda reply: self.coordinator.commit(
            member_id, generation, offsets, reply), timeout_ms=max(deadline - self.sim.now_ms, 1), on_timeout=timed_out)

    # -- the join -----------------------------------------------------------------------------------

    def _begin_round(self, trigger: str) -> None:
        self.attempts, self.round_started_ms = 0, self.sim.now_ms
        self.recorder.emit(ev.REBALANCE_STARTED, self.name, trigger=trigger, group=self.group)

    def _send_join(self) -> None:
        if not self._alive:
            return
        # Kafka's initiateJoinGroup: preparing a rebalance from the JoinGroup on, so the heartbeat thread stops,
        # a retry after a failed SyncGroup included (its old generation's heartbeats would be fenced)
        self.state = State.JOINING
        self.attempts += 1
        subscription = Subscription(topics=tuple(sorted(self.topics)), owned_partitions=tuple(sorted(self.owned)),
                                    generation=self.generation)
        request = JoinGroup(session_timeout_ms=self.timing.session_timeout_ms,
                            rebalance_timeout_ms=self.timing.rebalance_timeout_ms, protocol_type=PROTOCOL_TYPE,
                            protocols=((self.assignor.name, encode_subscription(subscription)),),
                            member_id=self.member_id, client_id=self.client_id, require_known_member_id=True)
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
        # Kafka's SyncGroup handler makes the member stable before onJoinComplete runs the callbacks, so the
        # commit of the revoked partitions' offsets in onPartitionsRevoked carries the new generation
        self.state = State.STABLE
        assigned = frozenset(decode_assignment(answer.assignment).partitions)
        added = assigned - self.owned
        revoked = self.owned - assigned
        rejoin = self.cooperative and bool(revoked)
        fetch = assigned if not self.cooperative else added

        def fetch_offsets() -> None:
            if self.cooperative and revoked:
                self._revoke(revoked)
            if not fetch:   # nothing newly assigned: Kafka's client asks no committed offsets, nor does the lab's
                self._completed(assigned, fetch, rejoin=rejoin, then=then)
                return
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
        if self.app is not None:
            self.app.rebalanced()
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
        self.clock.after(0 if error is errors.REBALANCE_IN_PROGRESS else self.timing.retry_backoff_ms, self._send_join)

    def _lose_membership(self, *, keep_id: bool) -> None:
        if self.owned:
            self.recorder.emit(ev.PARTITIONS_LOST, self.name, partitions=sorted(map(str, self.owned)))
        self.owned, self.generation = frozenset(), -1
        self.positions.clear()
        if not keep_id:
            self.member_id = ""

    def _rejoin(self, trigger: str, then=lambda: None) -> None:
        """Kafka's onJoinPrepare, then the JoinGroup. The application commits first, while the member is still in
        its generation (the client's auto-commit, synchronously; or what Spring kept, for the partitions an eager
        member gives up); an eager member then gives up everything. A rejoin asked for meanwhile is the same one."""
        self._begin_round(trigger)
        revoking = frozenset() if self.cooperative else self.owned

        def join() -> None:
            if revoking and self.owned:
                self._revoke(self.owned)
                self.owned = frozenset()
                self.positions.clear()
            self.state, self._rejoin_reason = State.JOINING, None
            self._send_join()
            then()

        if self.app is not None and self.owned:
            self.app.commit_before_giving_up(set(revoking), join)
        else:
            join()

    def _revoke(self, partitions: frozenset[TopicPartition]) -> None:
        if partitions:
            for tp in partitions:
                self.positions.pop(tp, None)
            self.recorder.emit(ev.PARTITIONS_REVOKED, self.name, partitions=sorted(map(str, partitions)))

    # -- requests -----------------------------------------------------------------------------------

    def _request(self, op: str, on_answer, *, to_coordinator=None, detail: str | None = None,
                 timeout_ms: float | None = None, on_timeout=None) -> None:
        """One request over the member's coordination link (`network.exchange`): `on_answer` gets the coordinator's
        answer (nothing for a request the model only counts); recorded as the real client records it, a
        coordination_request with its latency and error, NETWORK_EXCEPTION when given up after `timeout_ms`."""
        sent = self.sim.now_ms

        def record(result, failure: str | None) -> None:
            error = getattr(result, "error", None)
            self.recorder.emit(ev.COORDINATION_REQUEST, self.name, op=op, group=self.group,
                               latency_ms=round(self.sim.now_ms - sent, 3),
                               error=failure or (errors.name_of(error) if error not in (None, errors.NONE) else None),
                               **({"detail": detail} if detail else {}))

        exchange(self.network, self.clock, self.name, to_coordinator=to_coordinator, record=record,
                 on_answer=lambda result: on_answer(*(() if result is None else (result,))),
                 timeout_ms=timeout_ms, on_timeout=on_timeout)
