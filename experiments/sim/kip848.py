"""KIP-848 in virtual time: a model of the lab's KIP-848 client (Kafka 4's) around the broker's consumer group state
machine, driven unchanged (`kip848_coordinator`).

Shared: `modern.coordinator.consumer_group.ConsumerGroup` (member epochs, the target assignment from the
server assignors, revocation before reassignment, session and rebalance deadlines) with Kafka 4's timing
(`rebalance.consumer_group_timing`: a 45 s session, a 5 s heartbeat), and `rebalance.heartbeat_kinds`, which
names each heartbeat as the real client names it (join, leave, ack, assignment, steady).

Modelled: the client (`modern/kip848/`). One heartbeat in flight at a time, every interval the coordinator
gives; an answer whose assignment differs from what the member holds is reconciled at once (the application
is idle): partitions to give up are revoked, new ones have their offsets fetched, and either sends an
acknowledging heartbeat straight away, reporting what the member owns. A member fenced or unknown to the
coordinator loses its partitions and joins again with epoch 0. A request unanswered after request.timeout.ms is
given up: the coordinator is looked up again and the next heartbeat backs off (Kafka's exponential backoff, the
real client's arithmetic). The faults split brain puts on a member act through its clock and the network
(`network`)."""

from __future__ import annotations

from collections.abc import Callable

from experiments.sim.application import record_commit
from experiments.sim.kernel import Simulation, Timer
from experiments.sim.kip848_coordinator import Coordinator
from experiments.sim.network import MemberClock, Network, exchange
from experiments.sim.recorders import member_closed
from modern.client.coordinator_lookup import ExponentialBackoff
from modern.common import errors
from modern.coordinator.consumer_group import HeartbeatRequest, HeartbeatResult
from modern.kip848.client_settings import Kip848Settings
from rebalance import events as ev
from rebalance import heartbeat_kinds
from rebalance.events import EventRecorder
from rebalance.types import TopicPartition

JOIN_EPOCH, LEAVE_EPOCH = 0, -1
FENCED = (errors.FENCED_MEMBER_EPOCH, errors.UNKNOWN_MEMBER_ID)
DUE_NOW_MS = 1e-6   # a poll and a heartbeat timer at the same virtual instant (float sums may differ by an ulp)


class Kip848Member:
    """One member of a consumer group, as the lab's KIP-848 client behaves towards the coordinator."""

    def __init__(self, sim: Simulation, network: Network, coordinator: Coordinator, recorder: EventRecorder, *,
                 name: str, group: str, topics: dict[str, int], assignor: str,
                 settings: Kip848Settings | None = None) -> None:
        self.sim, self.network, self.coordinator, self.recorder = sim, network, coordinator, recorder
        self.on_stopped: Callable[[], None] | None = None   # a restart waiting for the clean close
        self.name, self.group, self.topics, self.assignor = name, group, topics, assignor
        self.settings = settings or Kip848Settings(group=group, topics=tuple(topics), bootstrap=(("sim", 0),),
                                                   client_id=name)
        self.rebalance_timeout_ms = self.settings.rebalance_timeout_ms
        self.backoff = ExponentialBackoff(self.settings.retry_backoff_ms, self.settings.retry_backoff_max_ms)
        self.coordinator_known = True                     # found by the start's FindCoordinator
        self._failed_attempts = 0                         # heartbeats given up in a row (the backoff's exponent)
        self.member_id = coordinator.new_member_id()
        self.epoch = JOIN_EPOCH
        self.interval_ms = coordinator.group.config.heartbeat_interval_ms
        self.interval_known = False                       # no answer yet gave one: the member is joining
        self.target: frozenset[TopicPartition] | None = None   # the last assignment the coordinator sent
        self.owned: frozenset[TopicPartition] = frozenset()
        self.reported: frozenset[TopicPartition] | None = None  # what the coordinator last heard the member owns
        self.in_flight = False
        self.ack_due = False
        self._next: Timer | None = None
        self._sent_ms: float | None = None                # when the last heartbeat went out
        self._poll_awaits_news = False                    # the idle poll came round as a heartbeat fell due
        self._alive = False
        self._rebalance_started: float | None = None
        self._steps = 0
        self.positions: dict[TopicPartition, int] = {}    # next offset to fetch, per owned partition
        self.app = None                                   # experiments.sim.application.Application, when records flow
        self.clock = MemberClock(sim)                     # this member's process: its threads pause together
        self.auto_commits_at_once = 1                     # Kafka 4's auto-commit: at most one in flight

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
            self.app.commit_before_closing(self._close)
        else:
            self._close()

    def _close(self) -> None:
        self._alive = False
        self._cancel_next()
        if self.owned:
            self.recorder.emit(ev.PARTITIONS_REVOKED, self.name, partitions=sorted(map(str, self.owned)))
        request = HeartbeatRequest(member_id=self.member_id, member_epoch=LEAVE_EPOCH)
        self._send(request, LEAVE_EPOCH, owned=None,   # the member stops once its leave heartbeat is answered
                   on_answer=lambda _answer: member_closed(self))

    def crash(self) -> None:
        self._alive = False
        self._cancel_next()
        self.clock.pause()   # for good: nothing of this process runs again (a restart is a new member)
        if self.app is not None:
            self.app.stop()

    def pause(self) -> None:
        """SIGSTOP: every thread of the process stops where it is."""
        self.clock.pause()

    def resume(self) -> None:
        if self._alive:   # a process killed while stopped stays gone
            self.clock.resume()

    def start_stable(self, assigned: frozenset[tuple[str, int]], epoch: int) -> None:
        """Begin as a member of a group the coordinator loaded (Coordinator.load_stable): owning `assigned`
        at `epoch`, its events those of a member that joined and reconciled, its first heartbeat at a seeded
        moment of its interval (members that joined one after another beat out of step)."""
        self._alive = True
        self.recorder.emit(ev.MEMBER_STARTED, self.name, group=self.group, strategy=self.assignor,
                           topics=sorted(self.topics), group_instance_id=None, pid=0)
        self._open_rebalance("join")
        self.epoch, self.interval_known = epoch, True
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
        if not self.coordinator_known:   # the heartbeat thread looks the coordinator up first
            self.in_flight = True
            self._request("FindCoordinator", self._found, timeout_ms=self.settings.request_timeout_ms,
                          on_timeout=self._given_up)
            return
        send_all = self.epoch == JOIN_EPOCH or self._failed_attempts > 0
        owned = self.owned if (send_all or self.owned != self.reported) else None
        request = HeartbeatRequest(
            member_id=self.member_id, member_epoch=self.epoch,
            rebalance_timeout_ms=self.rebalance_timeout_ms if send_all else -1,
            subscribed_topics=tuple(sorted(self.topics)) if send_all else None,
            server_assignor=self.assignor if send_all else None, owned=None if owned is None else _wire(owned),
            client_id=self.name, member_id_from_client=True)
        self._sent_ms = self.sim.now_ms
        self._send(request, self.epoch, owned=owned, on_answer=self._answered)

    def _found(self) -> None:
        self.in_flight, self.coordinator_known = False, True
        self._beat_now()

    def _given_up(self) -> None:
        """A heartbeat or a lookup unanswered for request.timeout.ms: the coordinator is looked up again, after the
        backoff, and the next heartbeat sends every field (Kafka's HeartbeatRequestManager on a failed request)."""
        self.in_flight, self.coordinator_known = False, False
        if not self._alive:
            return
        delay = self.backoff.backoff_ms(self._failed_attempts, self.sim.rng.random())
        self._failed_attempts += 1
        self._schedule(delay)

    def _answered(self, answer: HeartbeatResult, owned_sent: frozenset[TopicPartition] | None) -> None:
        self.in_flight = False
        if not self._alive:
            return
        self._failed_attempts = 0
        if answer.error in FENCED:
            self._fenced()
            return
        if answer.error is not errors.NONE:
            self._schedule(self.interval_ms)
            return
        if owned_sent is not None:
            self.reported = owned_sent
        joining = not self.interval_known
        self.epoch, self.interval_known = answer.member_epoch, True
        self.interval_ms = answer.heartbeat_interval_ms or self.interval_ms
        if answer.assignment is not None:
            self.target = _ours(answer.assignment)
        if self.app is None:
            self._reconcile()
        elif joining or self._poll_awaits_news:
            # The application's next poll reconciles (Kafka runs the callbacks inside poll). Only a poll that waits
            # for this news (joining, or come round as this heartbeat fell due) ends at it; otherwise the news
            # waits for the poll (`idle_wait_ms`)
            self._poll_awaits_news = False
            self._news()
        if self.ack_due or self.owned != self.reported:
            self.ack_due = False
            self._beat_now()
        else:
            self._schedule(self.interval_ms)

    def _fenced(self) -> None:
        if self.owned:
            self.recorder.emit(ev.PARTITIONS_LOST, self.name, partitions=sorted(map(str, self.owned)))
        self.owned, self.target, self.reported, self.epoch = frozenset(), None, None, JOIN_EPOCH
        self.positions.clear()   # the interval stays known: the poll does not wait for the rejoin's answer
        self._open_rebalance("fenced")
        self._beat_now()

    def _schedule(self, delay_ms: float) -> None:
        self._cancel_next()
        self._next = self.clock.after(delay_ms, self._beat_now)

    def _cancel_next(self) -> None:
        if self._next is not None:
            self._next.cancel()
            self._next = None

    # -- the application's thread ---------------------------------------------------------------------

    @property
    def may_commit(self) -> bool:
        """In the group (a member epoch given): a commit goes out, fenced by that epoch at the coordinator."""
        return self._alive and self.epoch > JOIN_EPOCH

    @property
    def may_auto_commit(self) -> bool:
        """Kafka 4's auto-commit goes out only while the coordinator is known and the member is in the group."""
        return self.may_commit and self.coordinator_known

    def _news(self) -> None:
        if self.app is not None:
            self.app.wake()

    def idle_wait_ms(self) -> float | None:
        """How long a poll with nothing to fetch waits, as the lab's client waits (`modern.kip848.member.
        _wait_idle`, Kafka's AsyncKafkaConsumer.pollForFetches up to maximumTimeToWait): None when it waits for
        the group's news (joining, no interval given yet; or a heartbeat due now), else until the next heartbeat is
        due, and nothing but that ends the wait. A fetch with partitions to fetch waits for data only: the group's
        news does not wake it."""
        self._poll_awaits_news = False
        if not self.interval_known:
            return None
        if self._next is None:   # a heartbeat in flight: its timer started again when it went out ...
            if self._sent_ms is None or self.sim.now_ms - self._sent_ms > DUE_NOW_MS:
                return self.interval_ms
            wait_ms = 0.0        # ... in this very instant: the poll came round as it fell due
        else:
            wait_ms = max(0.0, self._next.due_ms - self.sim.now_ms)
        if wait_ms <= DUE_NOW_MS:
            # Due now: the lab's client waits for the group's news (a heartbeat due and not yet sent, which the
            # poll and the heartbeat thread, waking at the same moment, find in the real runs: the answer's
            # assignment reconciled some 35 ms after the heartbeat fell due, not at the next poll)
            self._poll_awaits_news = True
            return None
        return wait_ms

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

        def done() -> None:
            if self.app is not None:
                self.app.rebalanced()   # a new assignment starts a fresh auto-commit interval (resetAutoCommitTimer)
            then()

        def take_new() -> None:
            added = (self.target or frozenset()) - self.owned
            if not added:
                self._maybe_complete()
                done()
                return
            self._request("OffsetFetch", lambda: (self._assigned(frozenset(added)), done()))

        def give_up() -> None:
            self.owned = self.owned - revoked
            for tp in revoked:
                self.positions.pop(tp, None)
            self._steps += 1
            self.recorder.emit(ev.PARTITIONS_REVOKED, self.name, partitions=sorted(map(str, revoked)))
            self._beat_now()   # acknowledge at once
            take_new()

        reconcile = give_up if revoked else take_new
        if self.app is not None:   # Kafka's maybeAutoCommitSyncBeforeRevocation, or what Spring kept
            self.app.commit_before_giving_up(set(revoked), reconcile)
        else:
            reconcile()

    def commit(self, offsets: dict[TopicPartition, int], then) -> None:
        """An OffsetCommit carrying the member epoch, refused at once outside the group; unanswered after
        request.timeout.ms it fails with COORDINATOR_NOT_AVAILABLE and the coordinator is looked up again."""
        if not self.may_commit:
            record_commit(self, offsets, self.epoch, "UNKNOWN_MEMBER_ID")
            then("UNKNOWN_MEMBER_ID")
            return
        member_id, epoch, sent = self.member_id, self.epoch, self.sim.now_ms

        def record(result, failure: str | None) -> None:
            self.recorder.emit(ev.COORDINATION_REQUEST, self.name, op="OffsetCommit", group=self.group,
                               latency_ms=round(self.sim.now_ms - sent, 3), error=failure or self._recorded_error(result))

        def answered(result) -> None:
            name = self._commit_outcome(result)
            record_commit(self, offsets, epoch, name)
            then(name)

        def timed_out() -> None:
            self.coordinator_known = False
            record_commit(self, offsets, epoch, "COORDINATOR_NOT_AVAILABLE")
            then("COORDINATOR_NOT_AVAILABLE")

        exchange(self.network, self.clock, self.name, record=record, on_answer=answered,
                 to_coordinator=lambda reply: self._send_commit(member_id, epoch, offsets, reply),
                 timeout_ms=self.settings.request_timeout_ms, on_timeout=timed_out)

    # What a commit goes to and what its answer means: the one coordinator here (`failover` looks it up).
    def _send_commit(self, member_id: str, epoch: int, offsets: dict[TopicPartition, int], reply) -> None:
        self.coordinator.commit(member_id, epoch, offsets, reply)

    def _recorded_error(self, error) -> str | None:
        return None if error is errors.NONE else errors.name_of(error)

    def _commit_outcome(self, error) -> str | None:
        return self._recorded_error(error)

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
        """A ConsumerGroupHeartbeat, recorded with its kind (rebalance.heartbeat_kinds) when answered, or given up
        after request.timeout.ms (a leave heartbeat is not waited for that long: the member has stopped)."""
        self.in_flight = epoch != LEAVE_EPOCH
        sent, held = self.sim.now_ms, self.target

        def record(result: HeartbeatResult | None, failure: str | None) -> None:
            assignment = None if result is None or result.assignment is None else _ours(result.assignment)
            detail = heartbeat_kinds.detail(member_epoch=epoch, owned_reported=owned is not None,
                                            assignment=assignment, held=held)
            error = failure or (errors.name_of(result.error) if result.error is not errors.NONE else None)
            self.recorder.emit(ev.COORDINATION_REQUEST, self.name, op=heartbeat_kinds.API, group=self.group,
                               latency_ms=round(self.sim.now_ms - sent, 3), error=error, detail=detail)

        def arrive(result: HeartbeatResult) -> None:
            if epoch == LEAVE_EPOCH:
                on_answer(result)
            else:
                on_answer(result, owned)

        leaving = epoch == LEAVE_EPOCH
        exchange(self.network, self.clock, self.name, record=record, on_answer=arrive,
                 to_coordinator=lambda reply: self.coordinator.heartbeat(request, reply),
                 timeout_ms=None if leaving else self.settings.request_timeout_ms,
                 on_timeout=None if leaving else self._given_up)

    def _request(self, op: str, on_answer, *, timeout_ms: float | None = None, on_timeout=None) -> None:
        """A request the model counts but the coordinator's state machine does not serve (the lookup, the
        offsets' fetch): answered after a round trip over the coordination link."""
        sent = self.sim.now_ms

        def record(_result, failure: str | None) -> None:
            self.recorder.emit(ev.COORDINATION_REQUEST, self.name, op=op, group=self.group,
                               latency_ms=round(self.sim.now_ms - sent, 3), error=failure)

        exchange(self.network, self.clock, self.name, to_coordinator=None, record=record,
                 on_answer=lambda _result: on_answer(), timeout_ms=timeout_ms, on_timeout=on_timeout)


def _wire(partitions: frozenset[TopicPartition]) -> frozenset[tuple[str, int]]:
    """Partitions as the coordinator's state machine holds them: (topic, partition) pairs."""
    return frozenset((tp.topic, tp.partition) for tp in partitions)


def _ours(partitions) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(topic, partition) for topic, partition in partitions)
