"""The anomalies a synthetic log can carry, and where the simulation plants them.

`PlantedAnomalies` is the simulations' share of it (experiments.synthetic.simulation): when each planted
anomaly happens, and the events that plant it. Every planted anomaly is one the checker must find.
"""

from __future__ import annotations

from enum import StrEnum

from experiments.scenario.model import LATENCY_LIMIT_MS
from rebalance import events as ev


class Anomaly(StrEnum):
    DOUBLE_OWNERSHIP = "double-ownership"    # a member claims a partition another member owns
    LOST_RECORD = "lost-record"              # one offset is skipped by its consumer
    DUPLICATE = "duplicate"                  # one record is processed twice
    OFFSET_REGRESSION = "offset-regression"  # a commit lower than an earlier one
    SLOW_RECORD = "slow-record"              # a partition stalls longer than the latency limit
    NON_CONVERGENCE = "non-convergence"      # a partition stays unowned after the last fault
    FENCED_COMMIT = "fenced-commit"          # a commit refused (ILLEGAL_GENERATION; kip848: STALE_MEMBER_EPOCH)
    WARMUP_TIMEOUT = "warmup-timeout"        # the timeline starts before the group owns every partition once


class PlantedAnomalies:
    """Where and when the simulation plants each anomaly; it uses the simulation's state (config `c`, `out`,
    `live`, `owner`, `position`, `committed`, `generation`, `orphan`, `tps`, `plan`)."""

    FENCING_ERROR = "ILLEGAL_GENERATION"      # what a planted fenced commit is refused with

    def _plan_anomalies(self) -> dict[Anomaly, float]:
        """When each planted anomaly happens, as a fraction of the run (spread so they don't overlap)."""
        fractions = {
            Anomaly.LOST_RECORD: 0.30, Anomaly.DOUBLE_OWNERSHIP: 0.40, Anomaly.FENCED_COMMIT: 0.45,
            Anomaly.DUPLICATE: 0.50, Anomaly.SLOW_RECORD: 0.55, Anomaly.OFFSET_REGRESSION: 0.60,
        }
        plan = {a: round(fractions[a] * self.c.duration_s / self.c.tick_s) * self.c.tick_s
                for a in self.c.anomalies if a in fractions}
        if Anomaly.NON_CONVERGENCE in self.c.anomalies:
            faults = [ch.at_s for ch in self.c.timeline if ch.action in ("fault", "crash")]
            plan[Anomaly.NON_CONVERGENCE] = max(faults) if faults else 0.5 * self.c.duration_s
        return plan

    def _due(self, anomaly: Anomaly, t: float) -> bool:
        at = self.plan.get(anomaly)
        if at is not None and at <= t + 1e-9:
            del self.plan[anomaly]
            return True
        return False

    def _stalled(self, p: int, t: float) -> bool:
        at = self.c.duration_s * 0.55
        return Anomaly.SLOW_RECORD in self.c.anomalies and p == 0 and at <= t < at + LATENCY_LIMIT_MS / 1000 + 1.5

    def _batches(self, p: int, first: int, last: int, t: float) -> list[tuple[int, int]]:
        if p == 1 % self.c.partitions and last > first and self._due(Anomaly.LOST_RECORD, t):
            return [(first, first)] + ([(first + 2, last)] if last > first + 1 else [])  # first+1 skipped
        if p == 1 % self.c.partitions and self._due(Anomaly.DUPLICATE, t):
            return [(first, last), (last, last)]                # the last record again
        return [(first, last)]

    def _anomalies(self, t: float) -> None:
        tp = self.tps
        if self._due(Anomaly.DOUBLE_OWNERSHIP, t):
            p = 2 % self.c.partitions
            intruder = next(m for m in self.live if m != self.owner[p])
            self.out.event(intruder, t, intruder, ev.PARTITIONS_ASSIGNED, partitions=[tp[p]])
            self.out.event(intruder, t + 1.0, intruder, ev.PARTITIONS_REVOKED, partitions=[tp[p]])
        if self._due(Anomaly.FENCED_COMMIT, t):
            member = self.live[0]
            self.out.event(member, t, member, ev.COMMIT_FAILED, offsets={tp[0]: self.position[0]},
                           error=self.FENCING_ERROR)
        if self._due(Anomaly.OFFSET_REGRESSION, t):
            p = 3 % self.c.partitions
            member = self.owner[p] or self.live[0]
            stale = max(self.committed[p] - 5, 0)
            if stale == self.committed[p]:
                raise ValueError("offset-regression needs at least one committed record on the partition")
            self.out.event(member, t, member, ev.OFFSETS_COMMITTED, offsets={tp[p]: stale}, generation=self.generation)
        if self._due(Anomaly.NON_CONVERGENCE, t):
            self.orphan = 4 % self.c.partitions
            member = self.owner[self.orphan]
            if member is not None and member in self.live:
                self.out.event(member, t, member, ev.PARTITIONS_REVOKED, partitions=[tp[self.orphan]])
            self.owner[self.orphan] = None
