"""The report of one or several summarised runs: report.html (self-contained), report.md and PNG charts.

Reads what `experiments.summary` wrote to RUN_DIR/summary/ (through `experiments.summary.read_back`) and writes,
in this order, in both the page and its Markdown twin:

1. "What these runs show": one generated paragraph per scenario (`experiments.report.findings`);
2. one section per scenario, a column per backend: the checks in compact words (`ok`, `VIOLATED (3)`,
   `protected (1)`, `unknown`; what each check looks for in its row header, the run's own line as the
   cell's tooltip; checks ok on every run folded into one line) beside the ownership charts; the key
   numbers beside the throughput chart; for a scenario swept over group sizes, the herd cost by N beside
   the herd curve;
3. per scenario, collapsed: the per-phase table, Kafka's rebalance metrics, the herd points, and the
   evidence of each finding. Rows that are zero or blank in every column are left out, and the table
   says how many.

Numbers: seconds to 0.1, milliseconds and counts whole, the unit in the row or column header.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from experiments.folders.report_folder import ReportFolder, report_dir
from experiments.folders.run_folder import RunFolder
from experiments.report import page
from experiments.report.findings import (
    Finding,
    ScenarioRuns,
    coordinator_gaps,
    count,
    findings,
    gap_text,
    herd_costs,
    names,
    reading_of,
    scenarios,
    seconds,
)
from experiments.report.page import Block, Cell, Detail, Figure, RowHeader, Section, Table, verdict_cell
from experiments.summary.herd_sizes import size_text, sizes_of
from experiments.summary.read_back import RunData, from_summary, herd_points, load_run
from experiments.summary.verdict_words import Word, question

if TYPE_CHECKING:
    from experiments.summary.run_summary import RunSummary

TITLE = "Rebalance Lab report"
FINDINGS_TITLE = "What these runs show"


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


def _hide_empty(frame: pd.DataFrame, keys: int = 1) -> tuple[pd.DataFrame, list[str]]:
    """The rows with something other than 0 or blank in a value column, and the names of those left out."""
    values = frame.columns[keys:]

    def empty(value: object) -> bool:
        label = page.text(value).strip()
        return label in ("", "0", "0.0", "-")

    keep = [not all(empty(row[column]) for column in values) for _, row in frame.iterrows()]
    hidden = [": ".join(page.text(row[key]) for key in frame.columns[:keys])
              for (_, row), kept in zip(frame.iterrows(), keep, strict=True) if not kept]
    return frame[keep].reset_index(drop=True), hidden


def _hidden_line(hidden: list[str], what: str = "rows") -> str:
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


# -- the report --------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Report:
    out_dir: Path
    markdown: Path
    html: Path
    images: list[Path]
    findings: list[Finding]


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower() or "scenario"


def _descriptions(runs: list[RunData]) -> dict[str, str]:
    """Each scenario's description, from its runs' records (a summary written before run.json kept the record
    whole says it only in the run's lock.json)."""
    found: dict[str, str] = {}
    for run in runs:
        if run.name in found:
            continue
        record = run.record
        if not record.scenario.resolved:
            try:
                record = RunFolder(run.run_dir).record() or record
            except (OSError, ValueError):
                pass
        found[run.name] = str(record.scenario.resolved.get("description") or "")
    return found


def write_report(run_dirs: list[Path], out_dir: Path | None = None) -> Report:
    runs = [load_run(run_dir) for run_dir in run_dirs]
    out_dir = out_dir or report_dir(run_dirs)
    out_dir.mkdir(parents=True, exist_ok=True)
    groups = scenarios(runs, _descriptions(runs))
    found = findings(groups)
    sections = [_section(scenario, runs, out_dir, several=len(groups) > 1,
                         herd_name="herd.png" if sum(group.swept for group in groups) <= 1 else None)
                for scenario in groups]
    meta = _meta_line(groups)
    paragraphs = [(f"{finding.scenario} ({finding.ran}):", finding.text) for finding in found]
    title = FINDINGS_TITLE if len(runs) > 1 else "What this run shows"
    folder = ReportFolder(out_dir)
    markdown = folder.markdown
    markdown.write_text("\n".join([f"# {TITLE}\n", meta + "\n", page.findings_markdown(title, paragraphs),
                                   *[page.section_markdown(section, out_dir) for section in sections],
                                   _runs_markdown(runs)]))
    html_path = folder.html
    html_path.write_text(page.page_html(TITLE, meta, page.findings_html(title, paragraphs),
                                        [page.section_html(section, out_dir) for section in sections],
                                        tail=_runs_html(runs)))
    images = [figure.path for section in sections for part in (*section.blocks, *section.details)
              for figure in part.figures]
    return Report(out_dir=out_dir, markdown=markdown, html=html_path, images=images, findings=found)


def _meta_line(groups: list[ScenarioRuns]) -> str:
    total = sum(len(scenario.runs) for scenario in groups)
    parts = []
    for scenario in groups:
        sizes = f" at N = {', '.join(map(str, scenario.sizes))}" if scenario.swept else ""
        parts.append(f"{scenario.name} on {names(scenario.columns)}{sizes}")
    return f"{total} run{'s' if total != 1 else ''}: " + "; ".join(parts) + "."


def _section(scenario: ScenarioRuns, all_runs: list[RunData], out_dir: Path | None, *, several: bool,
             herd_name: str | None = "herd.png") -> Section:
    """A scenario's section: blocks of tables with their charts, then collapsed detail. Without `out_dir`
    no chart is drawn (a run's summary.md). The herd chart is `herd_name` (herd.png, which
    `demo --publish` copies), or named for the scenario where a report has several sweeps."""
    from experiments.report import plots

    suffix = f"-{_slug(scenario.name)}" if several else ""
    limit_s = scenario.runs[0].latency_limit_ms / 1000
    ownership = []
    for run in scenario.runs:
        if len(run.ownership) and out_dir is not None:
            index = all_runs.index(run)
            name = "ownership.png" if len(all_runs) == 1 else f"ownership-{index + 1}-{run.backend}.png"
            ownership.append(Figure(path=plots.ownership(run, out_dir / name),
                                    caption=f"{_run_name(scenario, run)}: who owned each partition when; red "
                                            "hatching is two members owning one partition at once, a gap a "
                                            "partition nobody consumed."))
    throughput = [Figure(path=plots.throughput(list(scenario.runs), out_dir / f"throughput{suffix}.png"),
                         caption="Records processed per second, a row per run: a dip is the group not consuming, "
                                 f"a shaded window a fault, an orange bar records over {limit_s:g} s or never handled.")
                  ] if out_dir is not None else []
    lag_png = plots.lag(list(scenario.runs), out_dir / f"lag{suffix}.png") if out_dir is not None else None
    if lag_png is not None:
        throughput.append(Figure(path=lag_png, caption="Consumer lag per second, a row per run: records produced "
                                                       "but not yet taken, all partitions and the one that lags most."))
    checks = checks_table(scenario)
    blocks: list[Block] = []
    details: list[Detail] = []
    if scenario.swept:
        herd_png = plots.herd(herd_points(list(scenario.runs)), out_dir / (herd_name or f"herd{suffix}.png"),
                              list(scenario.runs)) if out_dir else None
        figures = [Figure(path=herd_png, caption="Requests per join (filled) and leave (hollow) against group size, "
                                                 "log-log, with the fitted model of the join: the steeper line is "
                                                 "the rebalancer whose cost grows faster.")] if herd_png else []
        blocks.append(Block(tables=herd_tables(scenario), figures=figures))
        blocks.append(Block(tables=[checks]))
        details.append(Detail(summary="The herd points: every measure per group size and backend",
                              tables=[Table(title="", frame=herd_detail(scenario))]))
        if out_dir is not None:
            details.append(Detail(summary=f"Records per second and partition ownership, {len(scenario.runs)} runs",
                                  figures=[*throughput, *ownership]))
    else:
        blocks.append(Block(tables=[checks], figures=ownership))
        numbers, hidden = _hide_empty(key_numbers(scenario))
        blocks.append(Block(tables=[Table(title="Key numbers", frame=numbers, hidden=_hidden_line(hidden),
                                          note="A column per backend" + (" (the median of its runs)"
                                                                         if scenario.runs_per_cell > 1 else "") + ".")],
                            figures=throughput))
    details += _detail_tables(scenario)
    intro = scenario.description
    return Section(title=scenario.name, anchor=f"scenario-{_slug(scenario.name)}", intro=intro, blocks=blocks,
                   details=details)


def _run_name(scenario: ScenarioRuns, run: RunData) -> str:
    column = scenario.column(run)
    return f"{column}, {size_text(run)}" if scenario.swept else column


def _by_size(scenario: ScenarioRuns) -> list[tuple[str, list[RunData], list[str]]]:
    """(heading, runs, column names): one group per group size when swept, else the whole scenario."""
    if not scenario.swept:
        return [("", list(scenario.runs), _column_names(scenario, list(scenario.runs)))]
    groups: dict[str, list[RunData]] = {}   # a sweep inside one run is a group of its own (`N = 4 to 32`)
    for run in sorted(scenario.runs, key=sizes_of):
        groups.setdefault(size_text(run), []).append(run)
    return [(heading, runs, _column_names(scenario, runs)) for heading, runs in groups.items()]


def _column_names(scenario: ScenarioRuns, runs: list[RunData]) -> list[str]:
    names_ = [scenario.column(run) for run in runs]
    if len(set(names_)) < len(names_):   # repeated runs of one column: number them
        seen: dict[str, int] = {}
        numbered = []
        for name in names_:
            seen[name] = seen.get(name, 0) + 1
            numbered.append(f"{name} #{seen[name]}")
        return numbered
    return names_


def _detail_tables(scenario: ScenarioRuns) -> list[Detail]:
    """Collapsed: per phase, Kafka's rebalance metrics, and the evidence of what the checks found."""
    phase_tables, metric_tables = [], []
    for heading, runs, names_ in _by_size(scenario):
        phases, hidden = _hide_empty(strategy_table(runs, names_), keys=2)
        phase_tables.append(Table(title=heading, frame=phases, hidden=_hidden_line(hidden)))
        metrics, hidden = _hide_empty(metrics_table(runs, names_))
        if len(metrics) or hidden:
            metric_tables.append(Table(title=heading, frame=metrics, hidden=_hidden_line(hidden)))
    limit_s = scenario.runs[0].latency_limit_ms / 1000
    details = [Detail(summary=f"Per phase: records over {limit_s:g} s or never handled, max end-to-end latency, time rebalancing, "
                              "consumer lag, duplicates, double ownership",
                      lines=[f"Records over {limit_s:g} s or never handled: a record handled more than {limit_s:g} s "
                             "after it was produced counts, as does a record never processed (the `lost-records` check counts "
                             "only those never processed); a record belongs to the phase it was produced in. Time "
                             "rebalancing: while at least one member was rebalancing. Consumer lag: the largest of "
                             "any partition (log end offset minus the position), Kafka's records-lag-max of the "
                             "member that lags most (docs/seed002.md)."], tables=phase_tables)]
    if metric_tables:
        details.append(Detail(summary="Rebalance metrics (Kafka's consumer metric names, whole group: "
                                      "`rebalance-total` counts every member's completed rebalances)",
                              tables=metric_tables))
    evidence = _evidence(scenario)
    if evidence.tables or evidence.lines:
        details.append(evidence)
    return details


def _evidence(scenario: ScenarioRuns) -> Detail:
    """What each check found and where: the run's own line, and the first rows of its evidence."""
    lines, tables = [], []
    for run in scenario.runs:
        name = _run_name(scenario, run)
        for check in scenario.checks():
            reading = reading_of(run, check)
            if reading is None or reading.word is Word.OK:
                continue
            lines.append(f"{name}, {check}: {reading.line}")
            frame = run.evidence.get(check)
            if frame is not None and len(frame):
                tables.append(Table(title=f"Evidence: {check} ({name})", frame=_evidence_frame(frame.head(10)),
                                    note=f"The first {min(len(frame), 10)} of {len(frame)} rows kept; times in "
                                         "seconds since the run started."))
    return Detail(summary="Evidence: what each check found, where and when", lines=lines, tables=tables)


def _evidence_frame(frame: pd.DataFrame) -> pd.DataFrame:
    shown = frame.copy()
    for column in shown.columns:
        values = shown[column]
        if pd.api.types.is_float_dtype(values):
            show = count if column.endswith("_ms") or values.dropna().apply(float.is_integer).all() else seconds
            shown[column] = [show(value) if not pd.isna(value) else "" for value in values]
        elif values.map(lambda value: hasattr(value, "tolist")).any():
            shown[column] = [", ".join(map(str, value.tolist())) if hasattr(value, "tolist") else str(value)
                             for value in values]
    return shown


def _runs_rows(runs: list[RunData]) -> list[str]:
    return [f"{run.label}: {run.run_dir}" for run in runs]


def _runs_html(runs: list[RunData]) -> str:
    import html

    items = "".join(f"<li>{html.escape(line)}</li>" for line in _runs_rows(runs))
    return f"<details class=section><summary>The {len(runs)} runs and their folders</summary><ul>{items}</ul></details>"


def _runs_markdown(runs: list[RunData]) -> str:
    return ("<details><summary>The runs and their folders</summary>\n\n" + "\n".join(
        f"- {line}" for line in _runs_rows(runs)) + "\n\n</details>\n")


def run_summary_markdown(run: RunData, facts_line: str) -> str:
    """A run's summary.md in the report's order: what the run shows, its checks and key numbers, then the
    detail (per phase, rebalance metrics, membership changes, evidence), without charts."""
    (scenario,) = scenarios([run])
    finding = findings([scenario])[0]
    section = _section(scenario, [run], None, several=False)
    herd = run.herd
    if len(herd):
        section.details.insert(2, Detail(summary="Membership changes: what each cost the group",
                                         tables=[Table(title="", frame=_evidence_frame(herd))]))
    section.title = "The run"
    return "\n".join([f"# Summary of {scenario.name}\n", facts_line + "\n",
                      page.findings_markdown("What this run shows", [(f"{finding.ran}:", finding.text)]),
                      page.section_markdown(section, run.run_dir)])


def summary_markdown(summary: RunSummary) -> str:
    """summary.md: what the run shows, its checks and key numbers, then the detail (the report's order)."""
    record, facts = summary.record, summary.facts
    line = (f"backend **{record.backend}**, strategy **{record.strategy}**, {record.members} members, "
            f"{facts.partitions} partitions, {facts.events:,} events over {facts.duration_s:.1f} s"
            + (f", {facts.unreadable_lines} unreadable lines skipped" if facts.unreadable_lines else ""))
    return run_summary_markdown(from_summary(summary), line)


def write_summary_markdown(summaries: Iterable[RunSummary]) -> None:
    """Each summarised run's RUN_DIR/summary/summary.md, beside the Parquet tables the summary wrote."""
    for summary in summaries:
        summary.folder.summary_markdown.write_text(summary_markdown(summary))
