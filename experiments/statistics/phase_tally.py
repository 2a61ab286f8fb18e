"""Seed 002's measures of one simulated run, tallied from its events as they are emitted: no file, no Spark.

`./lab advise` plays hundreds of seeds, and writing each one's events to be summarised in Spark would cost more than
playing it. A `PhaseTally` is the simulation's tap (`simulate(..., events=False, tap=tally.feed)`): it keeps what the
three measures need and, once the run is over, computes them per phase with the summary's own definitions
(experiments.summary.pipeline, offset_ranges and phases), which a test holds equal to the Spark summary's on the same
simulated run:

- records lost: records handled later than the latency limit after they were produced, each handling counted, plus
  the produced records no consumed batch covered (not those produced within the limit before the run's last
  consumption), by the phase they were produced in;
- the worst latency of a handled record, by the same phase;
- time rebalancing: the spans when at least one member was rebalancing, merged, by the phase they start in.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from experiments.summary.phases import REBALANCE_EVENTS, START_TOLERANCE_S, phases_of
from rebalance import events as ev


@dataclass(frozen=True)
class PhaseMeasures:
    phase: str
    start_s: float
    end_s: float
    records_lost: int
    max_latency_ms: float | None     # None: no record produced in the phase was handled
    rebalance_ms: float


class PhaseTally:
    def __init__(self, latency_limit_ms: float) -> None:
        self.limit_ms = latency_limit_ms
        self.first_ns: int | None = None      # the run's first event (every `t` counts from it) ...
        self.last_ns: int | None = None       # ... and its last, records_processed apart, as the summary's bounds
        self.first_ms: int | None = None
        self.last_consumed_ns: int | None = None
        self.marks: list[tuple[str, int]] = []                                # (phase, ns)
        self.produced: dict[tuple[str, int], list[tuple[int, list[int]]]] = defaultdict(list)   # (first, stamps)
        self.covered: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)         # consumed ranges
        self.consumed: list[tuple[int, int, list[int]]] = []                  # (ns, ms, produce stamps)
        self.processed: list[tuple[int, int, list[int], list[int]]] = []      # (ns, ms, produce, done)
        self.rebalances: dict[str, list[tuple[str, int, float | None]]] = defaultdict(list)   # member -> (type, ns, ms)

    def feed(self, event: dict) -> None:
        kind, ns, ms = event["type"], event["ts_ns"], event["ts_ms"]
        if kind == ev.RECORDS_PROCESSED:
            self.processed.append((ns, ms, event["produce_ts_ms"], event.get("processed_ts_ms") or []))
            return
        if kind == ev.RECORDS_PRODUCED:
            stamps = event["produce_ts_ms"]
            if len(stamps) != event["last_offset"] - event["first_offset"] + 1:
                stamps = [ms] * (event["last_offset"] - event["first_offset"] + 1)
            self.produced[(event["topic"], event["partition"])].append((event["first_offset"], stamps))
            ms = min(stamps)
        elif kind == ev.RECORDS_CONSUMED:
            self.covered[(event["topic"], event["partition"])].append((event["first_offset"], event["last_offset"]))
            self.consumed.append((ns, ms, event["produce_ts_ms"]))
            self.last_consumed_ns = ns if self.last_consumed_ns is None else max(self.last_consumed_ns, ns)
        elif kind == ev.PHASE:
            self.marks.append((event.get("name") or "?", ns))
        elif kind in REBALANCE_EVENTS:
            self.rebalances[event["member"]].append((kind, ns, event.get("duration_ms")))
        self.first_ns = ns if self.first_ns is None else min(self.first_ns, ns)
        self.last_ns = ns if self.last_ns is None else max(self.last_ns, ns)
        self.first_ms = ms if self.first_ms is None else min(self.first_ms, ms)

    # -- the measures, once the run is over -----------------------------------------------------------------

    def measures(self) -> list[PhaseMeasures]:
        if self.first_ns is None:
            raise ValueError("no event was tallied")
        t0_ns, t0_ms = self.first_ns, self.first_ms

        def seconds(ns: int) -> float:
            return (ns - t0_ns) / 1e9

        run_end = seconds(self.last_ns)
        phases = phases_of([(name, seconds(ns)) for name, ns in sorted(self.marks, key=lambda mark: mark[1])],
                           run_end)
        starts = [start for _, start, _ in phases[1:]]
        lost = [0] * len(phases)
        worst: list[float | None] = [None] * len(phases)

        def handled(t_produce: float, latency_ms: float) -> None:
            index = bisect.bisect_right(starts, t_produce)
            if latency_ms > self.limit_ms:
                lost[index] += 1
            if worst[index] is None or latency_ms > worst[index]:
                worst[index] = latency_ms

        if self.processed:
            for ns, ms, produce, done_list in self.processed:
                t_event = seconds(ns)
                for i, produce_ms in enumerate(produce):
                    done = done_list[i] if i < len(done_list) and done_list[i] is not None else ms
                    latency = float(done - produce_ms)
                    handled(t_event - (ms - done) / 1e3 - latency / 1000, latency)
        else:
            for ns, ms, produce in self.consumed:
                t_event = seconds(ns)
                for produce_ms in produce:
                    latency = float(ms - produce_ms)
                    handled(t_event - latency / 1000, latency)
        tail_start = None if self.last_consumed_ns is None else seconds(self.last_consumed_ns) - self.limit_ms / 1000
        for t_produce in self._never_processed(t0_ms):
            if tail_start is None or t_produce < tail_start:
                lost[bisect.bisect_right(starts, t_produce)] += 1
        rebalancing = self._rebalancing(phases, seconds)
        return [PhaseMeasures(name, start, end, lost[i], worst[i], rebalancing[i])
                for i, (name, start, end) in enumerate(phases)]

    def _never_processed(self, t0_ms: int) -> list[float]:
        """The produce times (run seconds) of the produced records no consumed batch covered."""
        times = []
        for tp, batches in self.produced.items():
            uncovered = uncovered_by(self.covered.get(tp, []))
            for first, stamps in batches:
                for i, produce_ms in enumerate(stamps):
                    if uncovered(first + i):
                        times.append((produce_ms - t0_ms) / 1e3)
        return times

    def _rebalancing(self, phases: list[tuple[str, float, float]], seconds) -> list[float]:
        """Per phase, the ms of the merged rebalancing spans that start in it (the summary's episodes)."""
        spans = []
        for events in self.rebalances.values():
            last_start = None
            for kind, ns, duration_ms in sorted(events, key=lambda event: event[1]):
                t = seconds(ns)
                if kind == ev.REBALANCE_STARTED:
                    last_start = t
                    continue
                start = t - duration_ms / 1000 if duration_ms is not None else (last_start if last_start is not None else t)
                spans.append((start, t))
        episodes: list[list[float]] = []
        reach = None
        for start, end in sorted(spans):
            if reach is None or start > reach:
                episodes.append([start, end])
            else:
                episodes[-1][1] = max(episodes[-1][1], end)
            reach = end if reach is None else max(reach, end)
        found = []
        for index, (_, start, end) in enumerate(phases):
            lower = -math.inf if index == 0 else start - START_TOLERANCE_S
            upper = math.inf if index == len(phases) - 1 else end - START_TOLERANCE_S
            inside = [(b - a) for a, b in episodes if lower <= a < upper]
            found.append(float(sum(inside) * 1000))
        return found


def uncovered_by(ranges: list[tuple[int, int]]) -> Callable[[int], bool]:
    """Whether an offset lies outside every one of the consumed `ranges` (first, last), inclusive."""
    merged: list[list[int]] = []
    for low, high in sorted(ranges):
        if merged and low <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], high)
        else:
            merged.append([low, high])
    lows = [low for low, _ in merged]

    def uncovered(offset: int) -> bool:
        at = bisect.bisect_right(lows, offset) - 1
        return at < 0 or offset > merged[at][1]

    return uncovered
