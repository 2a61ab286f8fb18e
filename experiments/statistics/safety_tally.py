"""The safety checks of one simulated run, tallied from its events as they are emitted: no file, no Spark.

A safety sweep plays a thousand seeds, and summarising each one's event files in Spark would cost far more than
playing it. A `SafetyTally` is the simulation's tap (`simulate(..., events=False, tap=tally.feed)`), as the phase
tally is for `./lab advise`; once the run is over it judges the three safety checks with the summary's own rules,
which a test holds equal to the Spark summary's verdicts on planted logs:

- lost-records (`offset_ranges.never_processed`): produced records below the highest offset consumed on their
  partition that no consumed batch covered, except those produced within the latency limit before the run's last
  consumption (unseen, not lost);
- offset-regressions (`check_queries.records.offset_regressions`): per partition, in (time, order) of the commits,
  a commit below the one stored just before it;
- convergence (`ownership`, `segments` and `check_queries.group.convergence`): a moment within the bound after the
  last fault event (or the last member's start) when every partition had exactly one owner.

A seed the tally finds broken is played again with its events written and summarised in Spark, which gives the
verdict and its evidence (`experiments.statistics.safety`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from experiments.folders.run_record import RunRecord
from experiments.statistics.phase_tally import PhaseTally, uncovered_by
from experiments.summary.check_queries.model import CheckConfig, Verdict
from experiments.summary.checks import CONVERGENCE, LOST_RECORDS, OFFSET_REGRESSIONS
from experiments.summary.fault_rules import CRASH_KINDS, FAULT_EVENTS, convergence_awaited_from
from rebalance import events as ev
from rebalance.member import DEFAULT_SESSION_TIMEOUT_MS

_ORDERED = (ev.PARTITIONS_ASSIGNED, ev.PARTITIONS_REVOKED, ev.PARTITIONS_LOST, ev.REBALANCE_COMPLETED,
            ev.MEMBER_STOPPED)


@dataclass(frozen=True)
class TalliedCheck:
    check: str
    verdict: Verdict
    count: int


class SafetyTally(PhaseTally):
    """What the three safety checks need, kept as the events go by (the run's bounds and its produced and consumed
    ranges are the phase tally's)."""

    def __init__(self, config: CheckConfig | None = None) -> None:
        config = config or CheckConfig()
        super().__init__(config.latency_limit_ms)
        self.config = config
        self.order = 0                                                         # the events' order (Spark's `seq`)
        self.types: set[str] = set()
        self.commits: dict[str, list[tuple[int, int, int]]] = defaultdict(list)   # tp -> (ns, order, offset)
        self.actions: list[tuple[str, int, int, str, object]] = []            # (member, ns, order, type, partitions)
        self.crashes: list[tuple[int, int, list[str]]] = []                   # (ns, order, targets)
        self.processes: set[tuple[str, str]] = set()                          # (member, process)
        self.fault_ns: int | None = None
        self.joined_ns: int | None = None

    def feed(self, event: dict) -> None:
        super().feed(event)
        kind, ns = event["type"], event["ts_ns"]
        self.order += 1
        self.types.add(kind)
        if kind in (ev.RECORDS_PROCESSED, ev.RECORDS_PRODUCED, ev.RECORDS_CONSUMED):
            return
        if kind == ev.OFFSETS_COMMITTED:
            for tp, offset in (event.get("offsets") or {}).items():
                self.commits[tp].append((ns, self.order, offset))
            return
        member = event.get("member") or ""
        if member:
            self.processes.add((member, event.get("process") or ""))
        if kind in FAULT_EVENTS:
            self.fault_ns = ns if self.fault_ns is None else max(self.fault_ns, ns)
            if kind == ev.FAULT_STARTED and event.get("kind") in CRASH_KINDS:
                hit = event.get("member_ids")
                if hit is None:
                    hit = (event.get("target") or "").split(",")
                self.crashes.append((ns, self.order, [target for target in hit if target]))
        elif kind == ev.MEMBER_STARTED:
            self.joined_ns = ns if self.joined_ns is None else max(self.joined_ns, ns)
        if member and kind in _ORDERED:
            listed = event.get("assigned") if kind == ev.REBALANCE_COMPLETED else event.get("partitions")
            if kind != ev.REBALANCE_COMPLETED or listed is not None:
                self.actions.append((member, ns, self.order, kind, listed))

    # -- the verdicts, once the run is over -----------------------------------------------------------------

    def safety(self, record: RunRecord) -> list[TalliedCheck]:
        """lost-records, offset-regressions and convergence, in that order (`safety.SAFETY`), as the summary of the
        run's events would judge them; `record`: the run's lock.json (its partitions and session timeout)."""
        if self.first_ns is None:
            raise ValueError("no event was tallied")
        produced = ev.RECORDS_PRODUCED in self.types or ev.RECORD_PRODUCED in self.types
        owned = ev.PARTITIONS_ASSIGNED in self.types or ev.REBALANCE_COMPLETED in self.types
        return [
            self._lost() if produced else TalliedCheck(LOST_RECORDS.name, Verdict.UNKNOWN, 0),
            self._regressions() if ev.OFFSETS_COMMITTED in self.types
            else TalliedCheck(OFFSET_REGRESSIONS.name, Verdict.UNKNOWN, 0),
            self._convergence(record) if owned else TalliedCheck(CONVERGENCE.name, Verdict.UNKNOWN, 0),
        ]

    def _seconds(self, ns: int) -> float:
        return (ns - self.first_ns) / 1e9

    def _lost(self) -> TalliedCheck:
        tail_start = None if self.last_consumed_ns is None else \
            self._seconds(self.last_consumed_ns) - self.limit_ms / 1000
        lost = 0
        for tp, batches in self.produced.items():
            ranges = self.covered.get(tp)
            if not ranges:
                continue
            reach = max(high for _, high in ranges)
            uncovered = uncovered_by(ranges)
            for first, stamps in batches:
                for i, produce_ms in enumerate(stamps):
                    offset = first + i
                    if offset < reach and uncovered(offset) and \
                            not (tail_start is not None and (produce_ms - self.first_ms) / 1e3 >= tail_start):
                        lost += 1
        return TalliedCheck(LOST_RECORDS.name, Verdict.FALSE if lost else Verdict.TRUE, lost)

    def _regressions(self) -> TalliedCheck:
        moved_back = 0
        for commits in self.commits.values():
            stored = None
            for _, _, offset in sorted(commits):
                if stored is not None and offset < stored:
                    moved_back += 1
                stored = offset
        return TalliedCheck(OFFSET_REGRESSIONS.name, Verdict.FALSE if moved_back else Verdict.TRUE, moved_back)

    # -- convergence: ownership intervals, the spans between changes, the first moment all had one owner ----

    def _convergence(self, record: RunRecord) -> TalliedCheck:
        universe = record.partitions()
        run_end = self._seconds(self.last_ns)
        intervals = self._intervals(universe, run_end)
        spans = self._spans(universe, intervals, run_end)
        partitions = len(universe)
        if partitions == 0:
            return TalliedCheck(CONVERGENCE.name, Verdict.UNKNOWN, 0)
        since_t = convergence_awaited_from(None if self.fault_ns is None else self._seconds(self.fault_ns),
                                           None if self.joined_ns is None else self._seconds(self.joined_ns))
        bound_s = self.config.convergence_bound_for(record.session_timeout_ms or DEFAULT_SESSION_TIMEOUT_MS)
        deadline = since_t + bound_s
        delta: dict[float, int] = defaultdict(int)
        for tp_spans in spans.values():
            before = 0
            for start, _, owners in tp_spans:
                good = int(len(owners) == 1)
                delta[start] += good - before
                before = good
        starts = sorted(delta)
        good_partitions = 0
        for index, start in enumerate(starts):
            good_partitions += delta[start]
            until = starts[index + 1] if index + 1 < len(starts) else run_end
            if good_partitions == partitions and until > since_t and start <= deadline:
                return TalliedCheck(CONVERGENCE.name, Verdict.TRUE, 0)
        if run_end < deadline:
            return TalliedCheck(CONVERGENCE.name, Verdict.UNKNOWN, 0)
        probe = min(deadline, run_end)
        count = sum(1 for tp_spans in spans.values() for start, end, owners in tp_spans
                    if start <= probe < end and len(owners) != 1)
        return TalliedCheck(CONVERGENCE.name, Verdict.FALSE, count)

    def _intervals(self, universe: list[str], run_end: float) -> dict[str, list[tuple[float, float, str]]]:
        """Per partition, (start, end, member) while the member believed it owned it (`ownership.ownership`)."""
        flips: dict[tuple[str, str], list[tuple[int, int, int]]] = defaultdict(list)   # (member, tp) -> (ns, order, owned)
        for member, ns, order, kind, listed in self.actions:
            if kind == ev.REBALANCE_COMPLETED:
                for tp in universe:
                    flips[(member, tp)].append((ns, order, int(tp in listed)))
            elif kind == ev.MEMBER_STOPPED:
                for tp in universe:
                    flips[(member, tp)].append((ns, order, 0))
            else:
                for tp in listed or ():
                    flips[(member, tp)].append((ns, order, int(kind == ev.PARTITIONS_ASSIGNED)))
        for ns, order, targets in self.crashes:
            hit = {member for member, process in self.processes
                   if any(target in (member, process, f"member:{member}") for target in targets)}
            for member in hit:
                for tp in universe:
                    flips[(member, tp)].append((ns, order, 0))
        intervals: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
        for (member, tp), actions in flips.items():
            changes = []
            before = 0
            for ns, _, owned in sorted(actions):
                if owned != before:
                    changes.append((self._seconds(ns), owned))
                before = owned
            for index, (t, owned) in enumerate(changes):
                if owned == 1:
                    end = changes[index + 1][0] if index + 1 < len(changes) else run_end
                    intervals[tp].append((t, end, member))
        return intervals

    @staticmethod
    def _spans(universe: list[str], intervals: dict[str, list[tuple[float, float, str]]],
               run_end: float) -> dict[str, list[tuple[float, float, frozenset[str]]]]:
        """Per partition, (start, end, owners) between its ownership changes (`ownership.segments`)."""
        spans = {}
        known = set(universe)
        for tp in dict.fromkeys([*universe, *intervals]):
            owned = intervals.get(tp, [])
            origin = {0.0} if tp in known else set()   # the run's partitions are counted from its start
            bounds = sorted({*origin, *(start for start, _, _ in owned), *(end for _, end, _ in owned)})
            tp_spans = []
            for index, start in enumerate(bounds):
                end = bounds[index + 1] if index + 1 < len(bounds) else max(start, run_end)
                owners = frozenset(member for low, high, member in owned if low <= start < high)
                tp_spans.append((start, end, owners))
            spans[tp] = tp_spans
        return spans


def broken(checks: list[TalliedCheck]) -> list[TalliedCheck]:
    """The checks a run broke."""
    return [check for check in checks if check.verdict is Verdict.FALSE]

