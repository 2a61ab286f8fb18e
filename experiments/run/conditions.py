"""Whether a run's machine carried it: the `conditions` check, ok, suspect or invalid, with its reasons in numbers.

A lab's number is worth what its run's conditions were. Each condition below compares one figure a run records
(experiments.run.run_evidence) with two thresholds, declared once in `THRESHOLDS` with the reason for each:

- the producer kept its schedule (records sent later than due fall behind it, and stay behind);
- the members kept up where nothing changed: in the quiet windows (no rebalance, no fault, no membership change,
  nor their aftermath) the records over the latency limit, or never handled, beyond what the declared service
  times give on their own (`steady_share`, the workload's own queue on an ideal host);
- the host: the share of the timeline a runnable task waited for a CPU (PSI), CPU stolen by the hypervisor, and
  the brokers' event-loop lag;
- the members started when asked: the latest start of a join wave's member after it was due;
- no wait for a stable group timed out, and the warm-up did not: the change a step was meant to measure did
  not overlap the one before it.

A run is as bad as its worst condition. A suspect run is kept and marked wherever its numbers appear; an
invalid one is left out of a campaign's statistics and run again (experiments.campaign).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from enum import StrEnum

from experiments.run.run_evidence import RunEvidence
from experiments.scenario.model import WorkloadSpec


class Grade(StrEnum):
    OK = "ok"
    SUSPECT = "suspect"
    INVALID = "invalid"

    @property
    def rank(self) -> int:
        return (Grade.OK, Grade.SUSPECT, Grade.INVALID).index(self)


@dataclass(frozen=True, kw_only=True)
class Threshold:
    name: str
    measure: str          # what is compared, with its unit
    suspect: float        # at or above: suspect
    invalid: float        # at or above: invalid
    reason: str

    def grade(self, value: float) -> Grade:
        return Grade.INVALID if value >= self.invalid else Grade.SUSPECT if value >= self.suspect else Grade.OK


THRESHOLDS: dict[str, Threshold] = {threshold.name: threshold for threshold in (
    Threshold(name="producer-behind", measure="seconds the producer fell behind its schedule", suspect=0.5,
              invalid=3.0,
              reason="a producer behind its schedule offered less load than the scenario declares, and a stalled one "
                     "offers none: half a second is fifty of its 10 ms ticks; a stall as long as the latency limit "
                     "could hide every record a stop of the group would have made late"),
    Threshold(name="quiet-over-limit", measure="points of the quiet windows' records over the limit or never handled, "
              "beyond the declared service times' own share", suspect=0.5, invalid=3.0,
              reason="where nothing changes only the host can make a record late beyond what its service time and "
                     "queue give: half a point is already a visible part of a run's count; 3 points is what the "
                     "article's worst phase lost to the protocol (range's 100 -> 50: 5,977 of about 180,000 records, "
                     "3.3%), so the host alone would rival it"),
    Threshold(name="cpu-pressure", measure="% of the timeline a runnable task waited for a CPU (PSI some, mean)",
              suspect=80.0, invalid=92.0,
              reason="the lab's own threads keep two cores busy: seed002 alone on a quiet machine of two cores waited "
                     "60% of the time (a tenth of its seconds over 79%) with nothing late in its quiet windows; "
                     "beside a test suite 89%, with 2% of its quiet records late; beside three CPU burners 97%, "
                     "with three quarters late (docs/analysis.md, run conditions)"),
    Threshold(name="steal", measure="% of CPU stolen by the hypervisor (mean)", suspect=5.0, invalid=20.0,
              reason="stolen time is invisible to the run's own processes: 5% is beyond a quiet virtual machine's "
                     "noise, 20% a neighbour taking a core's worth of one of two"),
    Threshold(name="broker-lag", measure="seconds of the brokers' longest event-loop lag", suspect=0.5, invalid=2.0,
              reason="a broker whose loop waits half a second delays every group request by as much; 2 s is the "
                     "server-stall check's own threshold"),
    Threshold(name="join-late", measure="seconds the latest member of a join wave started after it was due",
              suspect=1.0, invalid=3.0,
              reason="an eager group takes a late joiner into the same rebalance only while its join phase lasts, "
                     "about a heartbeat (3 s): later joiners start rebalances of their own, which the step was not "
                     "meant to measure"),
)}

MIN_QUIET_S = 5.0          # quiet windows shorter than this in all say nothing of the host
MIN_QUIET_RECORDS = 200    # ... nor fewer records than this
_MODEL_RECORDS = 20_000    # arrivals in the steady-state model


@dataclass(frozen=True, kw_only=True)
class Finding:
    condition: str
    grade: Grade
    text: str


@dataclass(frozen=True, kw_only=True)
class Conditions:
    grade: Grade
    findings: tuple[Finding, ...]
    figures: dict                    # the numbers behind them, for tables and campaigns

    def reason(self) -> str:
        """The findings that are not ok, or what was checked when all are."""
        bad = [finding.text for finding in self.findings if finding.grade is not Grade.OK]
        if bad:
            return "; ".join(bad)
        return "; ".join(finding.text for finding in self.findings) or "nothing to judge"

    def line(self) -> str:
        """`conditions: suspect - the producer fell 1.2 s behind its schedule (suspect from 0.5 s)`."""
        return f"conditions: {self.grade.value} - {self.reason()}"

    def to_json(self) -> dict:
        return {"grade": self.grade.value, "findings": [asdict(finding) | {"grade": finding.grade.value}
                                                        for finding in self.findings], "figures": self.figures}

    @classmethod
    def from_json(cls, document: dict) -> Conditions:
        return cls(grade=Grade(document["grade"]), figures=dict(document.get("figures") or {}),
                   findings=tuple(Finding(condition=item["condition"], grade=Grade(item["grade"]), text=item["text"])
                                  for item in document.get("findings") or ()))

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1) + "\n"


def judge(evidence: RunEvidence) -> Conditions:
    if not evidence.marked:
        return Conditions(grade=Grade.OK, figures={"latency_limit_ms": evidence.latency_limit_ms}, findings=(
            Finding(condition="run", grade=Grade.OK, text="the log has no runner marks (phase events), so nothing "
                    "of its conditions was recorded: not judged"),))
    findings: list[Finding] = []
    figures: dict = {"latency_limit_ms": evidence.latency_limit_ms}
    limit_s = evidence.latency_limit_ms / 1000
    if evidence.simulated:   # what a host figure would say of a real run does not apply: say so, first
        findings.append(Finding(condition="simulated", grade=Grade.OK, text="played in virtual time "
                                "(docs/simulation.md): no machine carried it, so no host figure applies"))

    def graded(name: str, value: float, text: str) -> None:
        threshold = THRESHOLDS[name]
        grade = threshold.grade(value)
        bound = {Grade.SUSPECT: f" (suspect from {threshold.suspect:g})", Grade.INVALID: f" (invalid from "
                 f"{threshold.invalid:g})"}.get(grade, "")
        findings.append(Finding(condition=name, grade=grade, text=text + bound))

    if evidence.producer_behind_ms is not None:
        behind = evidence.producer_behind_ms / 1000
        figures["producer_behind_s"] = round(behind, 3)
        graded("producer-behind", behind, f"the producer fell at most {behind:.2f} s behind its schedule")

    quiet = evidence.quiet
    figures["quiet_s"], figures["quiet_records"] = round(quiet.seconds, 1), quiet.produced
    if quiet.seconds >= MIN_QUIET_S and quiet.produced >= MIN_QUIET_RECORDS:
        expected = steady_share(evidence)
        excess = 100 * (quiet.share - expected)
        figures.update(quiet_over_limit=quiet.over_limit, quiet_share_pct=round(100 * quiet.share, 3),
                       quiet_model_pct=round(100 * expected, 3),
                       quiet_worst_s=None if quiet.worst_ms is None else round(quiet.worst_ms / 1000, 2))
        worst = "" if quiet.worst_ms is None else f", worst {quiet.worst_ms / 1000:.1f} s"
        graded("quiet-over-limit", excess, f"{quiet.over_limit:,} of {quiet.produced:,} records of the quiet windows "
               f"({quiet.seconds:.0f} s) over {limit_s:g} s or never handled{worst}: {100 * quiet.share:.2f}% "
               f"against {100 * expected:.2f}% from the service times alone")
    else:
        findings.append(Finding(condition="quiet-over-limit", grade=Grade.OK, text=f"no quiet window to judge the "
                                f"members by ({quiet.seconds:.0f} s, {quiet.produced} records)"))

    host = evidence.host
    if host is not None:
        figures.update(cpu_pressure_pct=host.pressure_pct, steal_pct=host.steal_pct, busy_pct=host.busy_pct,
                       load1=host.load1, cores=host.cores, member_running=host.member_running,
                       member_waiting=host.member_waiting)
        members = ("" if host.member_waiting is None else f"; the members' threads: {host.member_running:.1f} "
                   f"running and {host.member_waiting:.1f} waiting for a CPU on average")
        if host.pressure_pct is not None:
            graded("cpu-pressure", host.pressure_pct, f"a task waited for a CPU {host.pressure_pct:.0f}% of the time "
                   f"(load {host.load1:.1f} on {host.cores} cores, CPU busy {host.busy_pct:.0f}%{members})")
        if host.steal_pct is not None:
            graded("steal", host.steal_pct, f"{host.steal_pct:.1f}% of the CPU stolen")
    if evidence.broker_lag_ms is not None:
        figures["broker_lag_s"] = round(evidence.broker_lag_ms / 1000, 3)
        graded("broker-lag", evidence.broker_lag_ms / 1000,
               f"the brokers' event loop lagged at most {evidence.broker_lag_ms / 1000:.2f} s")

    for wave in evidence.waves:
        if wave.latest_s is None:
            continue
        late = wave.latest_s     # each member against its own due time, its declared offset included
        figures.setdefault("join_late_s", {})[wave.step] = round(late, 3)
        how = "" if evidence.waves_recorded else " (read off its phase mark: the run did not record its wave)"
        spread = f" (declared spread {wave.declared_spread_s:g} s)" if wave.declared_spread_s else ""
        graded("join-late", late, f"{wave.step}: {wave.started} members joined{spread}, the latest {late:.2f} s "
               f"after it was due{how}")

    for step in evidence.timed_out_waits:
        findings.append(Finding(condition="stable-wait", grade=Grade.INVALID,
                                text=f"step {step} went ahead without a stable group (its wait timed out): the "
                                     "change it measures overlaps the one before it"))
    if evidence.warmup_timed_out:
        findings.append(Finding(condition="stable-wait", grade=Grade.INVALID,
                                text="the warm-up timed out: the timeline began before the group was stable"))
    for note in evidence.notes:
        findings.append(Finding(condition="run", grade=Grade.INVALID, text=note))

    grade = max((finding.grade for finding in findings), key=lambda g: g.rank, default=Grade.OK)
    return Conditions(grade=grade, findings=tuple(findings), figures=figures)


def steady_share(evidence: RunEvidence) -> float:
    """The share of records over the limit that the declared service times give on their own: one member's
    queue on an ideal host (Lindley's recursion), records arriving evenly at its share of the producer's rate
    (the producer deals them round-robin over the partitions), each handled for a time drawn from the workload."""
    workload = evidence.workload
    rate, members = workload.get("offered_per_s") or 0.0, workload.get("busy_members") or 0
    spec_fields = {key: value for key, value in workload.items() if key in WorkloadSpec.__dataclass_fields__}
    if not rate or not members or not spec_fields:
        return 0.0
    spec = WorkloadSpec.from_json(spec_fields)
    if spec.service == "none":
        return 0.0
    from experiments.run.handling import ServiceTimes

    times = ServiceTimes(spec, seed=0, member="steady-model")
    gap_s, limit_s = members / rate, evidence.latency_limit_ms / 1000
    wait, over = 0.0, 0
    for _ in range(_MODEL_RECORDS):
        service = times.next_s()
        over += wait + service > limit_s
        wait = max(0.0, wait + service - gap_s)
    return over / _MODEL_RECORDS if math.isfinite(wait) else 1.0


def describe_thresholds() -> list[str]:
    """Each threshold in a line, for docs and help texts."""
    return [f"{t.name}: {t.measure}; suspect from {t.suspect:g}, invalid from {t.invalid:g}. {t.reason}."
            for t in THRESHOLDS.values()]
