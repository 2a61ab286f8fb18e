"""A compare grid's answer: one table, a row per phase and measure, a column per cell (backend / strategy), each
entry `median [min-max], n = runs` from the campaign's statistics (statistics/cells.parquet and runs.parquet).

The phases are the scenario's own, in the order its timeline plays them. Where the scenario declares a
`[reference]` (published figures), the reference's column for a strategy stands before that strategy's first
cell, its phases carry the reference's names, and a row gives the lab's total over the reference's phases
beside the reference's own total; the last row is the whole timeline, steady phases included.
"""

from __future__ import annotations

import pandas as pd

from experiments.report.reference_rows import (
    ARTICLE_PHASES_TOTAL,
    WHOLE_TIMELINE,
    article_column,
    figure_text,
    phase_label,
)
from experiments.scenario.reference import MEASURES, Reference
from experiments.statistics.campaign_stats import WHOLE_RUN_LOST, spread
from experiments.statistics.measure_names import LATE_OR_LOST, RECORDS_LOST
from experiments.summary import markdown_table
from rebalance.backends import profile

# A phase's metrics as the statistics name them (`<phase>: <metric>`), and as the table names them; in the
# order of a reference's figures (experiments.scenario.reference.MEASURES).
PHASE_MEASURES = ((RECORDS_LOST, LATE_OR_LOST), ("max latency (ms)", "max latency (ms)"),
                  ("rebalancing (ms)", "time rebalancing (ms)"))


def cell_labels(cells: pd.DataFrame) -> list[tuple[str, str]]:
    """(backend, strategy) of every cell, in the order the campaign declared them."""
    return list(dict.fromkeys(zip(cells["backend"], cells["strategy"], strict=True)))


def phases_of(cells: pd.DataFrame) -> list[str]:
    """The phases the statistics hold a measure for, in the order the runs played them."""
    measures = {metric for metric, _ in PHASE_MEASURES}
    whole_run = WHOLE_RUN_LOST.rpartition(": ")[0]
    found = []
    for metric in cells["metric"]:
        phase, _, measure = str(metric).rpartition(": ")
        if phase and measure in measures and phase != whole_run:
            found.append(phase)
    return list(dict.fromkeys(found))


def columns_of(cells: pd.DataFrame, reference: Reference | None) -> list[tuple[str, str | None]]:
    """(strategy, backend) a column each; backend None for the reference's column of that strategy."""
    columns: list[tuple[str, str | None]] = []
    for backend, strategy in cell_labels(cells):
        if reference and strategy in reference.figures and (strategy, None) not in columns:
            columns.append((strategy, None))
        columns.append((strategy, backend))
    return columns


def phase_table(cells: pd.DataFrame, runs: pd.DataFrame | None = None,
                reference: Reference | None = None) -> pd.DataFrame:
    """Rows: phase x measure, the total over the reference's phases (with a reference and per-run values in
    `runs`), then the whole timeline; columns: the reference's and one per cell."""
    columns = columns_of(cells, reference)
    rows = []
    for phase in phases_of(cells):
        article = reference.name_of(phase) if reference else None
        for index, (metric, measure) in enumerate(PHASE_MEASURES):
            row = {"phase": phase_label(reference, phase), "measure": measure}
            for strategy, backend in columns:
                if backend is None:
                    row[article_column(strategy)] = figure_text(
                        reference.figure(strategy, article, MEASURES[index])) if article else "-"
                else:
                    row[_title(backend, strategy)] = _entry(cells, backend, strategy, f"{phase}: {metric}")
            rows.append(row)
    if reference is not None and runs is not None:
        rows.append(_reference_total(runs, columns, reference))
    row = {"phase": WHOLE_TIMELINE, "measure": LATE_OR_LOST}
    for strategy, backend in columns:
        row[article_column(strategy) if backend is None else _title(backend, strategy)] = (
            "-" if backend is None else _entry(cells, backend, strategy, WHOLE_RUN_LOST))
    rows.append(row)
    return pd.DataFrame(rows)


def _reference_total(runs: pd.DataFrame, columns, reference: Reference) -> dict:
    """Per run, the records over 3 s of the reference's phases summed; then the cell's median [min-max], n."""
    wanted = {f"{lab}: {RECORDS_LOST}" for _, lab in reference.phases}
    played = runs[runs["metric"].isin(wanted)]
    per_run = played.groupby(["backend", "strategy", "run"], sort=False)["value"].sum().reset_index()
    row = {"phase": ARTICLE_PHASES_TOTAL, "measure": LATE_OR_LOST}
    for strategy, backend in columns:
        if backend is None:
            row[article_column(strategy)] = figure_text(reference.totals.get(strategy))
            continue
        values = per_run[(per_run["backend"] == backend) & (per_run["strategy"] == strategy)]["value"]
        row[_title(backend, strategy)] = "-" if values.empty else spread(
            float(values.median()), float(values.min()), float(values.max()), len(values), digits=0)
    return row


def _title(backend: str, strategy: str) -> str:
    """A cell's column: `kip848 / cooperative-sticky (runs uniform)` where the backend runs another assignor."""
    return f"{backend} / {profile(backend).strategy_label(strategy)}"


def _entry(cells: pd.DataFrame, backend: str, strategy: str, metric: str) -> str:
    found = cells[(cells["backend"] == backend) & (cells["strategy"] == strategy) & (cells["metric"] == metric)]
    return "-" if found.empty else spread(*(found.iloc[0][key] for key in ("median", "min", "max")),
                                          int(found.iloc[0]["runs"]), digits=0)


def grid_markdown(title: str, table: pd.DataFrame, reference: Reference | None, notes: list[str]) -> str:
    """compare.md: the title, what the entries are, the table, and what the grid left out."""
    lines = [f"# {title}\n", "Each entry: median [min-max], n = runs. The whole timeline counts every phase the "
                             "timeline played, the steady ones included."]
    if reference is not None:
        lines.append(f"Reference figures: {reference.source}; under the reference's phase names, the lab's in "
                     "brackets. The reference's total counts its own phases only, as does the lab's row beside it.")
    lines += ["", markdown_table(table)]
    lines += [f"- {note}" for note in notes]
    return "\n".join(lines).rstrip() + "\n"
