"""The tables of a run report, each from the runs' summaries read back (experiments.summary.read_back): the
checks in words, the per-phase table in seed 002's names and units, Kafka's rebalance metrics, the key numbers of
a scenario, and the herd's costs by group size. `experiments.report.run_report` lays them out on the page."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import pandas as pd

from experiments.report import page
from experiments.report.findings import (
    coordinator_gaps,
    count,
    gap_text,
    herd_costs,
    seconds,
)
from experiments.report.page import Cell, RowHeader, Table, verdict_cell
from experiments.report.scenario_runs import ScenarioRuns, reading_of, scenarios
from experiments.summary.herd_sizes import size_text
from experiments.summary.read_back import RunData, herd_points
from experiments.summary.verdict_words import Word, question

if TYPE_CHECKING:
    pass


def swept_runs(runs: list[RunData]) -> list[RunData]:
    """The runs of scenarios run at two or more group sizes (a herd sweep), when there are any: a demo's
    split-brain runs are not points of its herd curve. Without a sweep, every run."""
    swept = [run for scenario in scenarios(runs) if scenario.swept for run in scenario.runs]
    return [run for run in runs if run in swept] if swept else runs


# -- tables ------------------------------------------------------------------------------------

def verdict_table(runs: list[RunData]) -> pd.DataFrame:
    """Every check of every run, a column per backend of one scenario (per run otherwise): each cell the
    compact label (`ok`, `VIOLATED (3)`, ...) as a `page.Cell` whose tooltip is the run's own line."""
    groups = scenarios(runs)
    columns: dict[str, list[Cell]] = {}
    checks = list(dict.fromkeys(check for scenario in groups for check in scenario.checks()))
    for scenario in groups:
        for column in scenario.columns:
            name = column if len(groups) == 1 else f"{scenario.name} {column}"
            columns[name] = [verdict_cell(scenario.reading(check, column)) for check in checks]
    return pd.DataFrame({"check": [RowHeader(check, question(check)) for check in checks], **columns})


def hide_empty(frame: pd.DataFrame, keys: int = 1) -> tuple[pd.DataFrame, list[str]]:
    """The rows with something other than 0 or blank in a value column, and the names of those left out."""
    values = frame.columns[keys:]

    def empty(value: object) -> bool:
        label = page.text(value).strip()
        return label in ("", "0", "0.0", "-")

    keep = [not all(empty(row[column]) for column in values) for _, row in frame.iterrows()]
    hidden = [": ".join(page.text(row[key]) for key in frame.columns[:keys])
              for (_, row), kept in zip(frame.iterrows(), keep, strict=True) if not kept]
    return frame[keep].reset_index(drop=True), hidden


def hidden_line(hidden: list[str], what: str = "rows") -> str:
    if not hidden:
        return ""
    shown = "; ".join(hidden[:6]) + ("; ..." if len(hidden) > 6 else "")
    return f"{len(hidden)} {what if len(hidden) != 1 else what.rstrip('s')} hidden, zero or blank everywhere: {shown}"


_PHASE_MEASURES = [   # (row title with its unit, phases column, scale, format): seed 002's names and units first
    ("records over {limit} s or never handled", "records_lost", 1, count),
    ("max end-to-end latency, ms", "max_latency_ms", 1, count),
    ("time rebalancing, ms", "rebalance_ms", 1, count),
    ("max consumer lag, records", "max_lag", 1, count),
    ("duplicates", "duplicates", 1, count),
    ("double ownership, s", "double_ownership_s", 1, seconds),
]


def strategy_table(runs: list[RunData], names_: list[str] | None = None) -> pd.DataFrame:
    """Seed 002's table: per phase, records over the latency limit (or never processed), the maximum end-to-end
    latency and the time spent rebalancing, in the article's words and units; the largest consumer lag,
    duplicates and double ownership; then the totals. A column per run (`names_`), and where the scenario
    declares a `[reference]`, its figures first (a column per strategy of the runs) under its phase names."""
    from experiments.report.reference_rows import (
        ARTICLE_PHASES_TOTAL,
        WHOLE_TIMELINE,
        article_column,
        figure_text,
        phase_label,
        run_reference,
    )
    from experiments.scenario.reference import MEASURES

    names_ = names_ or [run.short_label for run in runs]
    reference = run_reference(runs[0].run_dir) if runs else None
    strategies = [strategy for strategy in dict.fromkeys(run.strategy for run in runs)
                  if reference and strategy in reference.figures]
    phases = list(dict.fromkeys(name for run in runs for name in run.phases.get("phase", [])))
    limit_s = runs[0].latency_limit_ms / 1000 if runs else 3
    rows: list[dict] = []
    for phase in phases:
        article = reference.name_of(phase) if reference else None
        for index, (title, column, scale, show) in enumerate(_PHASE_MEASURES):
            row: dict[str, object] = {"phase": phase_label(reference, phase),
                                      "measure": title.format(limit=f"{limit_s:g}")}
            for strategy in strategies:
                row[article_column(strategy)] = figure_text(reference.figure(strategy, article, MEASURES[index])) \
                    if article and index < len(MEASURES) else ""
            for name, run in zip(names_, runs, strict=True):
                match = run.phases[run.phases["phase"] == phase] if len(run.phases) else run.phases
                value = match[column].iloc[0] if len(match) and column in match else None
                row[name] = "" if value is None or pd.isna(value) else show(float(value) * scale)
            rows.append(row)
    over = f"records over {limit_s:g} s or never handled"
    totals = []
    if reference and strategies:
        lab_phases = [lab for _, lab in reference.phases]
        article_total = {"phase": ARTICLE_PHASES_TOTAL, "measure": over,
                         **{article_column(strategy): figure_text(reference.totals.get(strategy))
                            for strategy in strategies}}
        for name, run in zip(names_, runs, strict=True):
            played = run.phases[run.phases["phase"].isin(lab_phases)] if len(run.phases) else run.phases
            article_total[name] = count(played["records_lost"].sum()) if len(played) else ""
        totals.append(article_total)
    produced: dict[str, object] = {"phase": WHOLE_TIMELINE, "measure": "records produced"}
    total: dict[str, object] = {"phase": WHOLE_TIMELINE, "measure": over}
    for name, run in zip(names_, runs, strict=True):
        produced[name] = count(run.phases["produced"].sum()) if len(run.phases) else ""
        total[name] = count(run.phases["records_lost"].sum()) if len(run.phases) else ""
    return pd.DataFrame([*rows, *totals, produced, total])


def metrics_table(runs: list[RunData], names_: list[str] | None = None) -> pd.DataFrame:
    """Kafka's consumer rebalance metrics for the whole group, a row per metric and a column per run;
    latencies in whole milliseconds."""
    names_ = names_ or [run.short_label for run in runs]
    columns: dict[str, dict[str, str]] = {}
    for name, run in zip(names_, runs, strict=True):
        group = run.metrics[run.metrics["member"] == "(group)"] if len(run.metrics) else pd.DataFrame()
        if len(group):
            row = group.iloc[0].drop("member")
            columns[name] = {metric: count(value) for metric, value in row.items()}
    if not columns:
        return pd.DataFrame()
    metrics = list(dict.fromkeys(metric for values in columns.values() for metric in values))
    return pd.DataFrame({"metric (ms, or a count)": metrics,
                         **{name: [values.get(metric, "") for metric in metrics] for name, values in columns.items()}})


def key_numbers(scenario: ScenarioRuns) -> pd.DataFrame:
    """The scenario's numbers a reader compares first, a column per backend (the median where a column has
    several runs): records, time rebalancing, latency, double ownership, and what its membership changes cost."""
    limit_s = scenario.runs[0].latency_limit_ms / 1000
    measures = [
        ("records produced", count, lambda run: run.phases["produced"].sum()),
        (f"records over {limit_s:g} s or never handled", count, lambda run: run.phases["records_lost"].sum()),
        ("double ownership, s", seconds, lambda run: run.phases["double_ownership_s"].sum()),
        # members' rebalances that overlap merged into one: the group's count, not Kafka's per-member
        # `rebalance-total` (in the rebalance metrics) nor the live display's member rebalances
        ("group rebalance episodes (overlapping member rebalances merged)", count,
         lambda run: run.phases["rebalances"].sum()),
        ("time rebalancing, s", seconds, lambda run: run.phases["rebalance_ms"].sum() / 1000),
        ("max latency, s", seconds, lambda run: run.phases["max_latency_ms"].max() / 1000),
        ("last assignment after a change, s (median)", seconds,
         lambda run: run.herd_changes()["last_assignment_s"].median()),
        ("group settled after a change, s (median)", seconds, lambda run: _settled(run.herd_changes())),
        ("partition-seconds unowned", seconds,
         lambda run: run.herd_changes()["unowned_partition_s"].sum()),
        ("requests per change, joins and leaves together (median)", count,
         lambda run: run.herd_changes()["requests"].median()),
        *((f"requests per {kind} (median)", count, _requests_per(kind)) for kind in HERD_KINDS),
    ]
    rows = []
    for title, show, measure in measures:
        row: dict[str, object] = {"measure": title}
        for column in scenario.columns:
            values = [_safe(measure, run) for run in scenario.runs_of(column)]
            values = [value for value in values if value is not None]
            numbers = [value for value in values if not isinstance(value, str)]
            row[column] = (show(float(pd.Series(numbers).median())) if numbers
                           else values[0] if values else "")   # "never": no run of the column settled
        rows.append(row)
    gaps = {column: coordinator_gaps(scenario.runs_of(column)) for column in scenario.columns}
    if any(gaps.values()):   # where the scenario took the coordinator away: each run's group maximum
        rows.append({"measure": "longest time without a coordinator, s (coordinator_gap_s)",
                     **{column: gap_text(values).removesuffix(" s").replace(" s,", ",") if values else ""
                        for column, values in gaps.items()}})
    slopes = {column: [run.facts.memory_slope_mb_per_min for run in scenario.runs_of(column)
                       if run.facts.memory_slope_mb_per_min is not None] for column in scenario.columns}
    if any(slopes.values()):   # a run long enough to judge: the process whose memory grew fastest
        rows.append({"measure": "steepest memory growth over the second half, MB/min",
                     **{column: f"{max(values):.2f}" if values else "" for column, values in slopes.items()}})
    return pd.DataFrame(rows)


HERD_KINDS = ("join", "leave")   # a herd scenario's changes, whose costs differ: apart in the key numbers


def _requests_per(kind: str):
    """The median requests of one kind of change (a join or a leave), or None where the run made none."""
    def measure(run: RunData) -> float | None:
        changes = run.herd_changes()
        chosen = changes[changes["kind"] == kind]["requests"] if "kind" in changes else pd.Series(dtype=float)
        return None if chosen.empty else float(chosen.median())
    return measure


def _settled(changes: pd.DataFrame) -> float | str | None:
    """The median time to a settled group over the changes, or "never" when none of them settled."""
    if "settled_s" not in changes or changes.empty:
        return None
    settled = changes["settled_s"]
    return "never" if settled.isna().all() else float(settled.median())


def _safe(measure, run: RunData) -> float | str | None:
    try:
        value = measure(run)
    except (KeyError, AttributeError, TypeError):
        return None
    if isinstance(value, str):
        return value
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def checks_table(scenario: ScenarioRuns) -> Table:
    """The scenario's checks, a column per backend; the checks ok on every run folded into one line."""
    shown, folded = [], []
    for check in scenario.checks():
        cells = {}
        for column in scenario.columns:
            reading = scenario.reading(check, column)
            title = None
            if reading is not None and scenario.swept:   # one tooltip line per group size
                title = "; ".join(f"{size_text(run)}: {line.line}" for run in scenario.runs_of(column)
                                  if (line := reading_of(run, check)) is not None)
            cells[column] = verdict_cell(reading, title)
        readings = [scenario.reading(check, column) for column in scenario.columns]
        if all(reading is not None and reading.word is Word.OK for reading in readings):
            folded.append((check, question(check) or readings[0].meaning))
            continue
        shown.append({"check": RowHeader(check, question(check)), **cells})
    runs = "every run" if len(scenario.runs) > 1 else "the run"
    line = (f"{'All ' if not shown else ''}{len(folded)} check{'s' if len(folded) != 1 else ''} ok on {runs}"
            if folded else "")
    frame = pd.DataFrame(shown, columns=["check", *scenario.columns]) if shown else pd.DataFrame()
    note = ("VIOLATED (n): found n times; protected (n): a protection fired n times; unknown: the log cannot "
            "tell. Point at a cell for what the run found.") if shown else ""
    return Table(title="Checks", frame=frame, note=note, folded=(line, folded) if folded else None)


def herd_tables(scenario: ScenarioRuns) -> list[Table]:
    """The herd cost by group size (rows) and line (columns: the backend, with the strategy its runs used):
    requests per join, and per leave; a change that overlapped another is starred."""
    by_column = {column: herd_costs(scenario.runs_of(column)) for column in scenario.columns}
    by_column = {column: costs for column, costs in by_column.items() if len(costs)}
    if not by_column:
        return [Table(title="Cost of a membership change", frame=pd.DataFrame(),
                      note="No membership change to a group of N was measured.")]
    costs = pd.concat([costs.assign(column=column) for column, costs in by_column.items()], ignore_index=True)
    headers = {column: _herd_header(column, group) for column, group in costs.groupby("column", sort=False)}
    starred = bool(costs["overlapped"].any())
    tables = []
    for index, kind in enumerate(kind for kind in ("join", "leave", "crash") if kind in set(costs["kind"])):
        mine = costs[costs["kind"] == kind]
        rows = [{"group size N": f"N = {size}",
                 **{header: _starred(mine[(mine["N"] == size) & (mine["column"] == column)])
                    for column, header in headers.items()}}
                for size in sorted(mine["N"].unique())]
        notes = ["Requests: ZooKeeper operations (legacy), group API calls (classic), KIP-848 heartbeats that "
                 "joined, left or changed an assignment (kip848)."] if index == 0 else []
        if starred and index == 0:
            notes.append("*: the change overlapped another (the next began before it was stable); the cost model "
                         "leaves it out.")
        tables.append(Table(title=f"Requests per {kind}", frame=pd.DataFrame(rows), note=" ".join(notes)))
    return tables


def _herd_header(column: str, costs: pd.DataFrame) -> str:
    """A herd table's column: `kip848 (uniform)`; a column that names its strategy already keeps its name."""
    strategies = sorted(set(costs["strategy"]) - {""})
    return column if "/" in column or not strategies else f"{column} ({', '.join(strategies)})"


def _starred(found: pd.DataFrame) -> str:
    if found.empty:
        return ""
    return count(found["requests"].iloc[0]) + ("*" if found["overlapped"].iloc[0] else "")


def herd_detail(scenario: ScenarioRuns) -> pd.DataFrame:
    """Every herd point: a row per (N, measure), a column per backend."""
    points = pd.concat([herd_points(scenario.runs_of(column)).assign(column=column) for column in scenario.columns],
                       ignore_index=True)
    if points.empty:
        return pd.DataFrame()
    measures = [("changes", "changes", count), ("requests per change", "requests_per_change", count),
                ("as the servers counted them", "server_requests_per_change", count),
                ("notifications per change", "notifications_per_change", count),
                ("last assignment after, s", "last_assignment_s", seconds),
                ("settled after, s", "settled_s", seconds), ("stop-the-world, s", "stop_the_world_s", seconds),
                ("failed attempts", "failed_attempts", count)]
    rows = []
    for size in sorted(points["N"].unique()):
        # several runs of one backend at one size (repetitions, or several partition counts): their median
        at = points[points["N"] == size].groupby("column").median(numeric_only=True)
        for title, column, show in measures:
            row: dict[str, object] = {"N": f"N = {int(size)}", "measure": title}
            for line in scenario.columns:
                value = at.at[line, column] if line in at.index and column in at else None
                row[line] = "" if value is None or pd.isna(value) else show(float(value))
            rows.append(row)
    return pd.DataFrame(rows)
