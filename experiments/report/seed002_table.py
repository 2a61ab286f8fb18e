"""Seed 002's published table beside the lab's, phase by phase: the article's figure, then the lab's
`median [min-max], n` for the classic protocol's cell of the same strategy (the article ran Kafka's Java
client on the classic protocol). The other cells of the campaign (0.8, KIP-848, sticky apart from
cooperative-sticky) are in the page's per-cell table of the scenario."""

from __future__ import annotations

import pandas as pd

from experiments.statistics.campaign_stats import WHOLE_RUN_LOST, spread
from experiments.statistics.load_sweep import (
    ARTICLE_TOTALS,
    other_settings,
    scenario_utilisation,
    utilisation_label,
)
from experiments.summary import markdown_table

# The scenarios that play the article's schedule, and how each one's scale-down leaves (docs/seed002.md).
SCENARIOS = {
    "seed002": "the 50 leavers close cleanly, all at once",
    "seed002-mixed": "49 leavers are killed and the 50th closes cleanly half a second later, the scale-down the "
                     "article's 100 → 50 figures point to",
    "seed002-podwise": "the 50 leavers close cleanly one at a time, 0.5 s apart",
    "seed002-killed": "the 50 leavers are killed at once",
}
# The lab's phase for each of the article's, and the measures in the article's order.
PHASES = (("50 → 100", "scale-to-100"), ("100 → 50", "scale-to-50"), ("restart 10", "restart-10"))
MEASURES = (("records over 3 s", "records lost"), ("max response, ms", "max latency (ms)"),
            ("time rebalancing, ms", "rebalancing (ms)"))
# The article's table (its columns: Range, RoundRobin, (Cooperative)Sticky), keyed by (phase, measure).
ARTICLE = {
    ("50 → 100", "records over 3 s"): (0, 967, 0),
    ("50 → 100", "max response, ms"): (2274, 9000, 1064),
    ("50 → 100", "time rebalancing, ms"): (2850, 4360, 2760),
    ("100 → 50", "records over 3 s"): (5977, 114, 0),
    ("100 → 50", "max response, ms"): (14394, 3689, 852),
    ("100 → 50", "time rebalancing, ms"): (10400, 800, 2850),
    ("restart 10", "records over 3 s"): (212, 7, 465),
    ("restart 10", "max response, ms"): (4263, 3153, 6713),
    ("restart 10", "time rebalancing, ms"): (2950, 1580, 3410),
    ("total", "records over 3 s"): (6189, 1088, 465),
}
COLUMNS = (("Range", "range"), ("RoundRobin", "roundrobin"), ("(Cooperative)Sticky", "cooperative-sticky"))
BACKEND = "classic"


def seed002_section(cells: pd.DataFrame) -> list[str]:
    """One side-by-side table per seed002 scenario with classic runs, or nothing when there is none; only
    the scenario as it ships (a cell whose sweep changes it is another experiment: `load_sweep_section`)."""
    lines: list[str] = []
    for scenario, leaving in SCENARIOS.items():
        mine = cells[(cells["scenario"] == scenario) & (cells["backend"] == BACKEND) & (cells["sweep"] == "-")]
        if mine.empty:
            continue
        if not lines:
            lines.append("## Seed 002: the article's table and the lab's\n")
            lines.append("The article's figures (one run each) beside the lab's classic-protocol cell of the same "
                         "strategy, `median [min-max], n = runs` (the article's last column is "
                         "cooperative-sticky's). The lab's records over 3 s are records over 3 s or never handled (the "
                         "`lost-records` check counts only the never handled). The lab's phases last 40 s where the "
                         "article's lasted minutes, so its counts are for shorter phases; the article's total counts "
                         "its three phases, the lab's the whole timeline, steady-50 included. docs/seed002.md says "
                         "what is assumed where the article is silent.\n")
        lines += [f"### {scenario}: {leaving}\n", markdown_table(_side_by_side(mine))]
    return lines


def _side_by_side(mine: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (phase, measure), article in ARTICLE.items():
        metric = WHOLE_RUN_LOST if phase == "total" else f"{dict(PHASES)[phase]}: {dict(MEASURES)[measure]}"
        row = {"phase": phase, "measure": measure}
        for (title, strategy), figure in zip(COLUMNS, article, strict=True):
            found = mine[(mine["strategy"] == strategy) & (mine["metric"] == metric)]
            row[f"{title}: article"] = f"{figure:,}"
            row[f"{title}: lab"] = ("-" if found.empty else
                                    spread(*(found.iloc[0][key] for key in ("median", "min", "max")),
                                           int(found.iloc[0]["runs"]), digits=0))
        rows.append(row)
    return pd.DataFrame(rows)


def load_sweep_section(cells: pd.DataFrame) -> list[str]:
    """Records over 3 s against utilisation, per seed002 scenario whose cells sweep the workload: a row per
    backend, strategy and whatever else the sweep sets, a column per utilisation, a table for the whole run and
    one per phase."""
    swept = cells[cells["scenario"].isin(list(SCENARIOS)) & cells["sweep"].str.contains("workload.", regex=False)]
    if swept.empty:
        return []
    lines = ["## Seed 002 under load: records over 3 s against utilisation\n"]
    for scenario, group in swept.groupby("scenario", sort=True):
        group = group.assign(load=[utilisation_label(scenario, sweep) for sweep in group["sweep"]],
                             rest=[other_settings(sweep) for sweep in group["sweep"]])
        loads = sorted(dict.fromkeys(group["load"]))
        lines.append(f"`{scenario}` with its service time scaled (the same shape), `median [min-max], n = runs`; "
                     f"the scenario as it ships runs at u = {scenario_utilisation(scenario) or 0:.2f}. The "
                     "article's totals over its whole run: " + ", ".join(
                         f"{strategy} {figure:,}" for strategy, figure in ARTICLE_TOTALS.items()) + ".\n")
        for title, metric in [("whole run", WHOLE_RUN_LOST),
                              *((phase, f"{lab}: records lost") for phase, lab in PHASES)]:
            chosen = group[group["metric"] == metric]
            if chosen.empty:
                continue
            rows = []
            for (backend, strategy, rest), cell in chosen.groupby(["backend", "strategy", "rest"], sort=False):
                row = {"cell": f"{backend} {strategy}" + (f" ({rest})" if rest else "")}
                for found in cell.itertuples():
                    row[found.load] = spread(found.median, found.min, found.max, int(found.runs), digits=0)
                rows.append(row)
            table = pd.DataFrame(rows).reindex(columns=["cell", *loads]).fillna("-")
            lines += [f"### {scenario}, {title}: records over 3 s or never handled\n", markdown_table(table)]
    return lines
