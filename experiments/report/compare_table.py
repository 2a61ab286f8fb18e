"""A compare grid's answer: one table, a row per phase and measure, a column per cell (backend / strategy), each
entry `median [min-max], n = runs` from the campaign's cell statistics (statistics/cells.parquet).

The phases are the scenario's own, in the order its timeline plays them; the last row is the whole timeline
(every phase the timeline played, the steady ones included).
"""

from __future__ import annotations

import pandas as pd

from experiments.summary import markdown_table
from experiments.summary.campaign_stats import WHOLE_RUN_LOST, spread
from experiments.summary.measure_names import LATE_OR_LOST, RECORDS_LOST

# A phase's metrics as the statistics name them (`<phase>: <metric>`), and as the table names them.
PHASE_MEASURES = ((RECORDS_LOST, LATE_OR_LOST), ("max latency (ms)", "max latency (ms)"),
                  ("rebalancing (ms)", "time rebalancing (ms)"))
WHOLE_TIMELINE = "whole timeline (steady phases included)"


def cell_labels(cells: pd.DataFrame) -> list[tuple[str, str]]:
    """(backend, strategy) of every cell, in the order the campaign declared them."""
    return list(dict.fromkeys(zip(cells["backend"], cells["strategy"], strict=True)))


def phases_of(cells: pd.DataFrame) -> list[str]:
    """The phases the statistics hold a measure for, in the order the runs played them."""
    measures = {metric for metric, _ in PHASE_MEASURES}
    found = []
    for metric in cells["metric"]:
        phase, _, measure = str(metric).rpartition(": ")
        if phase and measure in measures and phase != WHOLE_RUN_LOST.rpartition(": ")[0]:
            found.append(phase)
    return list(dict.fromkeys(found))


def phase_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Rows: phase x measure, then the whole timeline; columns: one per cell."""
    labels = cell_labels(cells)
    rows = []
    for phase in phases_of(cells):
        for metric, measure in PHASE_MEASURES:
            rows.append(_row(cells, labels, phase, measure, f"{phase}: {metric}"))
    rows.append(_row(cells, labels, WHOLE_TIMELINE, LATE_OR_LOST, WHOLE_RUN_LOST))
    return pd.DataFrame(rows)


def _row(cells: pd.DataFrame, labels, phase: str, measure: str, metric: str) -> dict:
    row = {"phase": phase, "measure": measure}
    for backend, strategy in labels:
        found = cells[(cells["backend"] == backend) & (cells["strategy"] == strategy) & (cells["metric"] == metric)]
        row[f"{backend} / {strategy}"] = "-" if found.empty else spread(
            *(found.iloc[0][key] for key in ("median", "min", "max")), int(found.iloc[0]["runs"]), digits=0)
    return row


def grid_markdown(title: str, cells: pd.DataFrame, notes: list[str]) -> str:
    """compare.md: the title, the table, and what the grid left out or assumed."""
    lines = [f"# {title}\n", "Each entry: median [min-max], n = runs. " + WHOLE_TIMELINE.capitalize()
             + ": every phase the timeline played.\n", markdown_table(phase_table(cells))]
    lines += [f"- {note}" for note in notes]
    return "\n".join(lines).rstrip() + "\n"
