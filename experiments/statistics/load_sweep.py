"""A campaign swept over the workload's service time, read as a curve: a metric against the group's utilisation.

Each run's utilisation is its scenario's (`Scenario.load()`: offered records/s over what the first members can
handle), recomputed from the scenario and the run's sweep values, so it needs nothing the run did not record."""

from __future__ import annotations

from functools import cache

import pandas as pd

from experiments.campaign.model import BUILTIN_SCENARIOS
from experiments.scenario import ScenarioError, find_file, load
from experiments.statistics.campaign_stats import WHOLE_RUN_LOST

# Seed 002's totals of records over 3 s (the article's table; sticky and cooperative-sticky share a column).
ARTICLE_TOTALS = {"range": 6189, "roundrobin": 1088, "cooperative-sticky": 465}
POINT_COLUMNS = ["cell", "strategy", "utilisation", "value"]


def utilisation_points(runs: pd.DataFrame, metric: str = WHOLE_RUN_LOST) -> pd.DataFrame:
    """One row per run of `metric` whose sweep sets the workload: its cell (`backend/strategy`), strategy,
    utilisation and value. `runs`: a campaign's per-run metrics (`campaign_stats.run_metrics`)."""
    rows = []
    chosen = runs[(runs["metric"] == metric) & runs["sweep"].str.contains("workload.", regex=False)]
    for row in chosen.itertuples():
        utilisation = _utilisation(row.scenario, row.sweep)
        if utilisation is not None:
            rest = other_settings(row.sweep)
            rows.append({"cell": f"{row.backend}/{row.strategy}" + (f" ({rest})" if rest else ""),
                         "strategy": row.strategy, "utilisation": round(utilisation, 3), "value": float(row.value)})
    return pd.DataFrame(rows, columns=POINT_COLUMNS)


def sweep_label(scenario: str, sweep: str) -> str:
    """A cell's sweep as a reader names it: `u = 0.60` where it sets the workload of a built-in scenario (its
    utilisation), followed by whatever else it sets; else the sweep's own label; "" for none."""
    utilisation = utilisation_label(scenario, sweep)
    if not utilisation:
        return "" if sweep == "-" else sweep
    rest = other_settings(sweep)
    return utilisation + (f", {rest}" if rest else "")


def utilisation_label(scenario: str, sweep: str) -> str:
    """`u = 0.60` for a sweep that sets the workload of a built-in scenario, else ""."""
    utilisation = _utilisation(scenario, sweep) if "workload." in sweep else None
    return "" if utilisation is None else f"u = {utilisation:.2f}"


def other_settings(sweep: str) -> str:
    """What a sweep label sets besides the workload ("" for nothing): it tells apart cells of one backend,
    strategy and utilisation (KIP-848 at Kafka's defaults and at a lowered session, say)."""
    if sweep == "-":
        return ""
    return ", ".join(part for part in sweep.split(", ") if not part.startswith("workload."))


def scenario_utilisation(scenario: str) -> float | None:
    """A built-in scenario's own utilisation, as its file declares it."""
    return _utilisation(scenario, "-")


@cache
def _utilisation(scenario: str, sweep: str) -> float | None:
    """The utilisation of a built-in scenario under a sweep label (`key=value, key=value`, as run_metrics
    writes it; `-` for none); None for a scenario that is not built in."""
    path = find_file(scenario, BUILTIN_SCENARIOS)
    if path is None:
        return None
    overrides = [] if sweep == "-" else [part.strip() for part in sweep.split(", ")]
    try:
        return load(path, overrides=overrides).load().utilisation
    except ScenarioError:
        return None
