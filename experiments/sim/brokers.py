"""The broker cluster in virtual time, for the server faults: which broker is alive, who each one thinks leads
which partition, and where the group's coordinator lives.

Shared with the lab's brokers: the leadership rule (`broker.view.ClusterView`, one view a broker: partition p
prefers the (p mod N)-th configured broker, a dead or held-back one's partitions go to the live ones, a
returning broker is held back for the fail-back delay), the group's `__consumer_offsets` partition
(`rebalance.javahash.coordinator_partition`), and the group rebuilt on the broker that takes that partition
over from the partition's records (`replay`, through the sim coordinators' `loaded`).

Modelled as `broker/server.py` behaves: each broker probes each peer every 200 ms and declares a peer dead
once it has not answered for broker_session_timeout_ms, each survivor on its own probe phase; the new leader
of the group's partition answers COORDINATOR_LOAD_IN_PROGRESS for coordinator_load_delay_ms, then serves
the group replayed from the records the old coordinator wrote; a live broker that does not lead the
partition answers NOT_COORDINATOR; a dead one refuses the connection. A restarted broker sees its peers at
once (its first probe, milliseconds after the start, is not modelled) and is held back by them for the
fail-back delay. The data partitions the dead broker led have no leader until a survivor's view moves them
(`DataPath`, beside the producer's and the fetchers' reconnect schedules)."""

from __future__ import annotations

import random
from collections.abc import Callable

from broker.view import BrokerAddress, ClusterView
from experiments.sim.kernel import Simulation, Timer
from modern.common import errors
from rebalance.javahash import OFFSETS_TOPIC_PARTITIONS, coordinator_partition

OFFSETS_TOPIC = "__consumer_offsets"
PROBE_INTERVAL_MS = 200.0        # broker.server.BrokerConfig.probe_interval_s
PORT = 9092


class Refused:
    """A connection to a dead broker: refused (or reset, for a request it held when it died)."""

    error = None

    def __repr__(self) -> str:
        return "REFUSED"


REFUSED = Refused()


def address(node: int) -> BrokerAddress:
    return BrokerAddress(node, "127.0.0.1", PORT + node)


class Cluster:
    """`brokers` brokers with their views, the group's coordinator on whichever leads its partition.

    `make_coordinator(node, log, loaded)` builds the sim coordinator a broker runs: a new group (`loaded` False, at
    the start) or the group replayed from `log` (a broker taking the partition over). `log` is the partition's
    records, in the data directory the brokers share, so they outlive a broker."""

    def __init__(self, sim: Simulation, *, brokers: int, group: str, make_coordinator: Callable[[int, list, bool], object],
                 session_timeout_ms: int, load_delay_ms: int, fail_back_delay_ms: int) -> None:
        self.sim, self.size, self.make_coordinator = sim, brokers, make_coordinator
        self.session_timeout_ms, self.load_delay_ms = session_timeout_ms, load_delay_ms
        self.fail_back_delay_ms = fail_back_delay_ms
        self.partition = coordinator_partition(group, OFFSETS_TOPIC_PARTITIONS)
        self.log: list = []
        self.alive = set(range(brokers))
        self.views = {node: self._view(node) for node in range(brokers)}
        self.coordinators: dict[int, object] = {}        # broker -> the coordinator it runs, loaded
        self._loading: dict[int, Timer] = {}
        self._pending: dict[int, dict] = {}              # broker -> replies it holds (a parked JoinGroup, SyncGroup)
        self._declare: dict[tuple[int, int], Timer] = {}
        self.data = DataPath(self)
        first = self.leader_of_group()
        self.latest = self.coordinators[first] = make_coordinator(first, self.log, False)

    def _view(self, node: int) -> ClusterView:
        view = ClusterView(node, address(node), configured=range(self.size),
                           fail_back_delay_s=self.fail_back_delay_ms / 1000)
        for peer in self.alive - {node}:
            view.mark_live(address(peer), self.sim.now_ms / 1000)
        view.hold_self(False)   # its peers answered: nobody holds it back
        return view

    # -- what the members' requests meet ----------------------------------------------------------------

    def leader_of_group(self, seen_by: int | None = None) -> int:
        view = self.views[min(self.alive) if seen_by is None else seen_by]
        return view.leader_for(OFFSETS_TOPIC, self.partition)

    def find_coordinator(self, broker: int):
        """FindCoordinator answered by `broker`: (NONE, the node its view names), (COORDINATOR_NOT_AVAILABLE, None),
        or REFUSED."""
        if broker not in self.alive:
            return REFUSED
        view = self.views[broker]
        leader = view.leader_for(OFFSETS_TOPIC, self.partition)
        if view.address_of(leader) is None:
            return errors.COORDINATOR_NOT_AVAILABLE, None
        return errors.NONE, leader

    def serve(self, broker: int, reply, served: Callable[[object, Callable], None], refused_as) -> None:
        """A group request arriving at `broker`: `served(coordinator, reply)` there, or `refused_as(error)` answered
        (COORDINATOR_LOAD_IN_PROGRESS while it loads the partition, NOT_COORDINATOR when it does not lead it), or
        REFUSED by a dead broker."""
        if broker not in self.alive:
            reply(REFUSED)
            return
        coordinator = self.coordinators.get(broker)
        if coordinator is None:
            loading = broker in self._loading or self.leader_of_group(broker) == broker
            reply(refused_as(errors.COORDINATOR_LOAD_IN_PROGRESS if loading else errors.NOT_COORDINATOR))
            return
        pending = self._pending.setdefault(broker, {})   # in arrival order: a kill resets them in that order

        def answer(result=None) -> None:
            if pending.pop(answer, False) is None:
                reply(result)

        pending[answer] = None
        served(coordinator, answer)

    def serving(self):
        """A coordinator that holds the group now (the members' direct reads of it: their committed offsets)."""
        return next((self.coordinators[node] for node in sorted(self.coordinators)), None)

    # -- faults ------------------------------------------------------------------------------------------

    def kill(self, node: int) -> None:
        """SIGKILL: its connections reset at once (what it held is refused), its peers notice after the session."""
        if node not in self.alive:
            return
        self.alive.discard(node)
        for reply in list(self._pending.pop(node, {})):
            reply(REFUSED)
        coordinator = self.coordinators.pop(node, None)
        if coordinator is not None:
            coordinator.stop(unload=False)
        loading = self._loading.pop(node, None)
        if loading is not None:
            loading.cancel()
        self.data.killed(node)
        for peer in sorted(self.alive):
            # the last answer came up to a probe interval before the kill; dead once silent for the session
            silent_from = self.sim.now_ms - self.sim.rng.random() * PROBE_INTERVAL_MS
            due = silent_from + max(self.session_timeout_ms, PROBE_INTERVAL_MS)
            self._declare[(peer, node)] = self.sim.at(due, lambda peer=peer: self._declared_dead(peer, node))

    def _declared_dead(self, peer: int, node: int) -> None:
        self._declare.pop((peer, node), None)
        if peer in self.alive and node not in self.alive and self.views[peer].mark_dead(node):
            self.reconcile()

    def restart(self, node: int) -> None:
        """Started again on its port: it learns its peers, and they see it at their next probe and hold it back."""
        if node in self.alive:
            return
        for key in [key for key in self._declare if key[1] == node]:
            self._declare.pop(key).cancel()
        self.alive.add(node)
        self.views[node] = self._view(node)
        self.views[node].hold_self(self.fail_back_delay_ms > 0 and len(self.alive) > 1)   # until a peer answers
        for peer in sorted(self.alive - {node}):
            self.sim.after(self.sim.rng.random() * PROBE_INTERVAL_MS, lambda peer=peer: self._seen_again(peer, node))
        self.reconcile()

    def _seen_again(self, peer: int, node: int) -> None:
        """A peer's probe answered by the restarted broker: a peer that had declared it dead holds it back for the
        fail-back delay; the broker learns from the peer's answer whether it is held."""
        if peer in self.alive and node in self.alive:
            self.views[peer].mark_live(address(node), self.sim.now_ms / 1000)
            self.views[node].hold_self(self.views[peer].is_held(node))
            if self.views[peer].is_held(node):
                self.sim.after(self.fail_back_delay_ms, lambda: self._released(peer, node))
            self.reconcile()

    def _released(self, peer: int, node: int) -> None:
        if peer in self.alive and self.views[peer].release_held(self.sim.now_ms / 1000) and node in self.alive:
            self.views[node].hold_self(any(self.views[other].is_held(node) for other in self.alive - {node}))
        self.reconcile()

    # -- leadership of the group's partition -------------------------------------------------------------

    def reconcile(self) -> None:
        """Each live broker loads the group's partition when its view gives it the partition, and unloads it when
        its view gives it away (`broker.server.Broker._reconcile` and the coordinator's leadership callback)."""
        for node in sorted(self.alive):
            leads = self.leader_of_group(node) == node
            if leads and node not in self.coordinators and node not in self._loading:
                self._loading[node] = self.sim.after(self.load_delay_ms, lambda node=node: self._loaded(node))
            elif not leads:
                loading = self._loading.pop(node, None)
                if loading is not None:
                    loading.cancel()
                coordinator = self.coordinators.pop(node, None)
                if coordinator is not None:
                    self._pending.pop(node, None)
                    coordinator.stop(unload=True)
        self.data.reconcile()

    def _loaded(self, node: int) -> None:
        self._loading.pop(node, None)
        if node in self.alive and self.leader_of_group(node) == node:
            self.latest = self.coordinators[node] = self.make_coordinator(node, self.log, True)


class DataPath:
    """The data partitions' leaders as the producer and the members' fetchers meet them.

    A partition led by a dead broker takes no record and gives none until a survivor's view moves it and the new
    leader opens it. The producer (kafka-python) finds out at its next reconnect attempt to the dead broker: each
    failure refreshes its metadata, and the attempts back off from reconnect_backoff_ms (50) doubling up to
    reconnect_backoff_max_ms (30 s), within +-20 %; what it sent meanwhile waits in its accumulator, stamped when
    sent. A member's fetcher finds out the same way: the coordinator clients' (`modern.client.fetcher`) with its
    backoff capped at 1 s, 0.8's (`legacy_zk.fetcher`, kafka-python's KafkaConsumer) with kafka-python's, the
    producer's."""

    PRODUCER_BACKOFF = (50.0, 30_000.0)
    FETCHER_BACKOFF = (50.0, 1_000.0)
    KAFKA_PYTHON_FETCHER_BACKOFF = PRODUCER_BACKOFF   # KafkaConsumer's reconnect_backoff_ms, reconnect_backoff_max_ms

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.topics: dict[str, int] = {}
        self.leaders: dict[tuple[str, int], int] = {}       # the broker that has the partition open
        self.down: dict[tuple[str, int], tuple[float, int]] = {}   # partition -> (since, the dead leader)
        self.moved: dict[tuple[str, int], tuple[float, float]] = {}   # partition -> (its leader died, it moved)
        self.producer = None                                # experiments.sim.records.Producer, when records flow
        self._seen: dict[tuple, float] = {}                 # (member, partition, span) -> when its fetcher sees it

    def track(self, topics: dict[str, int]) -> None:
        self.topics = dict(topics)
        view = self.cluster.views[min(self.cluster.alive)]
        self.leaders = {(t, p): view.leader_for(t, p) for t, n in self.topics.items() for p in range(n)}

    def killed(self, node: int) -> None:
        now = self.cluster.sim.now_ms
        hit = sorted(tp for tp, leader in self.leaders.items() if leader == node)
        for tp in hit:
            self.down[tp] = (now, node)
            self.moved.pop(tp, None)
            if self.producer is not None and tp[0] == self.producer.topic:
                self.producer.hold(tp[1])
        if hit and self.producer is not None:
            self._producer_attempt(node, 1, now)

    def reconcile(self) -> None:
        cluster = self.cluster
        for tp in sorted(self.down):
            for node in sorted(cluster.alive):
                if cluster.views[node].leader_for(*tp) == node:
                    self.leaders[tp] = node
                    self.moved[tp] = (self.down.pop(tp)[0], cluster.sim.now_ms)
                    break

    def _producer_attempt(self, node: int, failures: int, at_ms: float) -> None:
        """A failed connection to `node` (the `failures`-th): the metadata is refreshed, the partitions that moved are
        sent to their new leaders, and the next attempt waits its backoff."""
        sim = self.cluster.sim

        def attempt() -> None:
            for tp in sorted(self.moved):
                if self.leaders[tp] != node and tp[0] == self.producer.topic and self.producer.holding(tp[1]):
                    self.producer.release(tp[1])
            if any(dead == node for _, dead in self.down.values()):
                self._producer_attempt(node, failures + 1, sim.now_ms + _backoff(self.PRODUCER_BACKOFF, failures,
                                                                                sim.rng.random()))
        sim.at(at_ms, attempt)

    def readable(self, member: str, tp: tuple[str, int], now_ms: float,
                 backoff: tuple[float, float] = FETCHER_BACKOFF) -> bool:
        """Whether `member`'s fetcher fetches `tp` now: always, but for a partition whose leader died, which it
        fetches again from the first of its reconnect attempts (`backoff`: initial and cap) after the partition
        moved."""
        if tp in self.down:
            return False
        span = self.moved.get(tp)
        if span is None:
            return True
        key = (member, tp, span)
        seen = self._seen.get(key)
        if seen is None:
            draw = random.Random(f"{self.cluster.sim.seed}/{member}/{tp[0]}-{tp[1]}/{span[0]}")
            seen, failures = span[0], 1
            while seen < span[1]:
                seen += _backoff(backoff, failures, draw.random())
                failures += 1
            self._seen[key] = seen
        return now_ms >= seen


def _backoff(bounds: tuple[float, float], failures: int, draw: float) -> float:
    """kafka-python's and the fetcher's reconnect backoff after `failures` failures: initial * 2^(failures - 1), at
    most the cap, times a factor in [0.8, 1.2)."""
    initial, cap = bounds
    return min(initial * 2 ** (failures - 1), cap) * (0.8 + 0.4 * draw)
