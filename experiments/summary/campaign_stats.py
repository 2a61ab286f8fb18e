"""Cross-run statistics of a campaign: n, median, min, max and a 95% interval of the median per cell and
metric, and differences of medians between backends and between strategies.

The interval of a median is the distribution-free order-statistic interval [x(k), x(n+1-k)], with the
largest k whose coverage 1 - 2 P(Binomial(n, 1/2) < k) is at least 95%. Below n = 6 no such k exists and
the interval is [min, max] with the coverage it has (75% at n = 3, 94% at n = 5); the `coverage` column
says which. A difference of medians gets a percentile bootstrap interval (2,000 resamples of each cell,
fixed seed); at small n it is rough, and a difference whose interval contains zero is reported as "not
distinguishable at n = a/b".

Per-run metrics come from each run's summary (`summary/*.parquet`, written by `summarize`):
- herd.parquet, per kind of change (join, leave, crash, ...) made by the scenario's timeline (not the
  warm-up's first joins nor the teardown's leaves): requests and
  notifications per change, stable after (s), stop-the-world (s), partition-seconds without an owner;
- phases.parquet, per phase: records lost, max latency (ms), time spent rebalancing (ms);
- coordinator_gaps.parquet (runs whose coordinator's broker was killed or a coordination link cut):
  the group's longest time without a coordinator (`coordinator_gap_s`) and the FindCoordinator
  requests its members sent meanwhile;
- the whole run: double-ownership seconds, duplicates, offset regressions, fenced commits.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.campaign.execute import run_dir
from experiments.campaign.manifest import COMPLETED, Manifest
from experiments.summary import markdown_table
from experiments.summary.rundata import scenario_window

LEVEL = 0.95
BOOTSTRAP_RESAMPLES = 2000
CELL_COLUMNS = ["scenario", "backend", "strategy", "sweep"]

_HERD_METRICS = {"requests": "requests per change", "notifications": "notifications per change",
                 "stable_s": "stable after (s)", "stop_the_world_s": "stop-the-world (s)",
                 "unowned_partition_s": "partition-seconds unowned"}
_PHASE_METRICS = {"records_lost": "records lost", "max_latency_ms": "max latency (ms)",
                  "rebalance_ms": "rebalancing (ms)"}
_CHECK_METRICS = {"duplicates": "duplicates", "offset-regressions": "offset regressions",
                  "fenced-commits": "fenced commits"}
COORDINATOR_GAP = "coordinator gap (s)"                          # the group's maximum, per run
GAP_LOOKUPS = "FindCoordinator requests without a coordinator"   # summed over the members


# -- order statistics and the bootstrap ---------------------------------------------------------

def median_interval(values: list[float] | np.ndarray, level: float = LEVEL) -> tuple[float, float, float]:
    """(low, high, coverage) of the order-statistic interval of the median."""
    data = np.sort(np.asarray(values, dtype=float))
    n = len(data)
    if n == 0:
        return math.nan, math.nan, math.nan
    best = 1
    for k in range(1, n // 2 + 1):
        if _coverage(n, k) >= level:
            best = k
    return float(data[best - 1]), float(data[n - best]), _coverage(n, best)


def _coverage(n: int, k: int) -> float:
    """P(x(k) <= median <= x(n+1-k)) = 1 - 2 P(Binomial(n, 1/2) <= k - 1)."""
    tail = sum(math.comb(n, i) for i in range(k)) / 2 ** n
    return 1 - 2 * tail


def difference_interval(a: np.ndarray, b: np.ndarray, *, level: float = LEVEL, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of median(b) - median(a)."""
    rng = np.random.default_rng(seed)
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    medians_a = np.median(rng.choice(a, size=(BOOTSTRAP_RESAMPLES, len(a))), axis=1)
    medians_b = np.median(rng.choice(b, size=(BOOTSTRAP_RESAMPLES, len(b))), axis=1)
    low, high = np.quantile(medians_b - medians_a, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


# -- per-run metrics ---------------------------------------------------------------------------

def run_metrics(folder: Path) -> pd.DataFrame:
    """One row per completed, summarised run per metric: the cell's columns, run, repetition, n, metric, value."""
    manifest = Manifest.read(folder)
    rows = []
    for entry in manifest.runs.values():
        summary = run_dir(folder, entry.run) / "summary"
        if entry.status != COMPLETED or not (summary / "verdicts.parquet").is_file():
            continue
        base = {"campaign": manifest.campaign["name"], "run": entry.run, "scenario": entry.scenario,
                "backend": entry.backend, "strategy": entry.strategy, "sweep": _sweep_label(entry.sweep),
                "repetition": entry.repetition, "n": _members(summary, entry)}
        for metric, value in _metrics_of(summary):
            rows.append({**base, "metric": metric, "value": value})
    columns = ["campaign", "run", *CELL_COLUMNS, "repetition", "n", "metric", "value"]
    return pd.DataFrame(rows, columns=columns)


def _metrics_of(summary: Path) -> list[tuple[str, float]]:
    found: list[tuple[str, float]] = []
    phases = _read(summary / "phases.parquet")
    herd = _read(summary / "herd.parquet")
    if herd is not None and len(herd):
        start, end = scenario_window(phases)
        changes = herd[(herd["live_before"] > 0) & (herd["t"] >= start) & (herd["t"] < end)]
        for kind, rows in changes.groupby("kind", sort=True):
            for column, label in _HERD_METRICS.items():
                found.append((f"{kind}: {label}", float(rows[column].mean())))
    if phases is not None and len(phases):
        spans = phases[phases["end_s"] > phases["start_s"]]
        for phase, rows in spans.groupby("phase", sort=False):
            found.append((f"{phase}: records lost", float(rows["records_lost"].sum())))
            found.append((f"{phase}: max latency (ms)", float(rows["max_latency_ms"].max())))
            found.append((f"{phase}: rebalancing (ms)", float(rows["rebalance_ms"].sum())))
        found.append(("double-ownership (s)", float(phases["double_ownership_s"].sum())))
    gaps = _read(summary / "coordinator_gaps.parquet")
    if gaps is not None and gaps["gap_s"].notna().any():
        found.append((COORDINATOR_GAP, float(gaps["gap_s"].max())))
        found.append((GAP_LOOKUPS, float(gaps["find_coordinator_requests"].sum())))
    verdicts = _read(summary / "verdicts.parquet")
    if verdicts is not None:
        counts = dict(zip(verdicts["check"], verdicts["count"], strict=True))
        for check, label in _CHECK_METRICS.items():
            if check in counts and counts[check] is not None and not pd.isna(counts[check]):
                found.append((label, float(counts[check])))
    return [(metric, value) for metric, value in found if not math.isnan(value)]


def _read(path: Path) -> pd.DataFrame | None:
    return pd.read_parquet(path) if path.is_file() else None


def _members(summary: Path, entry) -> int | None:
    members = entry.sweep.get("group.members")
    if members is not None:
        return int(members)
    import json

    try:
        return int(json.loads((summary.parent / "lock.json").read_text())["members"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _sweep_label(sweep: dict) -> str:
    return ", ".join(f"{key}={value}" for key, value in sweep.items()) or "-"


# -- per-cell statistics and comparisons ------------------------------------------------------

def cell_statistics(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per cell per metric: n, median, min, max, the median's interval and its coverage."""
    rows = []
    for key, group in runs.groupby([*CELL_COLUMNS, "metric"], sort=False):
        values = group["value"].to_numpy(dtype=float)
        low, high, coverage = median_interval(values)
        rows.append({**dict(zip([*CELL_COLUMNS, "metric"], key, strict=True)),
                     "group_size": group["n"].dropna().median() if group["n"].notna().any() else None,
                     "runs": len(values), "median": float(np.median(values)), "min": float(values.min()),
                     "max": float(values.max()), "ci_low": low, "ci_high": high, "coverage": coverage})
    columns = [*CELL_COLUMNS, "metric", "group_size", "runs", "median", "min", "max", "ci_low", "ci_high",
               "coverage"]
    return pd.DataFrame(rows, columns=columns)


def comparisons(runs: pd.DataFrame) -> pd.DataFrame:
    """Differences of medians between backends (same scenario, strategy, sweep) and between strategies
    (same scenario, backend, sweep), each with its bootstrap interval and a plain-words reading."""
    rows = []
    for vary in ("backend", "strategy"):
        fixed = [column for column in CELL_COLUMNS if column != vary]
        for key, group in runs.groupby([*fixed, "metric"], sort=False):
            by_value = {value: rows_["value"].to_numpy(dtype=float) for value, rows_ in group.groupby(vary)}
            for a, b in itertools.combinations(sorted(by_value), 2):
                va, vb = by_value[a], by_value[b]
                low, high = difference_interval(va, vb)
                difference = float(np.median(vb) - np.median(va))
                crosses = low <= 0 <= high
                reading = (f"not distinguishable at n = {len(va)}/{len(vb)}" if crosses else
                           f"{b} {'higher' if difference > 0 else 'lower'} than {a}")
                rows.append({**dict(zip([*fixed, "metric"], key, strict=True)), "compares": vary, "a": a, "b": b,
                             "n_a": len(va), "n_b": len(vb), "median_a": float(np.median(va)),
                             "median_b": float(np.median(vb)), "difference": difference, "ci_low": low,
                             "ci_high": high, "distinguishable": not crosses, "reading": reading})
    columns = ["scenario", "backend", "strategy", "sweep", "metric", "compares", "a", "b", "n_a", "n_b",
               "median_a", "median_b", "difference", "ci_low", "ci_high", "distinguishable", "reading"]
    return pd.DataFrame(rows, columns=columns)


# -- output ------------------------------------------------------------------------------------

def write_statistics(folder: Path) -> Path:
    """statistics/runs.parquet, cells.parquet, comparisons.parquet and statistics.md under `folder`."""
    out = folder / "statistics"
    out.mkdir(exist_ok=True)
    runs = run_metrics(folder)
    cells = cell_statistics(runs)
    compared = comparisons(runs)
    runs.to_parquet(out / "runs.parquet", index=False)
    cells.to_parquet(out / "cells.parquet", index=False)
    compared.to_parquet(out / "comparisons.parquet", index=False)
    (out / "statistics.md").write_text(statistics_markdown(Manifest.read(folder), cells, compared))
    return out


def spread(median: float, low: float, high: float, n: int, digits: int = 1) -> str:
    """`median [min-max], n = 3`, the form every published number takes."""
    return f"{_number(median, digits)} [{_number(low, digits)}-{_number(high, digits)}], n = {n}"


def _number(value: float, digits: int) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if float(value).is_integer() and abs(value) >= 10:
        return f"{value:,.0f}"
    if 0 < abs(value) < 10 ** -digits:      # small but not zero: show it, not "0.0"
        return f"{value:.2g}"
    return f"{value:,.{digits}f}"


def statistics_markdown(manifest: Manifest, cells: pd.DataFrame, compared: pd.DataFrame) -> str:
    campaign = manifest.campaign
    statuses = [entry.status for entry in manifest.runs.values()]
    lines = [f"# Campaign {campaign['name']}\n",
             f"{statuses.count(COMPLETED)} of {len(statuses)} runs completed ({campaign['cells']} cells x "
             f"{campaign['repetitions']} repetitions); commit {manifest.machine.get('git_commit') or '?'}, "
             f"{manifest.machine.get('cores')} cores.\n",
             "Every figure is `median [min-max], n`. The `95% CI` column is the order-statistic interval of the "
             "median with its actual coverage (below n = 6 it is [min, max]).\n"]
    for scenario, by_scenario in cells.groupby("scenario", sort=False):
        lines.append(f"## {scenario}\n")
        table = by_scenario.copy()
        table["cell"] = table["backend"] + " / " + table["strategy"] + table["sweep"].map(
            lambda s: "" if s == "-" else f" / {s}")
        table["value"] = [spread(r.median, r.min, r.max, r.runs) for r in table.itertuples()]
        table["95% CI"] = [f"{_number(r.ci_low, 1)}-{_number(r.ci_high, 1)} ({r.coverage:.0%})"
                           for r in table.itertuples()]
        lines.append(markdown_table(table[["metric", "cell", "value", "95% CI"]]))
    distinguishable = compared[compared["distinguishable"]]
    lines.append("## Differences that hold up\n")
    lines.append("Difference of medians (b - a) with its 95% bootstrap interval; only those whose interval "
                 "excludes zero. Everything else in `comparisons.parquet` is not distinguishable at its n.\n")
    if len(distinguishable):
        shown = distinguishable.assign(
            where=distinguishable["scenario"] + " " + distinguishable["sweep"].where(distinguishable["sweep"] != "-", ""),
            difference_ci=[f"{_number(r.difference, 1)} [{_number(r.ci_low, 1)}, {_number(r.ci_high, 1)}]"
                           for r in distinguishable.itertuples()])
        lines.append(markdown_table(shown[["where", "metric", "a", "b", "difference_ci", "reading"]]))
    else:
        lines.append("_(none)_\n")
    return "\n".join(lines)
