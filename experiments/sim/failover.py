"""The two coordinator clients when the coordinator can move (`experiments.sim.brokers.Cluster`): each member's
requests go to the broker its last FindCoordinator named, and it reacts to a dead or moved coordinator as the
lab's clients do.

As `modern.client.coordinator_lookup.CoordinatorLookup`: one lookup at a time a client, each try a FindCoordinator
to the next bootstrap broker in turn (a dead one refuses it), a failed try backing off (retry.backoff.ms doubling
up to retry.backoff.max.ms, +-20 %), the first answer naming a coordinator installed. Then, as the clients read
the answers (`modern.common.errors.COORDINATOR_MOVED`): a refused connection, NOT_COORDINATOR or
COORDINATOR_NOT_AVAILABLE mark the coordinator unknown; COORDINATOR_LOAD_IN_PROGRESS is tried again at the same
broker after the backoff. The classic client's heartbeat thread backs off after each failed heartbeat
(`membership_states.HeartbeatTimer.failed`) and looks the coordinator up before the next; the KIP-848 client
backs its heartbeat off after a refused connection or a loading coordinator, and after NOT_COORDINATOR looks up
and beats at once (`membership_manager._on_answer`). A commit refused by a dead broker fails with
COORDINATOR_NOT_AVAILABLE; an OffsetFetch that fails is tried again after the backoff."""

from __future__ import annotations

from experiments.sim.brokers import REFUSED, Cluster
from experiments.sim.classic import ClassicMember
from experiments.sim.classic_timing import State
from experiments.sim.kip848 import LEAVE_EPOCH, Kip848Member, _ours
from experiments.sim.network import exchange
from modern.classic.settings import ClientSettings
from modern.client.coordinator_lookup import ExponentialBackoff
from modern.common import errors
from modern.coordinator import classic_group as classic
from modern.coordinator.consumer_group import HeartbeatRequest, HeartbeatResult
from rebalance import events as ev
from rebalance import heartbeat_kinds
from rebalance.types import TopicPartition

FIND_COORDINATOR = "FindCoordinator"
# retry.backoff.max.ms as the classic client's settings default it (the sim's ClientTiming does not carry it)
CLASSIC_RETRY_BACKOFF_MAX_MS = ClientSettings.retry_backoff_max_ms
HEARTBEAT_THREAD_WAKE_MS = 500    # the classic heartbeat thread's longest wait (modern.classic.heartbeat_thread)


def error_name(result) -> str | None:
    """What a coordination_request records of an answer: a refused connection, an error class, an answer's error."""
    if result is REFUSED:
        return "NETWORK_EXCEPTION"
    error = result if isinstance(result, type) else getattr(result, "error", None)
    return None if error in (None, errors.NONE) else errors.name_of(error)


def error_of(result):
    return result if isinstance(result, type) else getattr(result, "error", None)


def lost_coordinator(result) -> bool:
    """A refused connection, NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE: the client looks the coordinator up again."""
    return result is REFUSED or error_of(result) in errors.COORDINATOR_MOVED


class CoordinatorLink:
    """A member's side of its group coordinator: the broker its lookup named, and each group API sent there. The
    methods are the sim coordinators' (`classic_coordinator.Coordinator`, `kip848_coordinator.Coordinator`), so the
    members' own code sends through it unchanged."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.broker: int | None = None

    def _coordinator(self):
        """The coordinator the member reads directly: its broker's, else the group's latest."""
        cluster = self.cluster
        return cluster.coordinators.get(self.broker) or cluster.serving() or cluster.latest

    @property
    def group(self):
        return self._coordinator().group

    def new_member_id(self) -> str:
        return self._coordinator().new_member_id()

    def committed(self, partitions) -> dict[TopicPartition, int]:
        return self._coordinator().committed(partitions)

    def _serve(self, reply, served, refused_as) -> None:
        self.cluster.serve(self.broker, reply, served, refused_as)

    # the classic group's APIs
    def join(self, request, reply) -> None:
        self._serve(reply, lambda c, r: c.join(request, r),
                    lambda e: classic.JoinResult(error=e, member_id=request.member_id))

    def sync(self, request, reply) -> None:
        self._serve(reply, lambda c, r: c.sync(request, r), lambda e: classic.SyncResult(error=e))

    def heartbeat(self, request, reply) -> None:
        if isinstance(request, HeartbeatRequest):
            self._serve(reply, lambda c, r: c.heartbeat(request, r),
                        lambda e: HeartbeatResult(error=e, member_id=request.member_id))
            return
        # Kafka answers a classic heartbeat blindly while the group loads (GroupCoordinatorService.heartbeat)
        self._serve(reply, lambda c, r: c.heartbeat(request, r), lambda e: classic.HeartbeatResult(
            error=errors.NONE if e is errors.COORDINATOR_LOAD_IN_PROGRESS else e))

    def leave(self, member_id: str, reply) -> None:
        self._serve(reply, lambda c, r: c.leave(member_id, r), lambda e: classic.LeaveResult(error=e))

    def commit(self, member_id: str, generation: int, offsets, reply) -> None:
        self._serve(reply, lambda c, r: c.commit(member_id, generation, offsets, r), lambda e: e)

    def fetch(self, reply) -> None:
        """An OffsetFetch: the offsets themselves are read by `committed` once it is answered."""
        self._serve(reply, lambda c, r: r(errors.NONE), lambda e: e)


class Lookup:
    """The client's one FindCoordinator loop (`CoordinatorLookup`): whoever asks while a lookup is out waits for it."""

    def __init__(self, member, link: CoordinatorLink, *, retry_backoff_ms: int, retry_backoff_max_ms: int,
                 request_timeout_ms: int) -> None:
        self.member, self.link = member, link
        self.backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms)
        self.request_timeout_ms = request_timeout_ms
        self._index = 0                     # the next bootstrap broker, in the cluster's order
        self._waiting: list[tuple] = []

    def find(self, found, failed=None) -> None:
        self._waiting.append((found, failed))
        if len(self._waiting) == 1:
            self._try(self.member.sim.now_ms + self.request_timeout_ms, 0)

    def _try(self, deadline: float, attempts: int) -> None:
        member = self.member
        broker = self._index % self.link.cluster.size
        self._index += 1
        sent = member.sim.now_ms

        def record(result, failure) -> None:
            name = failure or (error_name(result) if result is REFUSED else error_name(result[0]))
            member.recorder.emit(ev.COORDINATION_REQUEST, member.name, op=FIND_COORDINATOR, group=member.group,
                                 latency_ms=round(member.sim.now_ms - sent, 3), error=name)

        def answered(result) -> None:
            if result is not REFUSED and result[0] is errors.NONE:
                self.link.broker = result[1]
                self._done(0)
            elif member.sim.now_ms >= deadline:
                self._done(1)
            else:
                member.clock.after(self.backoff.backoff_ms(attempts, member.sim.rng.random()),
                                   lambda: self._try(deadline, attempts + 1))

        exchange(member.network, member.clock, member.name, record=record, on_answer=answered,
                 to_coordinator=lambda reply: reply(self.link.cluster.find_coordinator(broker)))

    def _done(self, outcome: int) -> None:
        waiting, self._waiting = self._waiting, []
        for found, failed in waiting:
            then = found if outcome == 0 else failed
            if then is not None:
                then()


class FailoverClassicMember(ClassicMember):
    """The classic client (`classic.ClassicMember`) with its coordinator behind a `CoordinatorLink`."""

    def __init__(self, sim, network, cluster: Cluster, recorder, **kwargs) -> None:
        self.link = CoordinatorLink(cluster)
        super().__init__(sim, network, self.link, recorder, **kwargs)
        self.lookup = Lookup(self, self.link, retry_backoff_ms=self.timing.retry_backoff_ms,
                             retry_backoff_max_ms=CLASSIC_RETRY_BACKOFF_MAX_MS,
                             request_timeout_ms=self.timing.request_timeout_ms)
        self.beat_backoff = ExponentialBackoff(self.timing.retry_backoff_ms, CLASSIC_RETRY_BACKOFF_MAX_MS)
        self._failed_beats = 0
        self._due_ms = 0.0                # when the next heartbeat is due

    # The heartbeat thread wakes at least every HEARTBEAT_THREAD_WAKE_MS (`HeartbeatThread._heartbeat_loop`): a
    # coordinator another thread found gone (a commit refused) is looked up again then, before the heartbeat is due.
    def _schedule_beat(self, delay_ms: float) -> None:
        self._due_ms = self.sim.now_ms + delay_ms
        self._arm()

    def _arm(self) -> None:
        self._stop_heartbeats()
        self._heartbeat = self.clock.after(min(max(self._due_ms - self.sim.now_ms, 0), HEARTBEAT_THREAD_WAKE_MS),
                                           self._wake)

    def _wake(self) -> None:
        self._heartbeat = None
        if not self._alive or self.state in (State.JOINING, State.UNJOINED):
            return
        if self.sim.now_ms >= self._due_ms:
            self._beat()
        elif not self.coordinator_known:
            self._rediscover()
        else:
            self._arm()

    def _send_join(self) -> None:
        if self._alive and not self.coordinator_known:   # the join looks the coordinator up first
            self.lookup.find(self._found_for_join, lambda: self.clock.after(self.timing.retry_backoff_ms,
                                                                              self._send_join))
            return
        super()._send_join()

    def _found_for_join(self) -> None:
        self.coordinator_known = True
        super()._send_join()

    def _heartbeat_failed(self) -> None:
        """A failed heartbeat (`HeartbeatTimer.failed`): the next one after the backoff, the coordinator looked up
        first."""
        if not self._alive:
            return
        self.coordinator_known = False
        delay = int(self.beat_backoff.backoff_ms(self._failed_beats, self.sim.rng.random()))
        self._failed_beats += 1
        self._schedule_beat(delay)

    def _beaten(self, answer) -> None:
        self._failed_beats = 0
        super()._beaten(answer)

    def _rediscover(self) -> None:
        """The heartbeat thread's lookup; once found, the session counts from then and the heartbeat due goes."""
        if self._looking:
            return
        self._looking = True

        def found() -> None:   # the heartbeat goes when due: at once after a backoff that has run out
            self._looking, self.coordinator_known, self._session_from_ms = False, True, self.sim.now_ms
            self._arm()

        def failed() -> None:
            self._looking = False
            self._schedule_beat(self.timing.retry_backoff_ms)

        self.lookup.find(found, failed)

    def _request(self, op: str, on_answer, *, to_coordinator=None, detail: str | None = None,
                 timeout_ms: float | None = None, on_timeout=None) -> None:
        if op == FIND_COORDINATOR:
            self.lookup.find(lambda: (setattr(self, "coordinator_known", True), on_answer()), on_timeout)
            return
        fetch = to_coordinator is None    # an OffsetFetch: it goes to the coordinator too
        if fetch:
            to_coordinator = self.link.fetch
        sent = self.sim.now_ms

        def record(result, failure: str | None) -> None:
            self.recorder.emit(ev.COORDINATION_REQUEST, self.name, op=op, group=self.group,
                               latency_ms=round(self.sim.now_ms - sent, 3), error=failure or error_name(result),
                               **({"detail": detail} if detail else {}))

        def answered(result) -> None:
            if lost_coordinator(result):
                self.coordinator_known = False
            if fetch:
                if error_of(result) is errors.NONE:
                    on_answer()
                else:   # tried again after the backoff, the coordinator looked up first if it moved
                    self.clock.after(self.timing.retry_backoff_ms, lambda: self._fetch_again(op, on_answer))
            elif op == "Heartbeat" and lost_coordinator(result):
                self._heartbeat_failed()
            elif result is REFUSED and op == "OffsetCommit":
                on_timeout()              # COORDINATOR_NOT_AVAILABLE, as the client makes of a broken connection
            elif result is REFUSED and op == "JoinGroup":
                on_answer(classic.JoinResult(error=errors.COORDINATOR_NOT_AVAILABLE, member_id=self.member_id))
            elif result is REFUSED and op == "SyncGroup":
                on_answer(classic.SyncResult(error=errors.COORDINATOR_NOT_AVAILABLE))
            else:
                on_answer(result)

        exchange(self.network, self.clock, self.name, to_coordinator=to_coordinator, record=record,
                 on_answer=answered, timeout_ms=timeout_ms, on_timeout=on_timeout)

    def _fetch_again(self, op: str, on_answer) -> None:
        if not self._alive:
            return
        if self.coordinator_known:
            self._request(op, on_answer)
        else:
            self.lookup.find(lambda: (setattr(self, "coordinator_known", True), self._request(op, on_answer)),
                             lambda: self._fetch_again(op, on_answer))


class FailoverKip848Member(Kip848Member):
    """The KIP-848 client (`kip848.Kip848Member`) with its coordinator behind a `CoordinatorLink`."""

    def __init__(self, sim, network, cluster: Cluster, recorder, **kwargs) -> None:
        self.link = CoordinatorLink(cluster)
        super().__init__(sim, network, self.link, recorder, **kwargs)
        self.lookup = Lookup(self, self.link, retry_backoff_ms=self.settings.retry_backoff_ms,
                             retry_backoff_max_ms=self.settings.retry_backoff_max_ms,
                             request_timeout_ms=self.settings.request_timeout_ms)

    def _request(self, op: str, on_answer, *, timeout_ms: float | None = None, on_timeout=None) -> None:
        if op == FIND_COORDINATOR:
            self.lookup.find(on_answer, on_timeout)
            return
        sent = self.sim.now_ms

        def record(result, failure: str | None) -> None:
            self.recorder.emit(ev.COORDINATION_REQUEST, self.name, op=op, group=self.group,
                               latency_ms=round(self.sim.now_ms - sent, 3), error=failure or error_name(result))

        def answered(result) -> None:
            if lost_coordinator(result):
                self.coordinator_known = False
            if error_of(result) is errors.NONE:
                on_answer()
            else:
                self.clock.after(self.settings.retry_backoff_ms, lambda: self._retry(op, on_answer))

        exchange(self.network, self.clock, self.name, to_coordinator=self.link.fetch, record=record,
                 on_answer=answered, timeout_ms=timeout_ms, on_timeout=on_timeout)

    def _retry(self, op: str, on_answer) -> None:
        if not self._alive:
            return
        if self.coordinator_known:
            self._request(op, on_answer)
        else:
            self.lookup.find(lambda: self._found_then(op, on_answer), lambda: self._retry(op, on_answer))

    def _found_then(self, op: str, on_answer) -> None:
        self.coordinator_known = True
        self._request(op, on_answer)

    def _send(self, request: HeartbeatRequest, epoch: int, *, owned, on_answer) -> None:
        """A ConsumerGroupHeartbeat through the link; a refused connection, a moved or a loading coordinator read as
        the client reads them (`membership_manager._on_answer`), anything else as `Kip848Member._send` does."""
        self.in_flight = epoch != LEAVE_EPOCH
        sent, held = self.sim.now_ms, self.target

        def record(result, failure: str | None) -> None:
            assignment = None if result is REFUSED or result is None or result.assignment is None \
                else _ours(result.assignment)
            detail = heartbeat_kinds.detail(member_epoch=epoch, owned_reported=owned is not None,
                                            assignment=assignment, held=held)
            self.recorder.emit(ev.COORDINATION_REQUEST, self.name, op=heartbeat_kinds.API, group=self.group,
                               latency_ms=round(self.sim.now_ms - sent, 3), error=failure or error_name(result),
                               detail=detail)

        def arrive(result) -> None:
            if epoch == LEAVE_EPOCH:
                on_answer(result)
                return
            error = error_of(result)
            if result is REFUSED:              # a broken connection: look it up again, after the backoff
                self._given_up()
            elif error in errors.COORDINATOR_MOVED:   # look it up and beat as soon as it answers
                self.in_flight, self.coordinator_known, self._failed_attempts = False, False, 0
                self._beat_now()
            elif error is errors.COORDINATOR_LOAD_IN_PROGRESS:   # the same broker, after the backoff
                self.in_flight = False
                delay = self.backoff.backoff_ms(self._failed_attempts, self.sim.rng.random())
                self._failed_attempts += 1
                self._schedule(delay)
            else:
                on_answer(result, owned)

        leaving = epoch == LEAVE_EPOCH
        exchange(self.network, self.clock, self.name, record=record, on_answer=arrive,
                 to_coordinator=lambda reply: self.link.heartbeat(request, reply),
                 timeout_ms=None if leaving else self.settings.request_timeout_ms,
                 on_timeout=None if leaving else self._given_up)

    # A commit goes through the link: a refused connection fails it with COORDINATOR_NOT_AVAILABLE, a moved
    # coordinator is looked up again.
    def _send_commit(self, member_id: str, epoch: int, offsets: dict[TopicPartition, int], reply) -> None:
        self.link.commit(member_id, epoch, offsets, reply)

    def _recorded_error(self, result) -> str | None:
        return error_name(result)

    def _commit_outcome(self, result) -> str | None:
        if lost_coordinator(result):
            self.coordinator_known = False
        return "COORDINATOR_NOT_AVAILABLE" if result is REFUSED else error_name(result)

