"""The report of one or several summarised runs: report.md, a self-contained report.html, PNGs.

Reads what `experiments.summary` wrote to RUN_DIR/summary/ (through `experiments.rundata`) and puts
the runs side by side: the verdicts, seed 002's strategy table (records lost, max latency,
rebalance time per phase), Kafka's rebalance metrics, the herd cost per membership change,
and the charts of `experiments.plots`.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from experiments import plots
from experiments.rundata import RunData, herd_points, load_run
from experiments.summary import markdown_table
from experiments.verdicts import CSS_CLASS, legend, read, word_of_label


def report_dir(run_dirs: list[Path]) -> Path:
    """One run: its own directory. Several: their common parent (e.g. a comparison's folder)."""
    if len(run_dirs) == 1:
        return run_dirs[0]
    resolved = [p.absolute() for p in run_dirs]
    common = Path(*[parts[0] for parts in zip(*(p.parts for p in resolved), strict=False)
                    if len(set(parts)) == 1]) if resolved else Path(".")
    return common


# -- tables ------------------------------------------------------------------------------------

def _column_names(runs: list[RunData]) -> list[str]:
    names = [run.short_label for run in runs]
    if len(set(names)) < len(names):
        names = [f"{run.info.get('name') or run.run_dir.name} ({run.short_label})" for run in runs]
    if len(set(names)) < len(names):  # one scenario at several group sizes, e.g. a herd sweep
        names = [f"{name}, N={run.group_size}" for name, run in zip(names, runs, strict=True)]
    if len(set(names)) < len(names):
        names = [f"{run.run_dir.parent.name}/{run.run_dir.name}" for run in runs]
    return names


def verdict_table(runs: list[RunData]) -> pd.DataFrame:
    """Checks as rows, runs as columns; each cell a reading in words (experiments.verdicts) and its meaning:
    `ok: ...`, `VIOLATED (n): ...`, `protected (n): ...` or `unknown: ...`."""
    columns = {}
    for name, run in zip(_column_names(runs), runs, strict=True):
        columns[name] = {row.check: read(row.check, row.verdict, row.count, row.detail).line
                         for row in run.verdicts.itertuples()}
    table = pd.DataFrame(columns)
    table.index.name = "check"
    return table.reset_index()


def swept_runs(runs: list[RunData]) -> list[RunData]:
    """The runs of scenarios run at two or more group sizes (a herd sweep), when there are any: a demo's
    split-brain runs are not points of its herd curve. Without a sweep, every run."""
    sizes: dict[str, set] = {}
    for run in runs:
        sizes.setdefault(run.info.get("name") or "", set()).add(run.group_size)
    swept = {name for name, found in sizes.items() if len(found - {None}) >= 2}
    return [run for run in runs if (run.info.get("name") or "") in swept] if swept else runs


def strategy_table(runs: list[RunData]) -> pd.DataFrame:
    """Seed 002's shape: per phase, records lost (never processed or over the limit), max latency
    and time spent rebalancing; then the total over the limit. Runs as columns."""
    rows: list[dict] = []
    names = _column_names(runs)
    phases = list(dict.fromkeys(name for run in runs for name in run.phases.get("phase", [])))
    limit_s = runs[0].latency_limit_ms / 1000 if runs else 3
    measures = [("records lost", "records_lost", "{:,.0f}"), ("max latency, ms", "max_latency_ms", "{:,.0f}"),
                ("time rebalancing, ms", "rebalance_ms", "{:,.0f}"), ("duplicates", "duplicates", "{:,.0f}"),
                ("double ownership, s", "double_ownership_s", "{:,.2f}")]
    for phase in phases:
        for title, column, fmt in measures:
            row = {"phase": phase, "measure": title}
            for name, run in zip(names, runs, strict=True):
                match = run.phases[run.phases["phase"] == phase]
                value = match[column].iloc[0] if len(match) and column in match else None
                row[name] = "" if value is None or pd.isna(value) else fmt.format(value)
            rows.append(row)
    total = {"phase": "total", "measure": f"records over {limit_s:g} s or never processed"}
    produced = {"phase": "total", "measure": "records produced"}
    for name, run in zip(names, runs, strict=True):
        total[name] = f"{int(run.phases['records_lost'].sum()):,}" if len(run.phases) else ""
        produced[name] = f"{int(run.phases['produced'].sum()):,}" if len(run.phases) else ""
    rows += [produced, total]
    return pd.DataFrame(rows)


def metrics_table(runs: list[RunData]) -> pd.DataFrame:
    rows = []
    for name, run in zip(_column_names(runs), runs, strict=True):
        group = run.metrics[run.metrics["member"] == "(group)"] if len(run.metrics) else pd.DataFrame()
        if len(group):
            row = group.iloc[0].to_dict()
            row["member"] = name
            rows.append(row)
    return pd.DataFrame(rows).rename(columns={"member": "run"})


# -- the report --------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Report:
    out_dir: Path
    markdown: Path
    html: Path
    images: list[Path]


def write_report(run_dirs: list[Path], out_dir: Path | None = None) -> Report:
    runs = [load_run(run_dir) for run_dir in run_dirs]
    out_dir = out_dir or report_dir(run_dirs)
    out_dir.mkdir(parents=True, exist_ok=True)
    images: list[tuple[str, Path]] = []
    images.append(("Processed records per second", plots.throughput(runs, out_dir / "throughput.png")))
    for index, run in enumerate(runs):
        if len(run.ownership):
            suffix = "" if len(runs) == 1 else f"-{index + 1}-{run.backend}"
            images.append((f"Partition ownership: {run.label}", plots.ownership(run, out_dir / f"ownership{suffix}.png")))
    points = herd_points(swept_runs(runs))
    herd_png = plots.herd(points, out_dir / "herd.png")
    if herd_png:
        images.append(("Herd effect", herd_png))

    sections = _sections(runs, points)
    markdown = out_dir / "report.md"
    markdown.write_text(_markdown(runs, sections, images, out_dir))
    page = out_dir / "report.html"
    page.write_text(_html(runs, sections, images))
    return Report(out_dir=out_dir, markdown=markdown, html=page, images=[path for _, path in images])


def _sections(runs: list[RunData], points: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    """(title, explanation, table) in report order."""
    sections = [
        ("Verdicts", legend(), verdict_table(runs)),
        ("Strategy table (seed 002's shape)",
         f"Per phase. A record processed more than {runs[0].latency_limit_ms / 1000:g} s after it was produced "
         "counts as lost, as do records never processed.", strategy_table(runs)),
        ("Rebalance metrics", "Kafka consumer metric names, whole group, milliseconds.", metrics_table(runs)),
    ]
    if not points.empty:
        sections.append(("Herd cost per membership change",
                         "Median over the changes to a group of N members (its join and leave). Requests are "
                         "ZooKeeper operations (legacy), group API calls (modern), or KIP-848 heartbeats that "
                         "joined, left, acknowledged or changed an assignment (kip848); steady heartbeats and "
                         "commits excluded.", points))
    for name, run in zip(_column_names(runs), runs, strict=True):
        for check, evidence in run.evidence.items():
            if len(evidence):
                sections.append((f"Evidence: {check} ({name})", f"First rows of {len(evidence)} kept.",
                                 evidence.head(10)))
    return sections


def _markdown(runs: list[RunData], sections, images, out_dir: Path) -> str:
    lines = ["# Rebalance Lab report\n", "Runs: " + "; ".join(run.label for run in runs) + "\n"]
    for title, explanation, table in sections[:4]:
        lines += [f"## {title}\n", explanation + "\n", markdown_table(table, digits=2)]
    lines.append("## Charts\n")
    lines += [f"![{title}]({path.relative_to(out_dir)})\n" for title, path in images]
    for title, explanation, table in sections[4:]:
        lines += [f"## {title}\n", explanation + "\n", markdown_table(table, digits=3)]
    return "\n".join(lines)


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f2f2f2; } td:first-child, th:first-child { text-align: left; }
td.bad { background: #fbd5d5; font-weight: bold; } td.good { background: #e3f4e1; } td.unknown { background: #f5f5f5; }
td.protected { background: #dceefb; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0 1.5em; }
p.note { color: #555; font-size: 0.9em; }
"""


def _html_table(table: pd.DataFrame) -> str:
    if table.empty:
        return "<p class=note>(none)</p>"
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in table.columns)
    body = []
    for row in table.itertuples(index=False):
        cells = []
        for value in row:
            text = _cell(value)
            word = word_of_label(text)
            css = CSS_CLASS[word] if word else ""
            cells.append(f"<td class='{css}'>{html.escape(text)}</td>" if css else f"<td>{html.escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _cell(value: object) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return ""
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 1000 else f"{value:,.0f}"
    if hasattr(value, "tolist"):
        return ", ".join(map(str, value.tolist()))
    return str(value)


def _html(runs: list[RunData], sections, images) -> str:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>Rebalance Lab report</title>"
             f"<style>{_STYLE}</style></head><body><h1>Rebalance Lab report</h1>",
             "<p>" + "<br>".join(html.escape(run.label) for run in runs) + "</p>"]
    for title, explanation, table in sections[:4]:
        parts += [f"<h2>{html.escape(title)}</h2><p class=note>{html.escape(explanation)}</p>", _html_table(table)]
    parts.append("<h2>Charts</h2>")
    for title, path in images:
        data = base64.b64encode(path.read_bytes()).decode()
        parts.append(f"<h3>{html.escape(title)}</h3><img alt='{html.escape(title)}' src='data:image/png;base64,{data}'>")
    for title, explanation, table in sections[4:]:
        parts += [f"<h2>{html.escape(title)}</h2><p class=note>{html.escape(explanation)}</p>", _html_table(table)]
    parts.append("</body></html>")
    return "\n".join(parts)
