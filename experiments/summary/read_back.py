"""One summarised run as the report and the plots read it back from RUN_DIR/summary/ (pandas only, no Spark)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.folders.run_folder import RunFolder
from experiments.folders.run_record import RunRecord
from experiments.summary import checks
from experiments.summary.run_summary import RunSummary, SummaryFacts, read_summary_record
from rebalance import events as ev
from rebalance.backends import canonical_name
from rebalance.command_line import command


@dataclass(frozen=True, kw_only=True)
class RunData:
    """One run's summary as read back from RUN_DIR/summary/."""

    run_dir: Path
    record: RunRecord
    facts: SummaryFacts
    verdicts: pd.DataFrame
    phases: pd.DataFrame
    throughput: pd.DataFrame
    ownership: pd.DataFrame
    faults: pd.DataFrame
    herd: pd.DataFrame
    metrics: pd.DataFrame
    evidence: dict[str, pd.DataFrame]
    lag: pd.DataFrame = field(default_factory=pd.DataFrame)   # per second: lag_max, lag_total (summary.lag)

    @property
    def backend(self) -> str:
        return canonical_name(self.record.backend or "unknown")   # an older summary may say `modern`

    @property
    def name(self) -> str:
        return self.record.name or self.run_dir.name

    @property
    def strategy(self) -> str:
        return self.record.strategy

    @property
    def label(self) -> str:
        size = f", N={self.group_size}" if self.group_size else ""
        return f"{self.name} ({self.backend}, {self.strategy or '?'}{size})"

    @property
    def short_label(self) -> str:
        return f"{self.backend}/{self.strategy or '?'}"

    @property
    def group_size(self) -> int | None:
        return self.record.members

    @property
    def latency_limit_ms(self) -> int:
        return self.facts.latency_limit_ms

    @property
    def double(self) -> pd.DataFrame:
        return self.evidence.get(checks.DOUBLE_OWNERSHIP.name, pd.DataFrame(columns=["tp", "start", "end", "duration_s"]))

    def herd_changes(self) -> pd.DataFrame:
        """Changes to a group of the run's size N (its join and leave) made by the scenario's timeline: not
        its formation, nor the teardown's leaves (a host of members stopping at once)."""
        herd = herd_columns(self.herd)
        if herd.empty or self.group_size is None:
            return herd
        start, end = scenario_window(self.phases)
        return herd[(herd["live_before"] >= self.group_size) & (herd["live_after"] > 0)
                    & (herd["t"] >= start) & (herd["t"] < end)]


def herd_columns(herd: pd.DataFrame) -> pd.DataFrame:
    """A herd table read back; one written before the column was named for what it measures says `stable_s`."""
    return herd.rename(columns={"stable_s": "last_assignment_s"}) if "stable_s" in herd else herd


def scenario_window(phases: pd.DataFrame | None) -> tuple[float, float]:
    """From the end of the warm-up to the start of the teardown: the changes the scenario's timeline made.
    The members' first joins (warm-up, several at a time when a host starts) and the last leaves
    (teardown) are not what a herd experiment measures."""
    if phases is None or phases.empty or "phase" not in phases:
        return -math.inf, math.inf
    timeline = phases[~phases["phase"].isin([str(phase) for phase in ev.OUTSIDE_TIMELINE])]
    teardown = phases[phases["phase"] == ev.RunnerPhase.TEARDOWN]
    start = float(timeline["start_s"].min()) if len(timeline) else -math.inf
    end = float(teardown["start_s"].min()) if len(teardown) else math.inf
    return start, end


def load_run(run_dir: Path) -> RunData:
    folder = RunFolder(run_dir)
    if not folder.summary_record.exists():
        raise FileNotFoundError(f"{run_dir}: no summary yet (run `{command(f'summarize {run_dir}')}`)")
    record, facts = read_summary_record(folder)

    def table(name: str) -> pd.DataFrame:
        path = folder.summary_table(name)
        return pd.read_parquet(path) if path.exists() else pd.DataFrame()

    evidence = {path.stem: pd.read_parquet(path) for path in sorted(folder.evidence.glob("*.parquet"))}
    return RunData(run_dir=Path(run_dir), record=record, facts=facts, verdicts=table("verdicts"),
                   phases=table("phases"), throughput=table("throughput"), ownership=table("ownership"),
                   faults=table("faults"), herd=herd_columns(table("herd")), metrics=table("rebalance_metrics"), evidence=evidence,
                   lag=table("lag"))


def from_summary(summary: RunSummary) -> RunData:
    """A RunSummary as the report reads it, before (or without) reading its files back."""
    empty = pd.DataFrame()
    tables = summary.tables
    return RunData(run_dir=summary.folder.path, record=summary.record, facts=summary.facts, verdicts=summary.verdicts(),
                   phases=tables.get("phases", empty), throughput=tables.get("throughput", empty),
                   ownership=tables.get("ownership", empty), faults=tables.get("faults", empty),
                   herd=tables.get("herd", empty), metrics=tables.get("rebalance_metrics", empty),
                   evidence={check.check: check.evidence for check in summary.checks if len(check.evidence)},
                   lag=tables.get("lag", empty))


def herd_points(runs: list[RunData]) -> pd.DataFrame:
    """One point per run and group size (a sweep inside one run gives one per size, herd_sizes.by_size):
    group size N and the median cost of a change to a group of (about) N."""
    from experiments.summary.herd_sizes import by_size

    rows = []
    for run in by_size(runs):
        changes = run.herd_changes()
        if run.group_size is None or changes.empty:
            continue
        rows.append({
            "run": run.label, "backend": run.backend, "strategy": run.strategy,
            "N": run.group_size, "changes": len(changes),
            "requests_per_change": float(changes["requests"].median()),
            # the servers' own count (NaN for runs recorded before the servers' counters were)
            "server_requests_per_change": float(changes["server_requests"].median())
            if "server_requests" in changes and changes["server_requests"].notna().any() else float("nan"),
            "notifications_per_change": float(changes["notifications"].median()),
            "last_assignment_s": _median(changes["last_assignment_s"]),
            "settled_s": _median(changes["settled_s"]) if "settled_s" in changes else float("nan"),
            "stop_the_world_s": _median(changes["stop_the_world_s"]),
            "failed_attempts": int(changes["failed_attempts"].sum()),
        })
    return pd.DataFrame(rows)


def _median(values: pd.Series) -> float:
    """The median of what was measured; NaN (quietly) when nothing was, e.g. a change never stable."""
    measured = values.dropna()
    return float(measured.median()) if len(measured) else float("nan")


def herd_slopes(points: pd.DataFrame) -> dict[str, float]:
    """Per backend, the slope of requests per change against N on log-log axes (about 1: grows as N,
    about 2: as N squared); a backend needs two group sizes to have one."""
    slopes = {}
    for backend, group in points.groupby("backend"):
        if group["N"].nunique() >= 2:
            cost = group["requests_per_change"].clip(lower=0.5)
            slopes[str(backend)] = float(np.polyfit(np.log(group["N"]), np.log(cost), 1)[0])
    return slopes
