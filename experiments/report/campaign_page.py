"""A campaign's report page and its Markdown twin, in the run report's order.

1. "What these runs show": a paragraph per scenario from the campaign's statistics (`findings.campaign_findings`):
   medians with their range, n, and the differences between backends that hold up;
2. a section per scenario, a column per backend (per backend and strategy where several ran): the herd's
   cost by group size beside the herd chart; the checks' counts beside their strip plots;
3. collapsed: the other herd measures, the per-phase figures, and the comparisons.

Every figure is `median [min-max]` over the cell's runs; `statistics/statistics.md` keeps every cell with its
interval of the median and that interval's real coverage; the difference of two cells' medians is labelled
with the coverage its interval has for any distributions ("≥", a bound).
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from experiments.folders.report_folder import ReportFolder
from experiments.report import page
from experiments.report.campaign_findings import (
    CAMPAIGN_CHECKS,
    campaign_columns,
    campaign_findings,
    metric_unit,
    spread_text,
)
from experiments.report.page import Block, Detail, Figure, RowHeader, Section, Table
from experiments.report.scenario_runs import backend_order
from experiments.statistics.inference import coverage_text
from experiments.statistics.measure_names import LATE_OR_LOST, measure_name

FINDINGS_TITLE = "What these runs show"
_HERD_KINDS = ("join", "leave", "crash")
_HERD_MAIN = "requests per change"
_CHECK_MEANING = {"double-ownership (s)": "seconds in which two members owned one partition",
                  "duplicates": "records processed more than once",
                  "offset regressions": "commits lower than an earlier one",
                  "fenced commits": "stale commits refused by the coordinator (a protection)"}


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()


def _columns(cells: pd.DataFrame) -> list[str]:
    return sorted(dict.fromkeys(cells["column"]), key=lambda column: backend_order(column.split("/")[0]))


def _spread(row) -> str:
    """`median [min-max]` of a cells row (a Series or an itertuples row)."""
    values = row._asdict() if hasattr(row, "_asdict") else row.to_dict()
    return spread_text(values["median"], values["min"], values["max"], unit=metric_unit(values["metric"]))


def _metric_table(cells: pd.DataFrame, metrics: list[str], columns: list[str], *, notes: dict[str, str] | None = None,
                  by_size: bool = False) -> tuple[pd.DataFrame, list[str]]:
    """Rows: metrics (or metric and N); a column per backend; each cell `median [min-max]`. Rows whose
    every cell is zero are left out and named."""
    rows, hidden = [], []
    keys = ([(metric, size) for metric in metrics for size in sorted(cells["group_size"].dropna().unique())]
            if by_size else [(metric, None) for metric in metrics])
    for metric, size in keys:
        mine = cells[(cells["metric"] == metric) & ((cells["group_size"] == size) if size is not None else True)]
        if mine.empty:
            continue
        label = measure_name(metric) if size is None else f"{measure_name(metric)}, N = {int(size)}"
        if (mine[["median", "min", "max"]].abs().max().max() or 0) == 0:
            hidden.append(label)
            continue
        row: dict[str, object] = {"measure": RowHeader(label, (notes or {}).get(metric, ""))}
        for column in columns:
            found = mine[mine["column"] == column]
            row[column] = _spread(found.iloc[0]) if len(found) else ""
        rows.append(row)
    return pd.DataFrame(rows, columns=["measure", *columns]) if rows else pd.DataFrame(), hidden


def _hidden(hidden: list[str]) -> str:
    if not hidden:
        return ""
    return (f"{len(hidden)} row{'s' if len(hidden) != 1 else ''} hidden, zero on every run: "
            + "; ".join(hidden[:6]) + ("; ..." if len(hidden) > 6 else ""))


def _herd_by_n(cells: pd.DataFrame, kind: str, columns: list[str]) -> pd.DataFrame:
    rows = cells[cells["metric"] == f"{kind}: {_HERD_MAIN}"]
    table = []
    for size in sorted(rows["group_size"].dropna().unique()):
        at = rows[rows["group_size"] == size]
        table.append({"group size N": f"N = {int(size)}",
                      **{column: (_spread(at[at["column"] == column].iloc[0]) if (at["column"] == column).any() else "")
                         for column in columns}})
    return pd.DataFrame(table)


def campaign_sections(cells: pd.DataFrame, compared: pd.DataFrame, images: list[Path]) -> list[Section]:
    cells = campaign_columns(cells)
    herd_image = next((image for image in images if image.name == "herd.png"), None)
    strips = {image.stem: image for image in images if image.name != "herd.png"}
    placed: set[str] = set()
    sections = []
    for scenario in dict.fromkeys(cells["scenario"]):
        mine = cells[cells["scenario"] == scenario]
        columns = _columns(mine)
        runs = mine["runs"]
        n = f"n = {int(runs.min())}" if runs.min() == runs.max() else f"n = {int(runs.min())}-{int(runs.max())}"
        blocks, details = [], []
        sizes = sorted(mine["group_size"].dropna().unique())
        swept = len(sizes) >= 2
        if swept and mine["metric"].str.endswith(_HERD_MAIN).any():
            tables = [Table(title=f"Requests per {kind}", frame=_herd_by_n(mine, kind, columns),
                            note="median [min-max] of the repetitions" if index == 0 else "")
                      for index, kind in enumerate(_HERD_KINDS) if (mine["metric"] == f"{kind}: {_HERD_MAIN}").any()]
            figures = []
            if herd_image is not None and "herd" not in placed:
                placed.add("herd")
                figures.append(Figure(path=herd_image, caption="Requests per change against group size, log-log, "
                                                              "median with a bar from min to max: the steeper line "
                                                              "grows faster with N."))
            blocks.append(Block(tables=tables, figures=figures))
            others = [metric for metric in dict.fromkeys(mine["metric"])
                      if metric.split(": ")[0] in _HERD_KINDS and not metric.endswith(_HERD_MAIN)]
            frame, hidden = _metric_table(mine, others, columns, by_size=True)
            details.append(Detail(summary="The herd's other measures per group size",
                                  tables=[Table(title="", frame=frame, hidden=_hidden(hidden))]))
        checks = [metric for metric in CAMPAIGN_CHECKS if (mine["metric"] == metric).any()]
        swept = len(sizes) >= 2
        frame, hidden = _metric_table(mine, checks, columns, notes=_CHECK_MEANING, by_size=swept)
        figures = []
        for metric in checks:
            image = strips.get(_slug(metric))
            if image is not None and metric not in placed and (mine[mine["metric"] == metric]["max"] > 0).any():
                placed.add(metric)
                figures.append(Figure(path=image, caption=f"{metric} in each run (dots) and the median (bar): "
                                                          "which differences hold up is decided by the exact test below."))
        if checks:
            blocks.append(Block(tables=[Table(title="What the checks counted", frame=frame,
                                              note=f"median [min-max] per cell, {n}" if len(frame) else "",
                                              hidden=_hidden(hidden))], figures=figures))
        phase_metrics = [metric for metric in dict.fromkeys(mine["metric"])
                         if metric not in CAMPAIGN_CHECKS and metric.split(": ")[0] not in _HERD_KINDS]
        if phase_metrics:
            frame, hidden = _metric_table(mine, phase_metrics, columns, by_size=swept)
            details.append(Detail(summary=f"Per phase: {LATE_OR_LOST}, max latency, time rebalancing",
                                  tables=[Table(title="", frame=frame, hidden=_hidden(hidden))]))
        held = compared[(compared["scenario"] == scenario) & compared["difference"]] if len(compared) else compared
        if len(held):
            shown = pd.DataFrame({
                "metric": [RowHeader(measure_name(r.metric), "" if r.sweep == "-" else str(r.sweep))
                           for r in held.itertuples()],
                "difference of medians (b - a) [interval, its coverage]": [
                    f"{spread_text(r.shift, r.shift, r.shift, unit=metric_unit(r.metric))} "
                    f"[{r.ci_low:,.1f}, {r.ci_high:,.1f}, {coverage_text(r.coverage, r.coverage_exact)}]"
                    for r in held.itertuples()],
                "reading": list(held["reading"])})
            details.append(Detail(summary=f"Differences that hold up ({len(held)}; exact test, false discovery "
                                          "rate 5% over the page)", tables=[Table(title="", frame=shown)]))
        sections.append(Section(title=scenario, anchor=f"scenario-{_slug(scenario)}",
                                intro=f"{', '.join(columns)}; {n} per cell.", blocks=blocks, details=details))
    return sections


def write_campaign_pages(out: Path, *, title: str, meta: str, cells: pd.DataFrame, compared: pd.DataFrame,
                         images: list[Path]) -> tuple[Path, Path]:
    """report.md and report.html in `out`; returns their paths."""
    found = campaign_findings(cells, compared)
    paragraphs = [(f"{finding.scenario} ({finding.ran}):", finding.text) for finding in found]
    sections = campaign_sections(cells, compared, images)
    pointer = ("Every cell with its interval of the median (and that interval's coverage), and every comparison: "
               "[statistics/statistics.md](../statistics/statistics.md).")
    folder = ReportFolder(out)
    markdown = folder.markdown
    markdown.write_text("\n".join([f"# {title}\n", meta + "\n", page.findings_markdown(FINDINGS_TITLE, paragraphs),
                                   *[page.section_markdown(section, out) for section in sections], pointer + "\n"]))
    html_path = folder.html
    tail = ("<p class=note>Every cell with its interval of the median (and that interval's coverage), and every "
            "comparison: "
            "<a href='../statistics/statistics.md'>statistics/statistics.md</a>.</p>")
    html_path.write_text(page.page_html(title, meta, page.findings_html(FINDINGS_TITLE, paragraphs),
                                        [page.section_html(section, out) for section in sections], tail=tail))
    return markdown, html_path
