"""Cross-run statistics of a campaign: n, median, min, max and an interval of the median per cell and
metric, and tests of the differences between backends and between strategies.

The interval of a median is the distribution-free order-statistic interval [x(k), x(n+1-k)], with the
largest k whose coverage 1 - 2 P(Binomial(n, 1/2) < k) is at least 95%. Below n = 6 no such k exists and
the interval is [min, max] with the coverage it has (75% at n = 3, 94% at n = 5); its label says which.

Every measure is classified once (`experiments.statistics.measures`): a count the schedule alone fixes
(requests, notifications, offset regressions) or one that timing can move (every duration, duplicates,
records over the latency limit, fenced commits). The second kind is compared only between runs made one at
a time: a run made beside another (`--parallel` > 1) shares two cores with it.

Every pair of cells of one scenario and sweep is compared, whether they differ in backend, in strategy or
in both, by the exact two-sided Mann-Whitney test and the Hodges-Lehmann shift with its distribution-free
interval and that interval's coverage for its data (`experiments.statistics.inference`): with at least 5 runs
a side, cells that gave one value in every run included (their p is exact too), and a difference is called
one only if it survives Benjamini-Hochberg at a false discovery rate of 5% over every test on the page.

Per-run metrics come from each run's summary (`summary/*.parquet`, written by `summarize`):
- herd.parquet, per kind of change (join, leave, crash, ...) made by the scenario's timeline (not the
  warm-up's first joins nor the teardown's leaves), each the run's mean over its changes of that kind:
  requests and notifications per change, stable after (s), stop-the-world (s), partition-seconds without
  an owner;
- phases.parquet, per phase: records lost, max latency (ms), time spent rebalancing (ms); and the records lost
  over the scenario's timeline (`whole run: records lost`: every phase but setup, warm-up and teardown);
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

from experiments.campaign.manifest import COMPLETED, Manifest
from experiments.campaign.model import declared_claims, declared_detections
from experiments.folders.campaign_folder import CampaignFolder
from experiments.folders.run_folder import RunFolder
from experiments.statistics.claims import claims_frame, claims_markdown, evaluate
from experiments.statistics.inference import (
    BOTH_CONSTANT,
    MIN_RUNS,
    PARALLEL_TIMING,
    TESTED,
    TOO_FEW,
    TWO_SIDED,
    Q,
    benjamini_hochberg,
    compare,
    coverage_text,
    ran_beside,
)
from experiments.statistics.measure_names import measure_name
from experiments.statistics.power import claim_powers, power_markdown
from experiments.summary import checks, markdown_table
from experiments.summary.read_back import herd_columns, scenario_window
from rebalance.backends import column_order

LEVEL = 0.95
CELL_COLUMNS = ["scenario", "backend", "strategy", "sweep"]

_HERD_METRICS = {"requests": "requests per change", "notifications": "notifications per change",
                 "last_assignment_s": "stable after (s)", "settled_s": "settled after (s)",
                 "stop_the_world_s": "stop-the-world (s)",
                 "unowned_partition_s": "partition-seconds unowned"}
_PHASE_METRICS = {"records_lost": "records lost", "max_latency_ms": "max latency (ms)",
                  "rebalance_ms": "rebalancing (ms)"}
_CHECK_METRICS = {spec.name: spec.campaign_metric for spec in checks.SPECS if spec.campaign_metric}
WHOLE_RUN_LOST = "whole run: records lost"                       # seed 002's total
WHOLE_RUN_WORST = "whole run: max latency (ms)"
WHOLE_RUN_REBALANCING = "whole run: rebalancing (ms)"
COORDINATOR_GAP = "coordinator gap (s)"                          # the group's maximum, per run
GAP_LOOKUPS = "FindCoordinator requests without a coordinator"   # summed over the members


# -- the interval of a median ------------------------------------------------------------------

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


# -- per-run metrics ---------------------------------------------------------------------------

def run_metrics(folder: Path) -> pd.DataFrame:
    """One row per completed, summarised run per metric: the cell's columns, run, repetition, seed, the
    commit that made it, n, how many runs ran at once (`at_once`) and whether another ran beside it
    (`parallel`), metric, value."""
    manifest = Manifest.read(folder)
    rows = []
    for entry in manifest.runs.values():
        run = CampaignFolder(folder).run(entry.run)
        if entry.status != COMPLETED or not run.is_summarised():
            continue
        base = {"campaign": manifest.campaign["name"], "run": entry.run, "scenario": entry.scenario,
                "backend": entry.backend, "strategy": entry.strategy, "sweep": _sweep_label(entry.sweep),
                "repetition": entry.repetition, "seed": entry.seed,
                "commit": entry.git_commit or manifest.machine.get("git_commit") or "",
                "n": _members(run, entry), "at_once": entry.parallel or 1, "parallel": (entry.parallel or 1) > 1}
        for metric, value in metrics_of(run):
            rows.append({**base, "metric": metric, "value": value})
    columns = ["campaign", "run", *CELL_COLUMNS, "repetition", "seed", "commit", "n", "at_once", "parallel",
               "metric", "value"]
    return pd.DataFrame(rows, columns=columns)


def metrics_of(run: RunFolder) -> list[tuple[str, float]]:
    """A summarised run's campaign metrics (metric, value): per change kind, per phase, checks' counts."""
    found: list[tuple[str, float]] = []
    phases = _read(run.summary_table("phases"))
    herd = _read(run.summary_table("herd"))
    if herd is not None and len(herd):
        herd = herd_columns(herd)
        start, end = scenario_window(phases)
        changes = herd[(herd["live_before"] > 0) & (herd["t"] >= start) & (herd["t"] < end)]
        for kind, rows in changes.groupby("kind", sort=True):
            for column, label in _HERD_METRICS.items():
                value = float(rows[column].mean()) if column in rows else math.nan
                if not math.isnan(value):   # settled after: no change of the kind settled, or an older summary
                    found.append((f"{kind}: {label}", value))
    if phases is not None and len(phases):
        found += phase_metrics(phases)
        found.append(("double-ownership (s)", float(phases["double_ownership_s"].sum())))
    gaps = _read(run.summary_table("coordinator_gaps"))
    if gaps is not None and gaps["gap_s"].notna().any():
        found.append((COORDINATOR_GAP, float(gaps["gap_s"].max())))
        found.append((GAP_LOOKUPS, float(gaps["find_coordinator_requests"].sum())))
    verdicts = _read(run.summary_table("verdicts"))
    if verdicts is not None:
        counts = dict(zip(verdicts["check"], verdicts["count"], strict=True))
        for check, label in _CHECK_METRICS.items():
            if check in counts and counts[check] is not None and not pd.isna(counts[check]):
                found.append((label, float(counts[check])))
    return [(metric, value) for metric, value in found if not math.isnan(value)]


def phase_metrics(phases: pd.DataFrame, *, whole_run_extremes: bool = False) -> list[tuple[str, float]]:
    """Seed 002's measures from a run's phase table: per phase (of those that lasted), records lost, the worst
    latency and time rebalancing; over the phases the timeline played, the records lost (`WHOLE_RUN_LOST`) and,
    with `whole_run_extremes`, the worst latency and the time rebalancing too."""
    found = []
    spans = phases[phases["end_s"] > phases["start_s"]]
    for phase, rows in spans.groupby("phase", sort=False):
        found.append((f"{phase}: records lost", float(rows["records_lost"].sum())))
        found.append((f"{phase}: max latency (ms)", float(rows["max_latency_ms"].max())))
        found.append((f"{phase}: rebalancing (ms)", float(rows["rebalance_ms"].sum())))
    start, end = scenario_window(phases)
    played = spans[(spans["start_s"] >= start) & (spans["start_s"] < end)]
    found.append((WHOLE_RUN_LOST, float(played["records_lost"].sum())))
    if whole_run_extremes:
        found.append((WHOLE_RUN_WORST, float(played["max_latency_ms"].max())))
        found.append((WHOLE_RUN_REBALANCING, float(played["rebalance_ms"].sum())))
    return [(metric, value) for metric, value in found if not math.isnan(value)]


def _read(path: Path) -> pd.DataFrame | None:
    return pd.read_parquet(path) if path.is_file() else None


def _members(run: RunFolder, entry) -> int | None:
    members = entry.sweep.get("group.members")
    if members is not None:
        return int(members)
    try:
        meta = run.record()
    except ValueError:
        return None
    return meta.members if meta is not None else None


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


COMPARISON_COLUMNS = ["scenario", "backend", "strategy", "sweep", "metric", "compares", "a", "b", "n_a", "n_b",
                      "median_a", "median_b", "min_a", "max_a", "min_b", "max_b", "shift", "ci_low", "ci_high",
                      "coverage", "coverage_exact", "case", "p", "sides", "status", "difference", "reading"]


def comparisons(runs: pd.DataFrame) -> pd.DataFrame:
    """Every pair of cells of one scenario and sweep on every metric, whether they differ in backend, in
    strategy or in both (`compares`): the exact two-sided test where it can be made (5 runs a side, and
    for a measure timing can move, no run made beside another), and Benjamini-Hochberg over all of them. `difference` is True only for a tested pair that survives it. A pair that differs in one of
    backend and strategy keeps the other in its column; `a` and `b` name what differs."""
    rows = []
    for (scenario, sweep, metric), group in runs.groupby(["scenario", "sweep", "metric"], sort=False):
        cells = dict(tuple(group.groupby(["backend", "strategy"])))
        for (backend_a, strategy_a), (backend_b, strategy_b) in itertools.combinations(
                sorted(cells, key=lambda cell: (column_order(cell[0]), cell[1])), 2):
            rows_a, rows_b = cells[(backend_a, strategy_a)], cells[(backend_b, strategy_b)]
            va, vb = rows_a["value"].to_numpy(dtype=float), rows_b["value"].to_numpy(dtype=float)
            if strategy_a == strategy_b:
                vary, a, b, backend, strategy = "backend", backend_a, backend_b, "*", strategy_a
            elif backend_a == backend_b:
                vary, a, b, backend, strategy = "strategy", strategy_a, strategy_b, backend_a, "*"
            else:
                vary, a, b, backend, strategy = "both", f"{backend_a}/{strategy_a}", f"{backend_b}/{strategy_b}", "*", "*"
            result = compare(va, vb, beside=ran_beside(rows_a, metric) or ran_beside(rows_b, metric))
            rows.append({"scenario": scenario, "backend": backend, "strategy": strategy, "sweep": sweep,
                         "metric": metric, "compares": vary, "a": a, "b": b, "n_a": len(va), "n_b": len(vb),
                         "median_a": float(np.median(va)), "median_b": float(np.median(vb)),
                         "min_a": float(va.min()), "max_a": float(va.max()), "min_b": float(vb.min()),
                         "max_b": float(vb.max()), "shift": result.shift, "ci_low": result.low,
                         "ci_high": result.high, "coverage": result.coverage, "coverage_exact": result.exact,
                         "case": result.case, "p": result.p, "sides": result.sides, "status": result.status})
    frame = pd.DataFrame(rows, columns=COMPARISON_COLUMNS[:-2])
    tested = (frame["status"] == TESTED).to_numpy()
    difference = np.zeros(len(frame), dtype=bool)
    difference[tested] = benjamini_hochberg(frame.loc[tested, "p"].to_numpy())
    frame["difference"] = difference
    frame["reading"] = [reading(row) for row in frame.itertuples()]
    return frame


def reading(row) -> str:
    """A comparison in words, no stronger than its test: a difference says the two cells' runs do not come
    from one distribution, and which median is higher; "no difference shown" is never "equal", and
    "identical in all n runs" is a description of the runs, not a verdict."""
    n = f"n = {row.n_a}/{row.n_b}"
    if row.status == TOO_FEW:
        return f"too few runs ({n}; needs {MIN_RUNS})"
    if row.status == PARALLEL_TIMING:
        return f"not compared: a measure timing can move, from runs made beside another ({n})"
    p = f"p = {row.p:.2g} {getattr(row, 'sides', TWO_SIDED)}"
    if row.difference:
        said = (f"{row.b} differs from {row.a}, its median {'higher' if row.shift > 0 else 'lower'}"
                if row.shift != 0 else f"{row.b} differs from {row.a}, the medians equal") + f" ({p}, {n})"
    else:
        said = f"no difference shown at {n} ({p})"
    if getattr(row, "case", "") == BOTH_CONSTANT:
        said += (f"; identical in all {row.n_a}/{row.n_b} runs" if row.median_a == row.median_b else
                 f"; the same in every run of each ({row.a} {number(row.median_a, 2)}, {row.b} {number(row.median_b, 2)})")
    return said


def page_counts(compared: pd.DataFrame) -> str:
    """How many comparisons a page made, how many could be tested, and how many differences survive."""
    tested = int((compared["status"] == TESTED).sum())
    found = int(compared["difference"].sum())
    few = int((compared["status"] == TOO_FEW).sum())
    same = int(((compared["status"] == TESTED) & (compared["case"] == BOTH_CONSTANT)).sum()) \
        if "case" in compared else 0
    beside = int((compared["status"] == PARALLEL_TIMING).sum())
    return (f"{len(compared):,} comparisons: {tested:,} tested (exact two-sided Mann-Whitney, null: one "
            f"distribution; at least {MIN_RUNS} "
            f"runs a side; {same:,} of them between cells that gave one value in every run), {found:,} of them "
            f"differences at a false discovery rate of {Q:.0%} (Benjamini-Hochberg over the {tested:,}); {few:,} "
            f"with too few runs"
            + (f"; {beside:,} not compared: measures timing can move, from runs made beside another" if beside
               else "") + ".")


# -- output ------------------------------------------------------------------------------------

def write_statistics(folder: Path) -> Path:
    """statistics/runs.parquet, cells.parquet, comparisons.parquet and statistics.md under `folder`."""
    place = CampaignFolder(folder)
    out = place.statistics
    out.mkdir(exist_ok=True)
    runs = run_metrics(folder)
    cells = cell_statistics(runs)
    compared = comparisons(runs)
    text = place.campaign_file.read_text()
    claimed = evaluate(runs, declared_claims(text))
    # runs.parquet last: it is what says the statistics are written (CampaignFolder.is_summarised)
    cells.to_parquet(place.statistics_table("cells"), index=False)
    compared.to_parquet(place.statistics_table("comparisons"), index=False)
    claims_frame(claimed).to_parquet(place.statistics_table("claims"), index=False)
    powers = claim_powers(Manifest.read(folder).campaign["name"], runs, declared_claims(text),
                          declared_detections(text), len(claimed))
    powered = power_markdown(powers, len(claimed)) if powers else ""
    place.statistics_markdown.write_text(statistics_markdown(Manifest.read(folder), cells, compared,
                                                           claims_markdown(claimed) + powered))
    runs.to_parquet(place.statistics_table("runs"), index=False)
    return out


def spread(median: float, low: float, high: float, n: int, digits: int = 1) -> str:
    """`median [min-max], n = 3`, the form every published number takes."""
    return f"{number(median, digits)} [{number(low, digits)}-{number(high, digits)}], n = {n}"


def number(value: float, digits: int) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if float(value).is_integer() and abs(value) >= 10:
        return f"{value:,.0f}"
    if 0 < abs(value) < 10 ** -digits:      # small but not zero: show it, not "0.0"
        return f"{value:.2g}"
    return f"{value:,.{digits}f}"


def interval_label(coverage: float, runs: int) -> str:
    """The real coverage of a median's interval, e.g. "75% interval of the median, n = 3"."""
    return f"{coverage:.0%} interval of the median, n = {runs}" if not math.isnan(coverage) else "-"


def statistics_markdown(manifest: Manifest, cells: pd.DataFrame, compared: pd.DataFrame, claims: str = "") -> str:
    campaign = manifest.campaign
    statuses = [entry.status for entry in manifest.runs.values()]
    lines = [f"# Campaign {campaign['name']}\n",
             f"{statuses.count(COMPLETED)} of {len(statuses)} runs completed ({campaign['cells']} cells); commit "
             f"{manifest.machine.get('git_commit') or '?'}, {manifest.machine.get('cores')} cores.\n",
             *provenance_lines([manifest]),
             claims,
             "Every figure is `median [min-max], n`. The interval is the order-statistic interval of the median "
             "with its real coverage (below n = 6 it is [min, max]).\n"]
    for scenario, by_scenario in cells.groupby("scenario", sort=False):
        lines.append(f"## {scenario}\n")
        table = by_scenario.copy()
        table["cell"] = table["backend"] + " / " + table["strategy"] + table["sweep"].map(
            lambda s: "" if s == "-" else f" / {s}")
        table["value"] = [spread(r.median, r.min, r.max, r.runs) for r in table.itertuples()]
        table["interval of the median"] = [f"{number(r.ci_low, 1)}-{number(r.ci_high, 1)} "
                                           f"({interval_label(r.coverage, r.runs)})" for r in table.itertuples()]
        lines.append(markdown_table(table[["metric", "cell", "value", "interval of the median"]]))
    lines.append("## Differences\n")
    lines.append(page_counts(compared) + " Listed: the differences, each cell's values, and the difference of "
                 "their medians (b - a) with an interval whose coverage holds for any distributions (\"≥\": a "
                 "bound). Every comparison is in `comparisons.parquet`.\n")
    found = compared[compared["difference"]]
    if len(found):
        lines.append(markdown_table(differences_table(found)))
    else:
        lines.append("_(none)_\n")
    return "\n".join(lines)


def differences_table(found: pd.DataFrame) -> pd.DataFrame:
    """The listed differences with both cells' values (`median [min-max], n`), so every one can be read off
    the page, and the difference of their medians with its interval's coverage."""
    return pd.DataFrame({
        "where": found["scenario"] + found["sweep"].map(lambda s: "" if s == "-" else f" ({s})"),
        "metric": found["metric"].map(measure_name),
        "a": [f"{r.a}: {spread(r.median_a, r.min_a, r.max_a, r.n_a)}" for r in found.itertuples()],
        "b": [f"{r.b}: {spread(r.median_b, r.min_b, r.max_b, r.n_b)}" for r in found.itertuples()],
        "difference of medians (b - a) [interval, coverage]": [
            f"{number(r.shift, 1)} [{number(r.ci_low, 1)}, {number(r.ci_high, 1)}, "
            f"{coverage_text(r.coverage, r.coverage_exact)}]" for r in found.itertuples()],
        "reading": found["reading"]})


def provenance_lines(manifests: list[Manifest]) -> list[str]:
    """Which commits made the runs, and which runs ran alongside others (their timings are stretched)."""
    lines = []
    for manifest in manifests:
        done = [entry for entry in manifest.runs.values() if entry.status == COMPLETED]
        commits = sorted({entry.git_commit for entry in done if entry.git_commit})
        if len(commits) > 1:
            lines.append(f"- `{manifest.campaign['name']}` mixes runs from {len(commits)} commits "
                         f"({', '.join(commit[:12] for commit in commits)}; allowed by --allow-mixed-commits).")
        parallel = sum((entry.parallel or 1) > 1 for entry in done)
        if parallel:
            lines.append(f"- `{manifest.campaign['name']}`: {parallel} of {len(done)} runs ran beside another run "
                         "(`--parallel` > 1); the counts the schedule fixes are compared, the measures timing can "
                         "move are shown but never compared.")
    return [*lines, ""] if lines else []
