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
    count,
    findings,
    names,
    seconds,
)
from experiments.report.page import Block, Detail, Figure, Section, Table
from experiments.report.run_tables import (
    checks_table,
    herd_detail,
    herd_tables,
    hidden_line,
    hide_empty,
    key_numbers,
    metrics_table,
    strategy_table,
)
from experiments.report.scenario_runs import ScenarioRuns, reading_of, scenarios
from experiments.summary.herd_sizes import size_text, sizes_of
from experiments.summary.read_back import RunData, from_summary, herd_points, load_run
from experiments.summary.verdict_words import Word

if TYPE_CHECKING:
    from experiments.summary.run_summary import RunSummary

TITLE = "Rebalance Lab report"
FINDINGS_TITLE = "What these runs show"


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
        numbers, hidden = hide_empty(key_numbers(scenario))
        blocks.append(Block(tables=[Table(title="Key numbers", frame=numbers, hidden=hidden_line(hidden),
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
        phases, hidden = hide_empty(strategy_table(runs, names_), keys=2)
        phase_tables.append(Table(title=heading, frame=phases, hidden=hidden_line(hidden)))
        metrics, hidden = hide_empty(metrics_table(runs, names_))
        if len(metrics) or hidden:
            metric_tables.append(Table(title=heading, frame=metrics, hidden=hidden_line(hidden)))
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
