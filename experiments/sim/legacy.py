"""Kafka 0.8's ZooKeeper consumer in virtual time: a model of `legacy_zk/` on the ZooKeeper model.

Shared: the paths and the registration's bytes (`legacy_zk.registry`), 0.8's assignors and thread ids
(`rebalance.assignors.legacy`), the settings' defaults (`legacy_zk.config.LegacyConfig`: 4 attempts,
zookeeper.sync.time.ms between them).

Modelled, request for request as `legacy_zk/` sends them (each a `coordination_request` event, as the real
member's traced client writes them): registration (ensure_path of ids, create of the ephemeral ids node), the
watches set at start (ids children, the topic's data), zkclient's re-install of a fired watch (an exists and a
read) before the watcher executor runs one synced rebalance for every reason that piled up; each attempt in
0.8's order (`legacy_zk/rebalance.py`): the brokers read twice, the member's own registration, the commit of
what it consumed (sets, which a herd count leaves out), the release of every owner node, the whole group
read and assigned, the offsets read, then the claims (an exists of the owners' folder and a create per
partition; a NodeExists reads the holder), a conflict undoing the claims and backing off before the next
attempt.

A session's connection lost without the session (`suspend`, a ZooKeeper node cut off from its quorum): kazoo's
SUSPENDED, nothing reaches the server or comes back until `reconnect` (another node, the same session), where
what waited goes on, then CONNECTED and, as `legacy_zk.member._rewatch_after_reconnect`, every subscribed path
read again with its watch, a path changed since the last write seen before the disconnect firing its reason.

Split brain's member faults: a member paused (SIGSTOP) runs nothing, and what reaches it waits; a member whose
ZooKeeper link is cut (the lab's proxy black hole) has what crosses the link held. Either way the server hears no
ping: kazoo pings when idle for a third of the session, so the server expires the session a session timeout after
the last ping, deleting its ids and owner nodes (the others rebalance). A cut member's kazoo drops the connection
(SUSPENDED) when the ping it sent after the cut goes unanswered for another third; it keeps trying, and the
attempt after the one under way at the heal gets the server's answer (`_attempt_wait_ms`). A paused member finds at the resume its connection closed by the
server. Back in contact within the session, the held requests go on (`reconnect`); after an expiry kazoo goes
SUSPENDED, LOST, then CONNECTED on a new session, and the member does what `legacy_zk.member._after_expiry` does:
forget what it owned (`partitions_lost`), register again, a rebalance (trigger `new-session`), then a second one
for every listener zkclient re-fired. What the old session had under way failed with it.

Where the threads meet the CPU: a member host runs its members in one Python process, so their requests
leave one at a time, each after `HOST_CPU_MS` of the process's time; a busy host's members start their
rebalances late, which is what makes one member's claims meet another's owner nodes not yet released."""

from __future__ import annotations

import json
from collections.abc import Generator
from dataclasses import dataclass
from functools import lru_cache

from experiments.sim.kernel import Simulation, Timer
from experiments.sim.network import Network
from experiments.sim.zookeeper import NodeExists, NoNode, ZooKeeper
from legacy_zk.config import LegacyConfig
from legacy_zk.registry import BROKER_IDS, GroupPaths, parse_registration, registration_json, topic_path
from legacy_zk.zk import RECONNECT_BACKOFF_CAP_S
from rebalance import events as ev
from rebalance.assignors.legacy import legacy_assign, thread_ids
from rebalance.events import EventRecorder
from rebalance.types import TopicPartition
from zkensemble.config import EnsembleConfig

ZK_TICK_MS = EnsembleConfig.tick_ms   # the lab's ZooKeeper tickTime: sessions expire on its boundaries
# kazoo's reconnect retry as legacy_zk gives it (`legacy_zk.zk.reconnect_retry`): 0.1 s doubling to 1 s, no jitter
RETRY_FIRST_MS, RETRY_CAP_MS = 100.0, RECONNECT_BACKOFF_CAP_S * 1000
HOST_CPU_MS = 0.4           # a member host's Python time for one ZooKeeper request (kazoo's call and callback)

Request = tuple            # (op, path, kwargs) a step of a member's work yields


@lru_cache(maxsize=1 << 16)
def _subscription(data: bytes) -> tuple[tuple[str, int], ...]:
    """A registration's subscription, parsed once: every member reads every other member's node on every
    attempt, N x N parses of a few hundred distinct values."""
    return tuple(parse_registration(data).items())


@dataclass
class Host:
    """One member host process: its members' requests share its one thread (the GIL)."""

    free_at_ms: float = 0.0


class LegacyMember:
    def __init__(self, sim: Simulation, network: Network, zk: ZooKeeper, host: Host, recorder: EventRecorder, *,
                 name: str, consumer_id: str, group: str, topics: dict[str, int], strategy: str,
                 config: LegacyConfig, zk_nodes: int = 1) -> None:
        self.sim, self.network, self.zk, self.host, self.recorder = sim, network, zk, host, recorder
        self.name, self.consumer_id, self.topics, self.strategy = name, consumer_id, topics, strategy
        self.paths = GroupPaths(group)
        self.group = group
        self.config = config
        self.zk_nodes = zk_nodes          # the connect string's servers: kazoo's handshake timeout is split among them
        self.threads = thread_ids(consumer_id, config.streams_per_topic)
        self.session: int | None = None
        self.owned: dict[TopicPartition, str] = {}
        self.reasons: set[str] = set()
        self.working = False
        self.alive = False
        self.consuming = False          # records flow once the timeline starts: from then on there is a position
        self._auto_commit: Timer | None = None
        self.suspended = False          # the connection lost, the session not (kazoo's SUSPENDED)
        self._parked: list = []         # what reached the connection meanwhile, in order
        self._zxid_before = 0           # the last write seen before the disconnect
        self.frozen = False             # the process paused (SIGSTOP)
        self.cut_off = False            # its ZooKeeper link black-holed
        self.expired = False            # its session expired while it was out of contact
        self.incarnation = 0            # bumped when a session dies: the work it had under way is dropped
        self._contact_timers: list[Timer] = []
        self._last_sent_ms = 0.0        # the last request that left the member (kazoo's last_send)
        self._ping_outstanding = False
        self._suspended_at = 0.0
        self._committing = self._commit_due = False   # an auto-commit run under way, and one held back by it

    # -- what the driver does ------------------------------------------------------------------------

    def start(self) -> None:
        self.alive = True
        self.session = self.zk.open_session()
        self.recorder.emit(ev.MEMBER_STARTED, self.name, group=self.group, strategy=self.strategy,
                           topics=sorted(self.topics))
        self._run(self._start_steps(), self._startup)
        if self.config.auto_commit_enable:
            self._auto_commit = self.sim.after(self.config.auto_commit_interval_ms, self._auto_committed)

    def records_flow(self) -> None:
        """The producer has started: from now on each owned partition has a position to commit."""
        self.consuming = True

    def _auto_committed(self) -> None:
        """0.8's auto-commit: a KafkaScheduler task at a fixed rate on a thread of its own, so a run that blocks (its
        ZooKeeper link cut) holds the next back, which then starts as soon as it ends."""
        if not self.alive:
            return
        self._auto_commit = self.sim.after(self.config.auto_commit_interval_ms, self._auto_committed)
        if self._committing:
            self._commit_due = True
        else:
            self._commit_run()

    def _commit_run(self) -> None:
        self._committing = True

        def done() -> None:
            self._committing = False
            if self._commit_due and self.alive:
                self._commit_due = False
                self._commit_run()

        self._run(self._commit(), done, worker=False)

    def leave(self) -> None:
        """0.8's shutdown: commit what was consumed, then close the session: the ids and owner nodes go with it."""
        if not self.alive:
            return
        self.alive = False
        if self.owned:
            self.recorder.emit(ev.PARTITIONS_REVOKED, self.name, partitions=sorted(map(str, self.owned)))
        self.owned = {}
        session = self.session

        def closed() -> None:   # closeSession answered: the ids and owner nodes are gone, then the member stops
            self.zk.close_session(session)
            self.recorder.emit(ev.MEMBER_STOPPED, self.name, reason="close")

        self.sim.after(self.network.delay_ms(), closed)

    def crash(self, session_timeout_ms: int) -> None:
        """Gone without a word: ZooKeeper deletes its nodes when the session times out."""
        self.alive = False
        session = self.session
        self.sim.after(session_timeout_ms, lambda: self.zk.close_session(session))

    def suspend(self) -> None:
        """The connection to the member's ZooKeeper node dropped; the session lives on in the ensemble."""
        if self.alive and not self.suspended:
            self.suspended, self._zxid_before, self._suspended_at = True, self.zk.zxid, self.sim.now_ms
            self.recorder.emit(ev.SESSION_STATE, self.name, state="SUSPENDED")

    def reconnect(self) -> None:
        """Connected to another node within the session: what waited goes on, then the watches are read again."""
        if not self.suspended:
            return
        self.suspended = False
        if not self.alive:
            return
        self.recorder.emit(ev.SESSION_STATE, self.name, state="CONNECTED")
        parked, self._parked = self._parked, []
        for then in parked:
            then()
        self._run(self._rewatch(self._zxid_before), lambda: None, worker=False)

    def _rewatch(self, since: int) -> Generator[Request, object, None]:
        changed = []
        if (yield ("get_children", self.paths.ids, {"watch": True, "missing_ok": True})) is not None \
                and self.zk.nodes[self.paths.ids].pzxid > since:
            changed.append("ids-changed")
        for topic in sorted(self.topics):
            path = topic_path(topic)
            if (yield ("get", path, {"watch": True, "missing_ok": True})) is not None and self.zk.nodes[path].mzxid > since:
                changed.append("topic-changed")
        for reason in changed:
            self._fire(reason)

    def _connected(self, then) -> None:
        """Across the member's connection: now, or once it is back (or the process resumed)."""
        if self.suspended or self.frozen or self.cut_off:
            self._parked.append(then)
        else:
            then()

    # -- split brain's member faults: the process paused, the ZooKeeper link cut ---------------------

    def pause(self) -> None:
        """SIGSTOP: nothing of the member runs; its session expires unless it resumes in time."""
        if self.alive and not self.frozen:
            self.frozen = True
            self._out_of_contact(notices=False)

    def resume(self) -> None:
        if self.frozen:
            self.frozen = False
            self._back_in_contact(wait_ms=RETRY_FIRST_MS)   # the dropped connection tried again after the first delay

    def cut(self) -> None:
        """The ZooKeeper link black-holed: what crosses it is held; kazoo notices when its ping goes unanswered."""
        if self.alive and not self.cut_off:
            self.cut_off = True
            self._out_of_contact(notices=True)

    def heal(self) -> None:
        if self.cut_off:
            self.cut_off = False
            self._back_in_contact(wait_ms=self._attempt_wait_ms() if self.suspended else 0.0)

    def _attempt_wait_ms(self) -> float:
        """kazoo's reconnect loop from SUSPENDED to the heal: before each attempt the retry's delay (0.1 s doubling to
        1 s), each attempt's handshake held until its timeout (the session over the servers). The attempt under way at
        the heal breaks (a real run's kazoo logs "socket connection broken" there) and the next one, after the
        following delay, gets the server's answer; a heal during a delay is answered at its end."""
        suspended_for = self.sim.now_ms - self._suspended_at
        attempt_ms = self.config.zookeeper_session_timeout_ms / self.zk_nodes
        elapsed, delay = 0.0, RETRY_FIRST_MS
        while True:
            elapsed += delay
            if suspended_for <= elapsed:
                return elapsed - suspended_for
            delay = min(2 * delay, RETRY_CAP_MS)
            if suspended_for < elapsed + attempt_ms:
                return delay
            elapsed += attempt_ms

    def _out_of_contact(self, *, notices: bool) -> None:
        """The server's expiry of the session, and (`notices`) kazoo's loop while the link is cut."""
        third = self.config.zookeeper_session_timeout_ms / 3
        # kazoo pings when idle for a third of the session (any request counts as one): what the server last heard
        self._last_sent_ms += (self.sim.now_ms - self._last_sent_ms) // third * third
        # ZooKeeper expires a session at the first tick after its timeout from the last packet (its ExpiryQueue)
        expiry = ((self._last_sent_ms + self.config.zookeeper_session_timeout_ms) // ZK_TICK_MS + 1) * ZK_TICK_MS
        session = self.session
        self._contact_timers = [self.sim.at(expiry, lambda: self._expire(session))]
        if notices:
            self._ping_outstanding = False
            self._kazoo_loop()

    def _kazoo_loop(self) -> None:
        """kazoo's connection loop while the link is cut: a ping once idle for a third of the session (held
        requests count as sent), the connection dropped (SUSPENDED) when a ping is still unanswered at the next
        deadline; each deadline 10-400 ms early (its jitter)."""
        if not self.alive or not self.cut_off or self.suspended:
            return
        now, third = self.sim.now_ms, self.config.zookeeper_session_timeout_ms / 3
        due = self._last_sent_ms + third - self.sim.rng.randint(1, 40) * 10
        if due > now:
            self._contact_timers.append(self.sim.at(due, self._kazoo_loop))
        elif self._ping_outstanding:
            self.suspend()
        else:
            self._ping_outstanding, self._last_sent_ms = True, now
            self._contact_timers.append(self.sim.at(now + third - self.sim.rng.randint(1, 40) * 10, self._kazoo_loop))

    def _expire(self, session: int | None) -> None:
        if self.alive and session == self.session and (self.frozen or self.cut_off):
            self.expired = True
            self.zk.close_session(session)

    def _back_in_contact(self, *, wait_ms: float) -> None:
        for timer in self._contact_timers:
            timer.cancel()
        self._contact_timers = []
        if not self.alive:
            return
        if not self.expired:
            if self.suspended:
                self.sim.after(wait_ms + 2 * self.network.delay_ms(), self.reconnect)   # the same session
            else:   # not noticed yet: the held messages go through
                parked, self._parked = self._parked, []
                for then in parked:
                    then()
            return
        # The server says the session expired: SUSPENDED (a paused member reads its closed connection), LOST, and
        # a new session. What the old one had under way failed with it.
        if not self.suspended:
            self.suspended = True
            self.recorder.emit(ev.SESSION_STATE, self.name, state="SUSPENDED")
        self.incarnation += 1
        self._parked, self.reasons, self.working = [], set(), False
        self._committing = self._commit_due = False
        self.sim.after(wait_ms + 2 * self.network.delay_ms(), self._lost)

    def _lost(self) -> None:
        if self.alive:
            self.recorder.emit(ev.SESSION_STATE, self.name, state="LOST")   # kazoo's retry reset: its first delay
            self.sim.after(RETRY_FIRST_MS + 2 * self.network.delay_ms(), self._new_session)

    def _new_session(self) -> None:
        """0.8's handleNewSession on the watcher executor, then the listeners zkclient re-fired."""
        if not self.alive:
            return
        self.suspended = self.expired = False
        self._parked = []
        self.session = self.zk.open_session()
        self.recorder.emit(ev.SESSION_STATE, self.name, state="CONNECTED")
        self.working = True
        self._run(self._after_expiry(), self._refire)

    def _after_expiry(self) -> Generator[Request, object, None]:
        if self.owned:
            self.recorder.emit(ev.PARTITIONS_LOST, self.name, partitions=sorted(map(str, self.owned)))
        self.owned = {}
        yield from self._ensure_path(self.paths.ids)
        yield ("create", self.paths.member(self.consumer_id),
               {"data": registration_json({topic: self.config.streams_per_topic for topic in self.topics}, 0),
                "ephemeral": True})
        yield from self._rebalance(frozenset({"new-session"}))

    def _refire(self) -> None:
        self.reasons |= {"ids-changed", "topic-changed"}
        self._work()

    # -- the watcher executor ------------------------------------------------------------------------

    def _startup(self) -> None:
        self._fire("startup")

    def _notified(self, path: str, event: str) -> None:
        """A watch fired (kazoo's callback): the notification is recorded and a reason set, nothing more."""
        if not self.alive or self.suspended or self.expired:
            return   # lost with the connection: a reconnect reads the paths again, a new session re-fires them
        if self.frozen or self.cut_off:
            self._parked.append(lambda: self._notified(path, event))
            return
        self.recorder.emit(ev.WATCH_NOTIFICATION, self.name, path=path, event=event)
        self._fire("topic-changed" if path.startswith(topic_path("")) else "ids-changed")

    def _fire(self, reason: str) -> None:
        self.reasons.add(reason)
        if not self.working:
            self._work()

    def _work(self) -> None:
        if not self.alive or not self.reasons:
            self.working = False
            return
        reasons, self.reasons = frozenset(self.reasons), set()
        self.working = True
        self._run(self._rebalance(reasons), self._work)

    # -- one synced rebalance, as legacy_zk/member.py and legacy_zk/rebalance.py run it --------------

    def _start_steps(self) -> Generator[Request, object, None]:
        yield from self._ensure_path(self.paths.ids)
        yield ("create", self.paths.member(self.consumer_id),
               {"data": registration_json({topic: self.config.streams_per_topic for topic in self.topics}, 0),
                "ephemeral": True})
        yield ("get_children", self.paths.ids, {"watch": True})
        for topic in sorted(self.topics):
            yield ("get", topic_path(topic), {"watch": True})

    def _rebalance(self, reasons: frozenset[str]) -> Generator[Request, object, None]:
        if "ids-changed" in reasons:        # zkclient re-installs the fired watch: an exists, then the read
            if (yield ("exists", self.paths.ids, {"watch": True})):
                yield ("get_children", self.paths.ids, {"watch": True})
        if "topic-changed" in reasons:
            for topic in sorted(self.topics):
                if (yield ("exists", topic_path(topic), {"watch": True})):
                    yield ("get", topic_path(topic), {"watch": True})
        began = self.sim.now_ms
        self.recorder.emit(ev.REBALANCE_STARTED, self.name, trigger=",".join(sorted(reasons)), group=self.group)
        retries = self.config.rebalance_max_retries
        for attempt in range(1, retries + 1):
            attempt_began = self.sim.now_ms
            try:
                outcome, detail = yield from self._attempt()
            except (NoNode, NodeExists) as error:   # the group changed under a read: 0.8 let it go and tried again
                outcome, detail = "error", f"{type(error).__name__}Error: {error}"
            self.recorder.emit(ev.REBALANCE_ATTEMPT, self.name, attempt=attempt, outcome=outcome,
                               duration_ms=round(self.sim.now_ms - attempt_began, 3), detail=detail)
            if outcome == "success":
                self.recorder.emit(ev.REBALANCE_COMPLETED, self.name, generation=-1,
                                   assigned=sorted(map(str, self.owned)), duration_ms=round(self.sim.now_ms - began, 3),
                                   attempts=attempt, protocol=self.strategy)
                return
            if not self.alive:
                return
            yield from self._commit()
            yield ("sleep", "", {"ms": self.config.backoff_ms})
        self.recorder.emit(ev.REBALANCE_FAILED, self.name, error=f"{self.consumer_id} can't rebalance after "
                           f"{retries} retries", attempts=retries)

    def _attempt(self) -> Generator[Request, object, tuple[str, str]]:
        yield from self._read_brokers()
        my_subscription = parse_registration((yield ("get", self.paths.member(self.consumer_id), {})))
        yield from self._read_brokers()
        yield from self._commit()
        held = sorted(self.owned)
        if held:
            self.recorder.emit(ev.PARTITIONS_REVOKED, self.name, partitions=sorted(map(str, held)))
        for partition in held:
            yield ("delete", self.paths.owner(partition.topic, partition.partition), {"missing_ok": True})
        self.owned = {}
        member_ids = yield ("get_children", self.paths.ids, {"watch": True})
        subscriptions = {}
        for consumer_id in member_ids:
            data = yield ("get", self.paths.member(consumer_id), {"missing_ok": True})
            if data is None:
                return "error", f"NoNodeError: {self.paths.member(consumer_id)}"
            subscriptions[consumer_id] = dict(_subscription(data))
        topics = sorted(my_subscription)   # 0.8's range reads only this member's topics (roundrobin: the same here)
        subscriptions = {cid: {t: n for t, n in sub.items() if t in my_subscription} for cid, sub in subscriptions.items()}
        counts = {}
        for topic in topics:
            data = yield ("get", topic_path(topic), {"watch": True, "missing_ok": True})
            counts[topic] = 0 if data is None else len(json.loads(data).get("partitions", {}))
        by_thread = legacy_assign(self.strategy, counts, {cid: sub for cid, sub in subscriptions.items() if sub})
        decisions = {tp: thread for thread in self.threads for tp in by_thread.get(thread, ())}
        for partition in sorted(decisions):
            yield ("get", self.paths.offset(partition.topic, partition.partition), {"missing_ok": True})
        if not self.alive:
            return "error", "closing"
        claimed, conflicts = [], {}
        for partition in sorted(decisions):
            yield from self._ensure_path(self.paths.owners(partition.topic))
            path = self.paths.owner(partition.topic, partition.partition)
            created = yield ("create", path, {"data": decisions[partition].encode(), "ephemeral": True,
                                              "exists_ok": True})
            if created:
                claimed.append(partition)
                continue
            holder = yield ("get", path, {"missing_ok": True})
            if holder is not None and holder.decode() == decisions[partition]:
                claimed.append(partition)
            else:
                conflicts[partition] = holder.decode() if holder else "?"
        if conflicts:
            for partition in claimed:
                yield ("delete", self.paths.owner(partition.topic, partition.partition), {"missing_ok": True})
            return "owner_conflict", ", ".join(f"{tp} held by {holder}" for tp, holder in sorted(conflicts.items()))
        self.owned = dict(decisions)
        self.recorder.emit(ev.PARTITIONS_ASSIGNED, self.name, partitions=sorted(map(str, decisions)))
        return "success", f"{len(decisions)} partitions"

    def _read_brokers(self) -> Generator[Request, object, None]:
        ids = yield ("get_children", BROKER_IDS, {"missing_ok": True})
        for broker in ids or ():
            yield ("get", f"{BROKER_IDS}/{broker}", {"missing_ok": True})

    def _commit(self) -> Generator[Request, object, None]:
        """Auto-commit's positions before a release, as `legacy_zk.offsets.write_offset` writes each: a set (which
        a herd count leaves out), and the first time the node's parents and the node itself. The application is
        taken to have consumed from every partition it owns, as a herd run's producer makes it."""
        if not self.config.auto_commit_enable or not self.consuming:
            return
        for partition in sorted(self.owned):
            path = self.paths.offset(partition.topic, partition.partition)
            if (yield ("set", path, {"data": b"0", "missing_ok": True})) is None:
                yield from self._ensure_path(self.paths.offsets(partition.topic))
                if not (yield ("create", path, {"data": b"0", "exists_ok": True})):
                    yield ("set", path, {"data": b"0"})

    def _ensure_path(self, path: str) -> Generator[Request, object, None]:
        """zkclient's createPersistent with parents: an exists per missing level, then creates."""
        if path in ("", "/") or (yield ("exists", path, {})):
            return
        yield from self._ensure_path(path.rsplit("/", 1)[0])
        yield ("create", path, {"data": b"", "exists_ok": True})

    # -- requests ------------------------------------------------------------------------------------

    def _run(self, steps: Generator[Request, object, object], done, *, worker: bool = True) -> None:
        """Drive a member's steps: each request leaves when the host's thread is free, reaches the server after
        a network delay, and its answer comes back after another. An error the step did not ask to tolerate
        is thrown into it (an attempt catches it, as 0.8's did, and tries again)."""
        incarnation = self.incarnation

        def step(value: object = None, error: Exception | None = None) -> None:
            if incarnation != self.incarnation:   # its session died meanwhile
                steps.close()
                return
            try:
                op, path, options = steps.throw(error) if error is not None else steps.send(value)
            except StopIteration:
                done()
                return
            if not self.alive:
                steps.close()
                if worker:
                    self.working = False
                return
            if op == "sleep":
                self.sim.after(options["ms"], step)
                return
            self.host.free_at_ms = max(self.host.free_at_ms, self.sim.now_ms) + HOST_CPU_MS
            sent = self.sim.now_ms
            self._last_sent_ms = self.host.free_at_ms

            def answered(result: object, failure: Exception | None) -> None:
                self.recorder.emit(ev.COORDINATION_REQUEST, self.name, op=op, path=path,
                                   latency_ms=round(self.sim.now_ms - sent, 3),
                                   error=None if failure is None else type(failure).__name__ + "Error")
                if failure is not None and not _tolerated(failure, options):
                    step(error=failure)
                else:
                    step(None if failure is not None else result)

            self.sim.at(self.host.free_at_ms + self.network.delay_ms(), lambda: self._connected(
                lambda: self.zk.serve(lambda: self._apply(op, path, options),
                                      lambda result, failure: self.sim.after(
                                          self.network.delay_ms(),
                                          lambda: self._connected(lambda: answered(result, failure))))))

        step()

    def _apply(self, op: str, path: str, options: dict) -> object:
        """The request as the server applies it (a tolerated NoNode reads as None, a NodeExists as False)."""
        result = self.zk.request(op, path, data=options.get("data", b""),
                                 session=self.session if options.get("ephemeral") else None,
                                 watch=self._notified if options.get("watch") else None)
        return True if op == "create" else result


def _tolerated(error: Exception, options: dict) -> bool:
    return (isinstance(error, NoNode) and options.get("missing_ok", False)) or \
        (isinstance(error, NodeExists) and options.get("exists_ok", False))
