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

With records (`--records`), the data path as `legacy_zk/fetcher.py` runs it: the application takes one record at
a time (0.8's ConsumerIterator), each attempt first stops fetching and commits the consumed positions (only those
changed since the last write or read, 0.8's checkpointed offsets), a successful one starts fetching from the
offsets it read (else auto.offset.reset), and the auto-commit thread writes the consumed positions on its own
schedule; a clean close commits them once more before the session closes. The auto-commit thread's requests are
retried until they are answered, in a new session if the old one expired (zkclient's retryUntilConnected, as
`legacy_zk.zk` retries them): a split member's commit blocked during the outage writes its stale positions once
it is back, split brain's offsets moved back on 0.8.

What happens to its session when a member is out of contact (a ZooKeeper node cut off, split brain's pause
and cut link) is in `experiments.sim.legacy_session`; its offsets, auto-commit thread and fetching in
`experiments.sim.legacy_offsets`.

Where the threads meet the CPU: a member host runs its members in one Python process, so their requests
leave one at a time, each after `HOST_CPU_MS` of the process's time; a busy host's members start their
rebalances late, which is what makes one member's claims meet another's owner nodes not yet released."""

from __future__ import annotations

import json
from collections.abc import Callable, Generator
from dataclasses import dataclass
from functools import lru_cache

from experiments.sim.kernel import Simulation, Timer
from experiments.sim.legacy_offsets import OffsetsAndFetching
from experiments.sim.legacy_session import Request, SessionFaults
from experiments.sim.network import NETWORK_ONE_WAY_MS, MemberClock, Network
from experiments.sim.recorders import member_closed
from experiments.sim.zookeeper import SERVICE_MS, NodeExists, NoNode, ZooKeeper
from legacy_zk.config import LegacyConfig
from legacy_zk.registry import BROKER_IDS, GroupPaths, parse_registration, registration_json, topic_path
from rebalance import events as ev
from rebalance.assignors.legacy import legacy_assign, thread_ids
from rebalance.events import EventRecorder
from rebalance.types import TopicPartition

HOST_CPU_MS = 0.4           # a member host's Python time for one ZooKeeper request (kazoo's call and callback)
RECORDS_A_POLL = 1          # 0.8's ConsumerIterator.next(): the application takes one message at a time


def zookeeper_of(sim: Simulation, brokers: int, topics: dict[str, int], *, shared: bool = False) -> ZooKeeper:
    """ZooKeeper as a 0.8 cluster leaves it before any consumer starts: each broker's registration, and each topic's
    partitions with their leaders round-robin over the brokers. `shared`: the server shared among the requests in
    it, and each attempt's registrations read as one request (`experiments.sim.zookeeper.SharedServer`)."""
    zk = ZooKeeper(sim, shared=shared)
    for broker in range(brokers):
        zk.ensure(f"{BROKER_IDS}/{broker}", json.dumps({"host": "127.0.0.1", "port": 9092 + broker}).encode())
    for topic, count in topics.items():
        zk.ensure(topic_path(topic), json.dumps({"version": 1, "partitions": {
            str(p): [p % brokers] for p in range(count)}}).encode())
    return zk

@lru_cache(maxsize=1 << 16)
def _subscription(data: bytes) -> tuple[tuple[str, int], ...]:
    """A registration's subscription, parsed once: every member reads every other member's node on every
    attempt, N x N parses of a few hundred distinct values."""
    return tuple(parse_registration(data).items())


@lru_cache(maxsize=256)
def _partition_count(topic_data: bytes) -> int:
    return len(json.loads(topic_data).get("partitions", {}))


@lru_cache(maxsize=256)
def _group_assignment(strategy: str, topics: tuple[str, ...], counts: tuple[tuple[str, int], ...],
                      registrations: tuple[tuple[str, bytes], ...]) -> dict[str, list[TopicPartition]]:
    """0.8's assignment of the group as one member sees it: every member that reads the same registrations and
    partition counts computes the same, so it is computed once (a pure function of what was read)."""
    subscriptions = {}
    for consumer_id, data in registrations:
        subscription = {topic: n for topic, n in _subscription(data) if topic in topics}
        if subscription:
            subscriptions[consumer_id] = subscription
    return legacy_assign(strategy, dict(counts), subscriptions)


@dataclass
class Host:
    """One member host process: its members' requests share its one thread (the GIL)."""

    free_at_ms: float = 0.0


class LegacyMember(SessionFaults, OffsetsAndFetching):
    def __init__(self, sim: Simulation, network: Network, zk: ZooKeeper, host: Host, recorder: EventRecorder, *,
                 name: str, consumer_id: str, group: str, topics: dict[str, int], strategy: str,
                 config: LegacyConfig, zk_nodes: int = 1) -> None:
        self.sim, self.network, self.zk, self.host, self.recorder = sim, network, zk, host, recorder
        self.on_stopped: Callable[[], None] | None = None   # a restart waiting for the clean close
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
        self._retried: dict[object, Callable[[], None]] = {}   # requests retried until answered: how to send each again
        # With records: the application (experiments.sim.application) and the fetcher's state it reads
        self.app = None
        self.clock = MemberClock(sim)                 # the process's timers: the application's and the auto-commit's
        self.positions: dict[TopicPartition, int] = {}    # consumed: the offset after the last record handed out
        self._checkpointed: dict[TopicPartition, int] = {}   # last written or read, per partition
        self.generation = None                        # 0.8 has none: its records_consumed carry no generation
        self.may_commit = self.may_auto_commit = False   # commits come from the auto-commit thread, not the poll
        self.auto_commits_at_once = None

    def attach(self, app) -> None:
        self.app = app

    # What the application asks of its client (experiments.sim.application.GroupClient): 0.8's rebalance runs on the
    # watcher executor's thread, never on the application's, and its commits on the auto-commit thread.

    def poll_group(self, then: Callable[[], None]) -> None:
        then()

    def idle_wait_ms(self) -> float | None:
        return None

    def commit(self, offsets, then) -> None:
        raise RuntimeError("0.8's application does not commit: its auto-commit thread does")

    # -- what the driver does ------------------------------------------------------------------------

    def start(self) -> None:
        self.alive = True
        self.session = self.zk.open_session()
        self.recorder.emit(ev.MEMBER_STARTED, self.name, group=self.group, strategy=self.strategy,
                           topics=sorted(self.topics))
        self._run(self._start_steps(), self._startup)
        if self.config.auto_commit_enable:
            self._auto_commit = self.clock.after(self.config.auto_commit_interval_ms, self._auto_committed)
        if self.app is not None:
            self.app.start()

    def leave(self) -> None:
        """0.8's shutdown (`legacy_zk.member.LegacyMember.close`), with records once the record under way is handled
        (the runner's SIGTERM): stop fetching, commit the consumed positions, revoke, close the session: the ids and
        owner nodes go with it. A rebalance under way is dropped (the real close lets it finish first: not modelled).
        Without records nothing was consumed, so nothing is committed."""
        if not self.alive:
            return
        if self.app is not None and self.app.handling:
            self.app.on_batch_done = self.leave
            return
        self.alive = False
        session = self.session

        def revoke() -> None:
            if self.owned:
                self.recorder.emit(ev.PARTITIONS_REVOKED, self.name, partitions=sorted(map(str, self.owned)))
            self.owned = {}
            self.sim.after(self.network.delay_ms(), closed)

        def closed() -> None:   # closeSession answered: the ids and owner nodes are gone, then the member stops
            self.zk.close_session(session)
            member_closed(self)

        if self.app is None:
            revoke()
            return
        self.app.stop()
        positions, self.positions = self.positions, {}
        self._run(self._commit(positions if self.config.auto_commit_enable else {}), revoke, worker=False, closing=True)

    def crash(self, session_timeout_ms: int) -> None:
        """Gone without a word: ZooKeeper deletes its nodes when the session times out."""
        if self.app is not None:
            self.app.stop()
        self.alive = False
        session = self.session
        self.sim.after(session_timeout_ms, lambda: self.zk.close_session(session))

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
        yield from self._register()
        yield ("get_children", self.paths.ids, {"watch": True})
        for topic in sorted(self.topics):
            yield ("get", topic_path(topic), {"watch": True})

    def _register(self) -> Generator[Request, object, None]:
        """`legacy_zk.registry.register`: the ids folder, then this member's ephemeral node with its subscription."""
        yield from self._ensure_path(self.paths.ids)
        yield ("create", self.paths.member(self.consumer_id),
               {"data": registration_json({topic: self.config.streams_per_topic for topic in self.topics}, 0),
                "ephemeral": True})

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
            yield from self._stop_fetching_and_commit()
            yield ("sleep", "", {"ms": self.config.backoff_ms})
        self.recorder.emit(ev.REBALANCE_FAILED, self.name, error=f"{self.consumer_id} can't rebalance after "
                           f"{retries} retries", attempts=retries)

    def _attempt(self) -> Generator[Request, object, tuple[str, str]]:
        yield from self._read_brokers()
        my_subscription = parse_registration((yield ("get", self.paths.member(self.consumer_id), {})))
        yield from self._read_brokers()
        yield from self._stop_fetching_and_commit()
        held = sorted(self.owned)
        if held:
            self.recorder.emit(ev.PARTITIONS_REVOKED, self.name, partitions=sorted(map(str, held)))
        for partition in held:
            yield ("delete", self.paths.owner(partition.topic, partition.partition), {"missing_ok": True})
        self.owned = {}
        member_ids = yield ("get_children", self.paths.ids, {"watch": True})
        registrations = yield from self._registrations(member_ids)
        if registrations and registrations[-1] is None:
            return "error", f"NoNodeError: {self.paths.member(member_ids[len(registrations) - 1])}"
        topics = sorted(my_subscription)   # 0.8's range reads only this member's topics (roundrobin: the same here)
        counts = {}
        for topic in topics:
            data = yield ("get", topic_path(topic), {"watch": True, "missing_ok": True})
            counts[topic] = 0 if data is None else _partition_count(data)
        by_thread = _group_assignment(self.strategy, tuple(topics), tuple(counts.items()),
                                      tuple(zip(member_ids, registrations, strict=True)))
        decisions = {tp: thread for thread in self.threads for tp in by_thread.get(thread, ())}
        start_offsets: dict[TopicPartition, int | None] = {}
        for partition in sorted(decisions):
            data = yield ("get", self.paths.offset(partition.topic, partition.partition), {"missing_ok": True})
            start_offsets[partition] = None if data is None else int(data)
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
        if self.app is not None:
            self._start_fetching(start_offsets)
        return "success", f"{len(decisions)} partitions"

    def _registrations(self, member_ids: list[str]) -> Generator[Request, object, list[bytes | None]]:
        """Every member's registration, one get each, as far as the first one gone (None); on a shared server one
        get_many for them all."""
        under = self.paths.ids + "/"   # each member's node (`GroupPaths.member`), N of them on every attempt
        paths = [under + consumer_id for consumer_id in member_ids]
        if self.zk.shared is not None:
            found = yield ("get_many", self.paths.ids, {"paths": tuple(paths)})
            return found[:found.index(None) + 1] if None in found else found
        found = []
        for path in paths:
            found.append((yield ("get", path, {"missing_ok": True})))
            if found[-1] is None:
                break
        return found

    def _read_brokers(self) -> Generator[Request, object, None]:
        ids = yield ("get_children", BROKER_IDS, {"missing_ok": True})
        for broker in ids or ():
            yield ("get", f"{BROKER_IDS}/{broker}", {"missing_ok": True})

    def _ensure_path(self, path: str) -> Generator[Request, object, None]:
        """zkclient's createPersistent with parents: an exists per missing level, then creates."""
        if path in ("", "/") or (yield ("exists", path, {})):
            return
        yield from self._ensure_path(path.rsplit("/", 1)[0])
        yield ("create", path, {"data": b"", "exists_ok": True})

    # -- requests ------------------------------------------------------------------------------------

    def _run(self, steps: Generator[Request, object, object], done, *, worker: bool = True,
             closing: bool = False, retried: bool = False) -> None:
        """Drive a member's steps: each request leaves when the host's thread is free, reaches the server after
        a network delay, and its answer comes back after another. An error the step did not ask to tolerate
        is thrown into it (an attempt catches it, as 0.8's did, and tries again). `closing`: the close's own
        steps, which run on after the member stopped being alive. `retried`: steps that outlive their session,
        each request sent again in the next one until it is answered (the auto-commit thread's); other steps die
        with the session that ran them."""
        incarnation = self.incarnation
        token = object()

        def step(value: object = None, error: Exception | None = None) -> None:
            if incarnation != self.incarnation and not retried:   # its session died meanwhile
                steps.close()
                return
            try:
                op, path, options = steps.throw(error) if error is not None else steps.send(value)
            except StopIteration:
                done()
                return
            if not self.alive and not closing:
                steps.close()
                if worker:
                    self.working = False
                return
            if op == "sleep":
                self.sim.after(options["ms"], step)
                return
            send(op, path, options)

        def send(op: str, path: str, options: dict) -> None:
            self.host.free_at_ms = max(self.host.free_at_ms, self.sim.now_ms) + HOST_CPU_MS
            sent = self.sim.now_ms
            reads = len(options["paths"]) if op == "get_many" else 1
            # K reads one after another take at least K round trips, however idle the server
            no_sooner = sent + reads * (HOST_CPU_MS + SERVICE_MS + 2 * NETWORK_ONE_WAY_MS) if reads > 1 else 0.0
            self._last_sent_ms = self.host.free_at_ms
            if retried:
                self._retried[token] = lambda: send(op, path, options)

            def answered(result: object, failure: Exception | None) -> None:
                if retried and self._retried.pop(token, None) is None:
                    return   # the answer to a try already made again in a new session
                self.recorder.emit(ev.COORDINATION_REQUEST, self.name, op=op, path=path,
                                   latency_ms=round(self.sim.now_ms - sent, 3),
                                   error=None if failure is None else type(failure).__name__ + "Error",
                                   **({"count": reads} if reads > 1 else {}))
                if failure is not None and not _tolerated(failure, options):
                    step(error=failure)
                else:
                    step(None if failure is not None else result)

            self.sim.at(self.host.free_at_ms + self.network.delay_ms(), lambda: self._connected(
                lambda: self.zk.serve(lambda: self._apply(op, path, options),
                                      lambda result, failure: self.sim.at(
                                          max(self.sim.now_ms + self.network.delay_ms(), no_sooner),
                                          lambda: self._connected(lambda: answered(result, failure))), reads)))

        step()

    def _apply(self, op: str, path: str, options: dict) -> object:
        """The request as the server applies it (a tolerated NoNode reads as None, a NodeExists as False)."""
        result = self.zk.request(op, path, data=options.get("data", b""),
                                 session=self.session if options.get("ephemeral") else None,
                                 watch=self._notified if options.get("watch") else None,
                                 paths=options.get("paths", ()))
        return True if op == "create" else result


def _tolerated(error: Exception, options: dict) -> bool:
    return (isinstance(error, NoNode) and options.get("missing_ok", False)) or \
        (isinstance(error, NodeExists) and options.get("exists_ok", False))
