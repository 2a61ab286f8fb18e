"""What a run's own records say about the conditions it ran in, read from its folder in one pass.

`gather(run_dir)` reads lock.json and every event file once and keeps only what the conditions check
(experiments.run.conditions) judges:

- the producer's pace (`producer_pace`): how far behind its schedule it ever fell;
- the quiet windows: the stretches of the timeline in which no member was rebalancing, no fault was in force
  and no membership changed, shrunk on both sides (below), and of the records produced in them, how many were
  handled within the latency limit;
- the machine (`host_sample`): CPU pressure, steal, busy share and load; the brokers' event-loop lag
  (`broker_liveness`);
- the join waves: when each member of a wave started against when it was due (`join_wave`; a run from before
  it was written has its waves read off the membership phase marks, every member due at the mark);
- the waits for a stable group that timed out, and a warm-up that did.

A quiet window is shrunk so that nothing a disturbance caused is counted in it: a record produced within the
latency limit before a disturbance may be held up by it, and after a disturbance of T seconds the members
drain its backlog for T·u/(1 − u) seconds at utilisation u (each member handles 1/s a second while 1/s·u
keep arriving), then records wait no longer than usual: the window starts after that, plus the limit. At a
utilisation of 0.95 or more nothing after the first disturbance counts as quiet.

Times are wall-clock milliseconds (every event carries `ts_ms`, and records their produce and handling
times in the same clock), so one clock serves events from every process.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from experiments.folders.run_folder import RunFolder
from experiments.folders.run_record import NO_RECORD, RunRecord
from experiments.scenario.actions import is_membership_phase
from experiments.scenario.model import LATENCY_LIMIT_MS
from rebalance import events as ev

DRAIN_LIMIT_UTILISATION = 0.95   # at or above: a backlog drains too slowly for anything after it to be quiet

# Only these lines are parsed; the rest of a log (requests, notifications) is skipped by a substring test. The
# records are read in a second pass, once the quiet windows are known, so that none is held in memory.
def _marks(*kinds: str) -> tuple[bytes, ...]:
    """How a line of these types reads, as the recorder writes it (compact) and as a hand-written log may."""
    return tuple(f'"type":{space}"{kind}"'.encode() for kind in kinds for space in ("", " "))


_CONTROL = _marks(ev.PRODUCER_PACE, ev.HOST_SAMPLE, ev.JOIN_WAVE, ev.PHASE, ev.MEMBER_STARTED, ev.REBALANCE_STARTED,
                  ev.REBALANCE_COMPLETED, ev.REBALANCE_FAILED, ev.FAULT_STARTED, ev.FAULT_STOPPED, ev.BROKER_LIVENESS)
_PRODUCED, _PROCESSED, _CONSUMED = (_marks(kind) for kind in (ev.RECORDS_PRODUCED, ev.RECORDS_PROCESSED,
                                                              ev.RECORDS_CONSUMED))


Span = tuple[float, float]


@dataclass(frozen=True, kw_only=True)
class Wave:
    """One join wave: its step, its members, how late the latest started after it was due, and the spread
    the scenario declared for it."""

    step: str
    members: int
    started: int
    latest_s: float | None           # the latest start after its due time (None: no member started)
    declared_spread_s: float


@dataclass(frozen=True, kw_only=True)
class Quiet:
    seconds: float
    produced: int
    on_time: int
    worst_ms: float | None

    @property
    def over_limit(self) -> int:
        """Records of the quiet windows handled later than the limit, or never."""
        return self.produced - self.on_time

    @property
    def share(self) -> float | None:
        return self.over_limit / self.produced if self.produced else None


@dataclass(frozen=True, kw_only=True)
class Host:
    samples: int
    pressure_pct: float | None       # the mean CPU pressure over the timeline
    steal_pct: float | None
    busy_pct: float | None
    load1: float | None
    cores: int
    member_running: float | None = None   # member-host threads on a CPU, on average
    member_waiting: float | None = None   # member-host threads runnable but waiting for one, on average


@dataclass(frozen=True, kw_only=True)
class RunEvidence:
    latency_limit_ms: int
    workload: dict                   # lock.json's: the service spec and the load (utilisation, members...)
    producer_behind_ms: float | None  # the largest lag behind its schedule (None: no pace recorded)
    producer_due: int | None
    producer_sent: int | None
    quiet: Quiet
    host: Host | None
    broker_lag_ms: float | None      # the longest event-loop lag a broker sampled
    waves: tuple[Wave, ...]
    waves_recorded: bool             # False: read off phase marks (a run from before join_wave)
    marked: bool = True              # the runner marked its phases: a log without them has nothing to judge
    timed_out_waits: tuple[str, ...] = ()   # steps that went ahead without a stable group
    warmup_timed_out: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)
    simulated: bool = False          # played in virtual time (experiments.sim): no machine carried it

    @property
    def utilisation(self) -> float | None:
        return self.workload.get("utilisation")


def gather(run_dir: Path, *, latency_limit_ms: int = LATENCY_LIMIT_MS) -> RunEvidence:
    folder = RunFolder(run_dir)
    lock = folder.record() or NO_RECORD
    reader = _Reader(latency_limit_ms)
    files = folder.event_files()
    for event in _events(files, _CONTROL):
        reader.take(event)
    return reader.evidence(lock, files)


def _events(files: list[Path], wanted: tuple[bytes, ...]):
    for path in files:
        with open(path, "rb") as handle:
            for raw in handle:
                if any(kind in raw for kind in wanted):
                    try:
                        yield json.loads(raw)
                    except json.JSONDecodeError:
                        continue   # a torn last line


class _Reader:
    def __init__(self, limit_ms: int) -> None:
        self.limit_ms = limit_ms
        self.phases: list[tuple[float, str]] = []
        self.pace: list[dict] = []
        self.host: list[dict] = []
        self.lags: list[float] = []
        self.wave_events: list[dict] = []
        self.starts: list[tuple[float, int, str]] = []          # (ts_ms, ts_ns, member)
        self.rebalances: list[tuple[float, str, str]] = []     # (ts_ms, member, type)
        self.faults: list[tuple[float, str, str]] = []         # (ts_ms, fault key, type)

    def take(self, event: dict) -> None:
        kind, at = event.get("type"), float(event.get("ts_ms") or 0)
        if kind == ev.PHASE:
            self.phases.append((at, str(event.get("name"))))
        elif kind == ev.PRODUCER_PACE:
            self.pace.append(event)
        elif kind == ev.HOST_SAMPLE:
            self.host.append(event)
        elif kind == ev.BROKER_LIVENESS and event.get("loop_lag_ms") is not None:
            self.lags.append(float(event["loop_lag_ms"]))
        elif kind == ev.JOIN_WAVE:
            self.wave_events.append(event)
        elif kind == ev.MEMBER_STARTED:
            self.starts.append((at, int(event.get("ts_ns") or 0), str(event.get("member"))))
        elif kind in (ev.REBALANCE_STARTED, ev.REBALANCE_COMPLETED, ev.REBALANCE_FAILED):
            self.rebalances.append((at, f"{event.get('process')}/{event.get('member')}", kind))
        elif kind in (ev.FAULT_STARTED, ev.FAULT_STOPPED):
            self.faults.append((at, f"{event.get('fault_id')}/{event.get('target')}", kind))

    # -- what it all says

    def evidence(self, lock: RunRecord, files: list[Path]) -> RunEvidence:
        self.phases.sort()
        start = next((at for at, name in self.phases if name == "timeline"), None)
        end = next((at for at, name in self.phases if name in (ev.RunnerPhase.HEAL, ev.RunnerPhase.TEARDOWN) and start and at >= start), None)
        workload = dict(lock.workload)
        notes = []
        quiet = Quiet(seconds=0.0, produced=0, on_time=0, worst_ms=None)
        if start is None:
            if self.phases:
                notes.append("the timeline never started")
        else:
            end = end or max((at for at, _ in self.phases), default=start)
            quiet = self.quiet(start, end, workload.get("utilisation"), files)
        pace = [event for event in self.pace if start is None or float(event.get("ts_ms") or 0) >= start]
        return RunEvidence(
            latency_limit_ms=self.limit_ms, workload=workload,
            producer_behind_ms=max((float(event.get("behind_ms") or 0) for event in pace), default=None),
            producer_due=int(pace[-1]["due"]) if pace else None, producer_sent=int(pace[-1]["sent"]) if pace else None,
            quiet=quiet, host=self.host_load(start, end), broker_lag_ms=max(self.lags, default=None),
            waves=self.waves(lock), waves_recorded=bool(self.wave_events), marked=bool(self.phases),
            timed_out_waits=tuple(str(step.get("fault_id")) for step in lock.applied
                                  if step.get("stable") is False),
            warmup_timed_out=any(name == ev.WARMUP_TIMEOUT for _, name in self.phases),
            notes=tuple(notes), simulated="simulation" in lock.versions)

    def disturbances(self, end: float) -> list[Span]:
        """Every member's rebalances, every fault in force, every membership mark, as spans of wall time."""
        spans: list[Span] = []
        for events, opening in ((self.rebalances, (ev.REBALANCE_STARTED,)), (self.faults, (ev.FAULT_STARTED,))):
            open_at: dict[str, float] = {}
            for at, key, kind in sorted(events):
                if kind in opening:
                    open_at.setdefault(key, at)
                elif key in open_at:
                    spans.append((open_at.pop(key), at))
                elif events is self.rebalances:
                    spans.append((at, at))     # an end whose start the log lacks
            spans.extend((at, end) for at in open_at.values())
        spans.extend((at, at) for at, name in self.phases if is_membership_phase(name))
        return spans

    def quiet(self, start: float, end: float, utilisation: float | None, files: list[Path]) -> Quiet:
        limit = self.limit_ms
        u = utilisation or 0.0
        excluded = []
        for a, b in self.disturbances(end):
            drain = (b - a) * u / (1 - u) if u < DRAIN_LIMIT_UTILISATION else float("inf")
            excluded.append((a - limit, b + drain + limit))
        windows = _subtract([(start, end - limit)], excluded)
        if not windows:
            return Quiet(seconds=0.0, produced=0, on_time=0, worst_ms=None)
        inside = _Membership(windows)
        produced = sum(1 for event in _events(files, _PRODUCED)
                       for stamp in event.get("produce_ts_ms") or () if stamp is not None and inside(stamp))
        # With a service time a record is done when handled (records_processed), else when poll() returned it.
        handled = any(True for _ in _events(files, _PROCESSED))
        on_time: set[tuple] = set()       # a record handled twice counts once
        worst = None
        for event in _events(files, _PROCESSED if handled else _CONSUMED):
            ends = event.get("processed_ts_ms") if handled else None
            first, partition = int(event.get("first_offset") or 0), (event.get("topic"), event.get("partition"))
            delivered = float(event.get("ts_ms") or 0)
            for index, stamp in enumerate(event.get("produce_ts_ms") or ()):
                if stamp is None or not inside(stamp):
                    continue
                latency = (float(ends[index]) if ends else delivered) - stamp
                worst = latency if worst is None else max(worst, latency)
                if latency <= limit:
                    on_time.add((partition, first + index))
        return Quiet(seconds=sum(b - a for a, b in windows) / 1000, produced=produced,
                     on_time=min(len(on_time), produced), worst_ms=worst)

    def host_load(self, start: float | None, end: float | None) -> Host | None:
        samples = [event for event in self.host
                   if start is None or start <= float(event.get("ts_ms") or 0) <= (end or float("inf"))]
        if not samples:
            return None

        def mean(key: str) -> float | None:
            values = [float(event[key]) for event in samples if event.get(key) is not None]
            return round(statistics.fmean(values), 2) if values else None

        return Host(samples=len(samples), pressure_pct=mean("cpu_pressure_pct"), steal_pct=mean("steal_pct"),
                    busy_pct=mean("busy_pct"), load1=mean("load1"), cores=int(samples[-1].get("cores") or 1),
                    member_running=mean("member_running"), member_waiting=mean("member_waiting"))

    def waves(self, lock: RunRecord) -> tuple[Wave, ...]:
        first_start: dict[str, int] = {}
        for _, ns, member in sorted(self.starts):
            first_start.setdefault(member, ns)
        declared = {str(step.get("fault_id")): float((step.get("params") or {}).get("spread_s") or 0.0)
                    for step in (lock.schedule or {}).get("steps", ())}
        if self.wave_events:
            return tuple(self._wave(str(event.get("fault_id")), event.get("members") or [], event.get("due_ns") or [],
                                    first_start, declared.get(str(event.get("fault_id")), 0.0))
                         for event in self.wave_events)
        return self._waves_from_marks(lock, first_start)

    @staticmethod
    def _wave(step: str, members: list, due: list, first_start: dict[str, int], spread: float) -> Wave:
        late = [(first_start[member] - at) / 1e9 for member, at in zip(members, due, strict=False)
                if member in first_start and first_start[member] >= at - 1e9]
        return Wave(step=step, members=len(members), started=len(late), latest_s=max(late) if late else None,
                    declared_spread_s=spread)

    def _waves_from_marks(self, lock: RunRecord, first_start: dict[str, int]) -> tuple[Wave, ...]:
        """Before runs wrote their waves: each membership mark's newcomers, all due at the mark."""
        initial = {lock.member_ids.get(name, name)
                   for name in (lock.schedule or {}).get("initial_members", ())}
        marks = [(at, name) for at, name in self.phases if is_membership_phase(name)]
        starts = sorted((at, member) for at, _, member in self.starts if member not in initial)
        waves, seen = [], set()
        for index, (at, name) in enumerate(marks):
            until = marks[index + 1][0] if index + 1 < len(marks) else float("inf")
            newcomers = [(started, member) for started, member in starts
                         if at <= started < until and member not in seen]
            if not newcomers:
                continue
            seen.update(member for _, member in newcomers)
            waves.append(Wave(step=name, members=len(newcomers), started=len(newcomers),
                              latest_s=(max(started for started, _ in newcomers) - at) / 1000, declared_spread_s=0.0))
        return tuple(waves)


class _Membership:
    """Whether a time falls in one of sorted, disjoint windows (a bisection per look-up)."""

    def __init__(self, windows: list[Span]) -> None:
        self.starts = [a for a, _ in windows]
        self.windows = windows

    def __call__(self, at: float) -> bool:
        from bisect import bisect_right

        index = bisect_right(self.starts, at) - 1
        return index >= 0 and at <= self.windows[index][1]


def _subtract(windows: list[Span], cuts: list[Span]) -> list[Span]:
    """`windows` less every span of `cuts`, as sorted disjoint spans (the cuts merged first, then one sweep)."""
    merged: list[list[float]] = []
    for c, d in sorted(cuts):
        if merged and c <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], d)
        else:
            merged.append([c, d])
    result = []
    for a, b in sorted(windows):
        for c, d in merged:
            if d <= a or c >= b:
                continue
            if c > a:
                result.append((a, c))
            a = max(a, d)
            if a >= b:
                break
        if a < b:
            result.append((a, b))
    return result
