"""Synthetic event logs: a simulated consumer group writing the lab's event schema.

The checker, the Spark summary and the report are tested against these logs, and the
summary benchmark uses them at scale. The simulation is deliberately simple (eager
rebalances, range assignment, one topic) but writes exactly what real runs write: one
JSONL file per process under RUN_DIR/events/ and a lock.json describing the scenario.

Anomalies can be planted one by one (experiments.synthetic.anomalies); every planted anomaly
is one the checker must find, and a log with none planted must pass every check.

    python -m experiments.synthetic RUN_DIR [--anomaly duplicate ...] [--backend legacy]
"""

from __future__ import annotations

import argparse
import importlib
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

from experiments.folders.run_folder import RunFolder
from experiments.folders.run_record import RunRecord, ScenarioSource
from experiments.synthetic.anomalies import Anomaly, PlantedAnomalies
from rebalance import events as ev
from rebalance.backends import GroupProtocol, backend_names, profile
from rebalance.events import EventRecorder

T0_NS = 5_000_000_000_000          # an arbitrary CLOCK_MONOTONIC origin
T0_MS = 1_780_000_000_000          # an arbitrary wall-clock origin (2026)
GROUP = "g"


@dataclass(frozen=True, kw_only=True)
class Change:
    """One timeline step: join/leave/crash `count` members, a harmless link `fault`, or a `phase` mark."""

    at_s: float
    action: str
    count: int = 1
    name: str = ""
    duration_s: float = 0.0

    def __post_init__(self) -> None:
        if self.action not in ("join", "leave", "crash", "fault", "phase"):
            raise ValueError(f"unknown timeline action {self.action!r}")


DEFAULT_TIMELINE = (
    Change(at_s=0.0, action="phase", name="steady"),
    Change(at_s=3.0, action="fault", name="latency", duration_s=2.0),
    Change(at_s=6.0, action="phase", name="scale-up"),
    Change(at_s=6.0, action="join", count=2),
    Change(at_s=10.0, action="phase", name="scale-down"),
    Change(at_s=10.0, action="leave", count=2),
    Change(at_s=13.0, action="phase", name="crash-one"),
    Change(at_s=13.0, action="crash", count=1),
)


@dataclass(frozen=True, kw_only=True)
class SyntheticRun:
    """What to simulate: the group, the load, the timeline and the anomalies to plant."""

    name: str = "synthetic"
    backend: str = "classic"
    strategy: str = "range"
    topic: str = "t0"
    partitions: int = 6
    members: int = 3
    duration_s: float = 24.0
    rate: float = 200.0                 # records per second over all partitions
    tick_s: float = 0.05                # poll interval of every member
    rebalance_s: float = 0.3            # rebalance start to assignment
    session_timeout_ms: int = 2000
    timeline: tuple[Change, ...] = DEFAULT_TIMELINE
    anomalies: frozenset[Anomaly] = field(default_factory=frozenset)
    seed: int = 0
    torn_tail: bool = False             # leave half a line at the end of one file, as a crash would
    server_samples: bool = True         # the runner reads the servers' counters before every change (older logs: no)
    server_extra: int = 0               # requests the servers count in the first change that no member logged
    broker_samples: bool = True         # the brokers sample their own liveness (broker_liveness; older logs: no)
    broker_stalls: tuple[tuple[float, float], ...] = ()   # (start s, length s): broker 0 answers nothing then


def write_run(run_dir: str | Path, config: SyntheticRun = SyntheticRun()) -> Path:
    """Simulate `config` and write RUN_DIR/events/*.jsonl and RUN_DIR/lock.json; return RUN_DIR."""
    run_dir = Path(run_dir)
    RunFolder(run_dir).events.mkdir(parents=True, exist_ok=True)
    simulation_class(config.backend)(config, run_dir).run()
    settings = {key: value for key, value in asdict(config).items() if key not in ("timeline", "anomalies")}
    RunFolder(run_dir).write_record(RunRecord(
        name=config.name, run_id=config.name, backend=config.backend, strategy=config.strategy,
        session_timeout_ms=config.session_timeout_ms, topics={config.topic: config.partitions},
        members=config.members, group=GROUP, status="completed",
        scenario=ScenarioSource(name=config.name, source="synthetic", resolved={
            **settings, "timeline": [vars(change) for change in config.timeline],
            "anomalies": sorted(a.value for a in config.anomalies)}),
        seed=config.seed, timeline_start_ns=T0_NS, started_ms=T0_MS,
        ended_ms=T0_MS + round(config.duration_s * 1000), versions={"synthetic": "1"},
    ))
    return run_dir


def simulated_backends() -> tuple[str, ...]:
    """The backends a synthetic log can be written for: every registered one."""
    return backend_names()


# Simulations other than the eager one, by the group protocol the backend's profile names: KIP-848's
# member-by-member convergence.
_SIMULATIONS = {GroupProtocol.CONSUMER: "experiments.synthetic.kip848_simulation:Kip848Simulation"}


def simulation_class(backend: str) -> type:
    """The simulation of `backend`'s protocol: eager rebalances unless `_SIMULATIONS` names another."""
    target = _SIMULATIONS.get(profile(backend).group_protocol)
    if target is None:
        return _Simulation
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


class _SimulatedClock:
    """The recorders' clock: it stands at the simulated time of the event about to be written."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> tuple[int, int]:
        return T0_NS + round(self.t * 1e9), T0_MS + round(self.t * 1e3)


class _EventLog:
    """One EventRecorder per simulated process (RUN_DIR/events/<process>.jsonl), all on one simulated clock."""

    def __init__(self, events_dir: Path, run_id: str, backend: str) -> None:
        self.dir, self.run_id, self.backend = events_dir, run_id, backend
        self.clock = _SimulatedClock()
        self.recorders: dict[str, EventRecorder] = {}

    def event(self, process: str, t: float, member: str, type: str, **fields: object) -> None:
        recorder = self.recorders.get(process) or self._open(process)
        self.clock.t = t
        recorder.emit(type, member, **fields)

    def _open(self, process: str) -> EventRecorder:
        # as the real runner, producer and brokers
        backend = "" if process in ("runner", "producer") or process.startswith("broker-") else self.backend
        recorder = EventRecorder(self.dir / f"{process}.jsonl", run_id=self.run_id, backend=backend,
                                 process=f"synthetic:{process}", clock=self.clock)
        self.recorders[process] = recorder
        return recorder

    def close(self, torn_tail: bool) -> None:
        for recorder in self.recorders.values():
            recorder.close()
        if torn_tail:   # half a line, as a producer killed mid-write leaves
            with open(self.dir / "producer.jsonl", "a") as handle:
                handle.write(f'{{"run_id":"{self.run_id}","type":"records_pro')


class _Simulation(PlantedAnomalies):
    def __init__(self, config: SyntheticRun, run_dir: Path) -> None:
        self.c = config
        self.rng = random.Random(config.seed)
        self.out = _EventLog(RunFolder(run_dir).events, config.name, config.backend)
        self.tps = [f"{config.topic}-{p}" for p in range(config.partitions)]
        self.live: list[str] = []
        self.next_index = 0
        self.owner: list[str | None] = [None] * config.partitions
        self.committed = [0] * config.partitions
        self.position = [0] * config.partitions
        self.produced = 0                      # records produced so far, over all partitions
        self.generation = 0
        self.assign_at: float | None = None    # a rebalance in progress completes then
        self.rebalance_started_at = 0.0
        self.orphan: int | None = None         # NON_CONVERGENCE: a partition nobody gets again
        self.expiries: list[float] = []        # crashed members' sessions expire then
        self.plan = self._plan_anomalies()
        self.served = 0                        # witnessed requests so far, as the servers count them
        self.extra_given = False

    # -- what the backend's profile says ------------------------------------------------

    def _in_brokers(self) -> bool:
        return profile(self.c.backend).coordinator_in_brokers

    def _generation(self) -> int:
        """The generation commits and completed rebalances carry (-1 where the backend has none)."""
        return self.generation if profile(self.c.backend).commits_carry_generation else -1

    # -- the main loop ---------------------------------------------------------------

    def run(self) -> None:
        c = self.c
        self._server_sample(0.0, "phase warmup")
        for _ in range(c.members):
            self._start_member(0.0)
        self._rebalance(0.0, "initial")
        if Anomaly.WARMUP_TIMEOUT in c.anomalies:   # as the runner marks a warm-up that gave up waiting
            self.out.event("runner", 0.0, "", ev.PHASE, name=ev.WARMUP_TIMEOUT,
                           detail={"members_up": c.members, "owned": c.partitions - 1, "double_owned": 0,
                                   "partitions": c.partitions})
        self.out.event("runner", 0.0, "", ev.PHASE, name="timeline")   # as the runner marks the timeline's start
        pending = sorted(c.timeline, key=lambda change: change.at_s)
        steps = round(c.duration_s / c.tick_s)
        for step in range(steps + 1):
            t = step * c.tick_s
            while pending and pending[0].at_s <= t + 1e-9:
                self._apply(pending.pop(0))
            while self.expiries and self.expiries[0] <= t + 1e-9:
                self._rebalance(self.expiries.pop(0), "session expired")
            self._anomalies(t)
            if self.assign_at is not None and self.assign_at <= t + 1e-9:
                self._assign(self.assign_at)
            if t <= c.duration_s - 1.0:      # the producer stops a second early: the group drains
                self._produce(t)
            self._consume(t + 0.005)
        end = c.duration_s + 0.01
        self._server_sample(end, "phase teardown")
        for member in list(self.live):
            self._stop_member(end, member)
        self._broker_liveness(end)
        self.out.close(c.torn_tail)

    def _apply(self, change: Change) -> None:
        t = change.at_s
        if change.action in ("join", "leave", "crash"):
            self._server_sample(t, f"before {change.action}")
            self.served += self.c.server_extra if not self.extra_given else 0
            self.extra_given = True
        if change.action == "phase":
            self.out.event("runner", t, "", ev.PHASE, name=change.name)
        elif change.action == "fault":
            fault = {"fault_id": f"f{t:g}", "kind": change.name, "target": self.live[0], "link": "data",
                     "params": {"ms": 100}, "emulated": False}
            self.out.event("runner", t, "", ev.FAULT_STARTED, **fault)
            self.out.event("runner", t + change.duration_s, "", ev.FAULT_STOPPED, **fault)
        elif change.action == "join":
            for _ in range(change.count):
                self._start_member(t)
            self._rebalance(t, "join")
        elif change.action == "leave":
            for member in self.live[-change.count:]:
                self._stop_member(t, member)
            self._rebalance(t + 0.01, "leave")
        elif change.action == "crash":
            for member in self.live[-change.count:]:
                fault = {"fault_id": f"crash-{member}", "kind": "crash", "target": member, "params": {}}
                self.out.event("runner", t, "", ev.FAULT_STARTED, **fault)
                self.out.event("runner", t + 0.01, "", ev.FAULT_STOPPED, **fault)
                self.live.remove(member)     # it writes nothing more; its partitions wait for expiry
            self.expiries.append(t + self.c.session_timeout_ms / 1000)

    # -- membership and rebalances ----------------------------------------------------

    def _start_member(self, t: float) -> None:
        member = f"m{self.next_index:03d}"
        self.next_index += 1
        self.live.append(member)
        self.out.event(member, t, member, ev.MEMBER_STARTED, group=GROUP, strategy=self.c.strategy, topics=[self.c.topic])

    def _stop_member(self, t: float, member: str) -> None:
        owned = self._owned(member)
        if owned:
            self._commit(t, member, owned)
            self.out.event(member, t, member, ev.PARTITIONS_REVOKED, partitions=[self.tps[p] for p in owned])
            for p in owned:
                self.owner[p] = None
        self.out.event(member, t + 0.001, member, ev.MEMBER_STOPPED, reason="close")
        self.live.remove(member)

    def _rebalance(self, t: float, trigger: str) -> None:
        """Eager: every live member revokes everything now; the assignment follows rebalance_s later."""
        if self.assign_at is None:
            self.rebalance_started_at = t
        self.assign_at = t + self.c.rebalance_s
        for member in self.live:
            self.out.event(member, t, member, ev.REBALANCE_STARTED, trigger=trigger)
            self._herd_requests(t, member)
            owned = self._owned(member)
            if owned:
                self._commit(t + 0.001, member, owned)
                self.out.event(member, t + 0.001, member, ev.PARTITIONS_REVOKED,
                               partitions=[self.tps[p] for p in owned])
        self.owner = [None] * self.c.partitions   # a crashed member's claims lapse with its session

    def _herd_requests(self, t: float, member: str) -> None:
        """What one member asks of its coordination service for one rebalance."""
        n = len(self.live)
        if not self._in_brokers():   # members coordinate through ZooKeeper watches
            self.out.event(member, t, member, ev.WATCH_NOTIFICATION, path="/consumers/g/ids", event="CHILD")
            requests = [("get_children", "/consumers/g/ids")] + [("get", f"/consumers/g/ids/{m}") for m in self.live]
            requests += [("get", f"/brokers/topics/{self.c.topic}")]
        else:
            requests = [("JoinGroup", ""), ("SyncGroup", "")]
        self.served += len(requests)
        for index, (op, path) in enumerate(requests):
            fields = {"path": path} if path else {"group": GROUP}
            self.out.event(member, t + 0.0001 * index / max(n, 1), member, ev.COORDINATION_REQUEST, op=op,
                           latency_ms=round(self.rng.uniform(0.2, 2.0), 3), error=None, **fields)
        if not self._in_brokers():
            self.out.event(member, t + 0.002, member, ev.REBALANCE_ATTEMPT, attempt=1, outcome="success",
                           duration_ms=round(self.c.rebalance_s * 1000), detail="")

    def _broker_liveness(self, end: float) -> None:
        """What broker 0's liveness sampler writes: a sample every 5 s, and each planted stall as the sampler
        reports one (`stalled` 2 s into it, `resumed` at its end), stuck in a coordinator's callback."""
        if not self.c.broker_samples:
            return
        fields = {"node": 0, "outstanding": 1, "sampler_gap_ms": 1.0}
        for step in range(int(end // 5.0) + 1):
            self.out.event("broker-0", step * 5.0, "", ev.BROKER_LIVENESS, state="sample", received=10 * step,
                           answered=10 * step - 1, loop_lag_ms=50.0, gc_ms=1.0, **fields)
        stack = "modern/coordinator/classic_group.py:1 in complete_join\nasyncio/events.py:80 in _run"
        for start, length in self.c.broker_stalls:
            start_ns = T0_NS + round(start * 1e9)
            self.out.event("broker-0", start + 2.0, "", ev.BROKER_LIVENESS, state="stalled", start_ns=start_ns,
                           stalled_ms=2000.0, loop_lag_ms=2000.0, stack=stack, **fields)
            self.out.event("broker-0", start + length, "", ev.BROKER_LIVENESS, state="resumed", start_ns=start_ns,
                           stalled_ms=length * 1000, loop_lag_ms=length * 1000, gc_ms=0.0, stack=stack,
                           stack_seen=4, stack_samples=4, **fields)

    def _server_sample(self, t: float, moment: str) -> None:
        if self.c.server_samples:
            server = "brokers" if self._in_brokers() else "zookeeper"
            self.out.event("runner", t, "", ev.SERVER_COUNTERS, server=server, moment=moment, served=self.served,
                           sampler_packets=0, nodes=1, counters={"requests": self.served})

    def _assign(self, t: float) -> None:
        self.assign_at = None
        self.generation += 1
        members = sorted(self.live)
        per, extra = divmod(self.c.partitions, max(len(members), 1))
        start = 0
        for index, member in enumerate(members):
            mine = list(range(start, start + per + (1 if index < extra else 0)))
            start = mine[-1] + 1 if mine else start
            mine = [p for p in mine if p != self.orphan]
            for p in mine:
                self.owner[p] = member
                self.position[p] = self.committed[p]
            self.out.event(member, t, member, ev.PARTITIONS_ASSIGNED, partitions=[self.tps[p] for p in mine])
            self.out.event(member, t, member, ev.REBALANCE_COMPLETED,
                           generation=self._generation(),
                           assigned=[self.tps[p] for p in mine],
                           duration_ms=round((t - self.rebalance_started_at) * 1000, 3),
                           attempts=1, protocol=self.c.strategy)

    def _owned(self, member: str) -> list[int]:
        return [p for p, owner in enumerate(self.owner) if owner == member]

    # -- records ------------------------------------------------------------------------

    def _produce(self, t: float) -> None:
        """Records produced up to t, written as the producer writes them: one records_produced
        event per partition per tick, at the tick's time."""
        until = int(t * self.c.rate)
        if until <= self.produced:
            return
        partitions, rate = self.c.partitions, self.c.rate
        for p in range(partitions):
            seqs = range(self.produced + (p - self.produced) % partitions, until, partitions)
            if not seqs:
                continue
            first = seqs[0] // partitions
            self.out.event("producer", t, "", ev.RECORDS_PRODUCED, topic=self.c.topic, partition=p,
                           first_offset=first, last_offset=first + len(seqs) - 1, count=len(seqs), seqs=list(seqs),
                           produce_ts_ms=[T0_MS + round(n / rate * 1e3) for n in seqs])
        self.produced = until

    def _produced_end(self, p: int) -> int:
        """Next offset the producer will write to partition p (records go round-robin)."""
        return (self.produced - p + self.c.partitions - 1) // self.c.partitions

    def _produce_ts(self, p: int, offset: int) -> int:
        return T0_MS + round((offset * self.c.partitions + p) / self.c.rate * 1e3)

    def _consume(self, t: float) -> None:
        consumed: dict[str, list[int]] = {}
        for p, member in enumerate(self.owner):
            if member is None or member not in self.live or self._stalled(p, t):
                continue
            end = self._produced_end(p)
            if end <= self.position[p]:
                continue
            for first, last in self._batches(p, self.position[p], end - 1, t):
                self._consumed(t, member, p, first, last)
            self.position[p] = end
            consumed.setdefault(member, []).append(p)
        for member, partitions in consumed.items():
            self._commit(t + 0.001, member, partitions)

    def _consumed(self, t: float, member: str, p: int, first: int, last: int) -> None:
        self.out.event(member, t, member, ev.RECORDS_CONSUMED, topic=self.c.topic, partition=p,
                       first_offset=first, last_offset=last, count=last - first + 1,
                       produce_ts_ms=[self._produce_ts(p, o) for o in range(first, last + 1)])

    def _commit(self, t: float, member: str, partitions: list[int]) -> None:
        for p in partitions:
            self.committed[p] = self.position[p]
        self.out.event(member, t, member, ev.OFFSETS_COMMITTED,
                       offsets={self.tps[p]: self.position[p] for p in partitions},
                       generation=self._generation())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write a synthetic event log (RUN_DIR/events, lock.json).")
    parser.add_argument("run_dir")
    parser.add_argument("--backend", default="classic", choices=simulated_backends())
    parser.add_argument("--anomaly", action="append", default=[], choices=[a.value for a in Anomaly])
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--duration", type=float, default=24.0)
    parser.add_argument("--rate", type=float, default=200.0)
    args = parser.parse_args(argv)
    config = SyntheticRun(backend=args.backend, members=args.members, partitions=args.partitions,
                          duration_s=args.duration, rate=args.rate,
                          anomalies=frozenset(Anomaly(a) for a in args.anomaly))
    print(write_run(args.run_dir, config))


if __name__ == "__main__":
    main()
