"""A campaign's findings: one paragraph a scenario from its cells' medians and spreads and the exact tests of
its comparisons (experiments.statistics), in the words a run report's findings use (experiments.report.findings)."""

from __future__ import annotations

import pandas as pd

from experiments.report.findings import (
    GAP_WORDS,
    Finding,
    _sentence,
    _where,
    herd_model_sentence,
    names,
    spread_text,
)
from experiments.report.scenario_runs import backend_order
from experiments.statistics.campaign_stats import COORDINATOR_GAP
from experiments.summary import checks

# The campaign statistics' per-run metrics that are checks' counts, and how a sentence names them.
CAMPAIGN_CHECKS = {"double-ownership (s)": checks.DOUBLE_OWNERSHIP.phrase,
                   **{spec.campaign_metric: spec.phrase for spec in checks.SPECS if spec.campaign_metric}}
PROTECTION_METRICS = frozenset(spec.campaign_metric for spec in checks.SPECS if spec.campaign_metric and spec.protection)



def metric_unit(metric: str) -> str:
    return "s" if metric.endswith("(s)") else "ms" if metric.endswith("(ms)") else ""


def campaign_columns(cells: pd.DataFrame) -> pd.DataFrame:
    """`cells` with a `column` per row: the backend, or backend/strategy in scenarios that ran several
    strategies on one backend."""
    cells = cells.copy()
    several = cells.groupby(["scenario", "backend"])["strategy"].transform("nunique") > 1
    by_scenario = several.groupby(cells["scenario"]).transform("any")
    cells["column"] = cells["backend"].where(~by_scenario, cells["backend"] + "/" + cells["strategy"])
    return cells


def _sizes(frame: pd.DataFrame) -> list[int]:
    return sorted({int(size) for size in frame["group_size"].dropna()})


def campaign_finding(scenario: str, cells: pd.DataFrame, compared: pd.DataFrame) -> Finding:
    """One scenario of a campaign in sentences: the herd's cost by N, then the checks' counts, every
    number `median [min-max]`, then the backend differences that hold up at the campaign's n."""
    cells = cells[cells["scenario"] == scenario]
    columns = sorted(dict.fromkeys(cells["column"]), key=lambda column: backend_order(column.split("/")[0]))
    runs = cells["runs"]
    n = f"n = {int(runs.min())}" if runs.min() == runs.max() else f"n = {int(runs.min())}-{int(runs.max())}"
    sizes = _sizes(cells)
    swept = len(sizes) >= 2
    sentences = []
    if swept:
        for kind in ("join", "leave"):
            metric = f"{kind}: requests per change"
            rows = cells[cells["metric"] == metric]
            if rows.empty:
                continue
            parts = []
            for column in columns:
                mine = rows[rows["column"] == column]
                if mine.empty:
                    continue
                by_size = {int(r.group_size): spread_text(r.median, r.min, r.max) for r in mine.itertuples()
                           if not pd.isna(r.group_size)}
                parts.append(f"{column} " + " / ".join(by_size.get(size, "-") for size in sizes))
            sentences.append(f"Requests per {kind} at N = {' / '.join(map(str, sizes))}: {'; '.join(parts)}.")
        model = herd_model_sentence(_campaign_points(cells))
        if model:
            sentences.append(model)
    found: dict[tuple[str, ...], list[str]] = {}
    protected, clean = [], []
    for metric, noun in CAMPAIGN_CHECKS.items():
        rows = cells[cells["metric"] == metric]
        if rows.empty:
            continue
        unit = metric_unit(metric)
        where, amounts = [], []
        for column in columns:
            mine = rows[rows["column"] == column]
            if len(mine) and mine["max"].max() > 0:
                worst = mine.loc[mine["median"].idxmax()]
                where.append(column)
                amounts.append(spread_text(worst["median"], worst["min"], worst["max"], unit=unit))
        if not where:
            clean.append(noun)
            continue
        shown = ", ".join(f"{column} {amount}" for column, amount in zip(where, amounts, strict=True)) \
            if len(where) > 1 else amounts[0]
        if metric in PROTECTION_METRICS:
            protected.append(f"{noun} on {names(where)} ({shown})")
        else:
            found.setdefault(tuple(where), []).append(f"{noun} ({shown})")
    for where, nouns in sorted(found.items(), key=lambda item: -len(item[0])):
        sentences.append(f"Found: {names(nouns)}." if len(columns) == 1 else
                         _sentence(f"{names(nouns)} {_where(list(where), columns)}."))
    if protected:
        sentences.append("Protection: " + "; ".join(protected) + ".")
    if clean:
        listed = clean[0] if len(clean) == 1 else ", ".join(clean[:-1]) + " or " + clean[-1]
        sentences.append(_sentence(f"no {listed} on any run."))
    gaps = cells[cells["metric"] == COORDINATOR_GAP]
    if len(gaps):
        parts = [f"{row.column} {spread_text(row.median, row.min, row.max, unit='s')}" for row in
                 sorted(gaps.itertuples(), key=lambda row: backend_order(row.column.split("/")[0]))]
        sentences.append(f"{GAP_WORDS}: {'; '.join(parts)}.")
    held = compared[(compared["scenario"] == scenario) & (compared["compares"] == "backend")
                    & compared["difference"]] if len(compared) else compared
    held = held[held["metric"].isin([*CAMPAIGN_CHECKS, "join: requests per change", "leave: requests per change"])] \
        if len(held) else held
    if len(held):
        readings = [f"{r.metric}{'' if r.sweep == '-' else ' at ' + str(r.sweep).replace('group.members=', 'N = ')}: "
                    f"{r.reading}" for r in held.itertuples()]
        sentences.append(f"Differences that hold up ({len(readings)}, false discovery rate 5%): "
                         + "; ".join(readings[:4]) + ("; ..." if len(readings) > 4 else "."))
    elif len(compared):
        tested = compared[(compared["scenario"] == scenario) & (compared["status"] == "tested")]
        sentences.append("No difference between backends is shown at this n." if len(tested) else
                         "No difference between backends was tested: a comparison needs 5 runs a side.")
    ran = f"{names(columns)}{' at N = ' + ', '.join(map(str, sizes)) if swept else ''}; {n} per cell"
    return Finding(scenario=scenario, ran=ran, text=" ".join(sentences) or "Nothing measured.")


def _campaign_points(cells: pd.DataFrame) -> pd.DataFrame:
    """The herd points of a campaign's cells, in `read_back.herd_points`' shape (for the fitted model)."""
    rows = cells[cells["metric"].isin(["join: requests per change", "leave: requests per change"])]
    if rows.empty:
        return pd.DataFrame(columns=["backend", "N", "requests_per_change"])
    points = rows.groupby(["backend", "group_size"], as_index=False)["median"].median()
    return points.rename(columns={"group_size": "N", "median": "requests_per_change"})


def campaign_findings(cells: pd.DataFrame, compared: pd.DataFrame) -> list[Finding]:
    """One finding per scenario of a campaign's statistics (`statistics/cells.parquet` and
    `comparisons.parquet`)."""
    cells = campaign_columns(cells)
    return [campaign_finding(scenario, cells, compared) for scenario in dict.fromkeys(cells["scenario"])]
