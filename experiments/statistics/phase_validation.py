"""Simulated runs set beside a campaign's real ones, cell by cell (docs/simulation.md).

A cell is a scenario, backend and strategy of the real runs (a data folder's runs.csv) and one measure: seed 002's
records over the latency limit, worst latency and time rebalancing, per phase and over the whole run; split
brain's anomalies (double ownership, duplicates, offset regressions, fenced commits). The simulated runs of the
cell, summarised as the real ones are, give the same metrics (`campaign_stats.metrics_of`); the cell validates when
the simulated median lies inside the real runs' [min-max]. A cell played without records (0.8's) is set beside the
real runs on what it still measures (`without_records`)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from experiments.folders.run_folder import RunFolder
from experiments.statistics.campaign_stats import WHOLE_RUN_LOST, metrics_of, spread
from rebalance.events import RunnerPhase

PHASE_MEASURES = ("records lost", "max latency (ms)", "rebalancing (ms)")
ANOMALIES = ("double-ownership (s)", "duplicates", "offset regressions", "fenced commits")


@dataclass(frozen=True)
class PhaseCell:
    scenario: str
    backend: str
    strategy: str
    metric: str
    real: tuple[float, ...]
    simulated: tuple[float, ...]

    @property
    def inside(self) -> bool:
        return bool(self.real and self.simulated) and \
            min(self.real) <= statistics.median(self.simulated) <= max(self.real)


# The runner's own phases and its timeline mark: not the scenario's phases, whose measures are validated.
NOT_SCENARIO_PHASES = (*(phase.value for phase in RunnerPhase), "timeline")


def validated_metric(metric: str) -> bool:
    """The whole run's records over the limit and anomalies, and each scenario phase's three measures."""
    phase, _, measure = metric.partition(": ")
    return metric in (WHOLE_RUN_LOST, *ANOMALIES) or (measure in PHASE_MEASURES and phase not in NOT_SCENARIO_PHASES)


def without_records(metric: str) -> bool:
    """What a run played without records still measures: who owned what when (double ownership) and the time the
    group spent rebalancing."""
    return metric == "double-ownership (s)" or metric.endswith(": rebalancing (ms)")


def phase_cells(real_runs: pd.DataFrame, simulated: Mapping[tuple[str, str, str], list[Path]],
                recordless: Collection[tuple[str, str, str]] = ()) -> list[PhaseCell]:
    """`real_runs`: a data folder's runs.csv; `simulated`: (scenario, backend, strategy) -> its summarised simulated
    runs; `recordless`: the cells played without records (0.8's), set beside the real runs on `without_records`
    measures only."""
    cells = []
    for (scenario, backend, strategy), folders in sorted(simulated.items()):
        real = real_runs[(real_runs["scenario"] == scenario) & (real_runs["backend"] == backend)
                         & (real_runs["strategy"] == strategy) & (real_runs["sweep"].fillna("-") == "-")]
        by_metric: dict[str, list[float]] = {}
        for folder in folders:
            for metric, value in metrics_of(RunFolder(folder)):
                by_metric.setdefault(metric, []).append(value)
        metrics = [m for m in dict.fromkeys(real["metric"]) if validated_metric(m)
                   and ((scenario, backend, strategy) not in recordless or without_records(m))]
        for metric in metrics:
            cells.append(PhaseCell(scenario, backend, strategy, metric,
                                   tuple(real.loc[real["metric"] == metric, "value"].astype(float)),
                                   tuple(by_metric.get(metric, ()))))
    return cells


def phase_cells_markdown(cells: list[PhaseCell], *, source: str, seeds: int,
                         unplayed: Mapping[tuple[str, str, str], str] | None = None,
                         recordless: Collection[tuple[str, str, str]] = ()) -> str:
    """The table; `unplayed`: the cells the simulation refused, each with its reason; `recordless`: those played
    without records."""
    lines = [f"The real runs of `{source}` against {seeds} simulated seeds a cell (median [min-max], n); a cell "
             "validates when the simulated median lies inside the real runs' range.", "",
             "| scenario | backend | strategy | measure | real runs | simulated | |", "|---|---|---|---|---|---|---|"]
    for cell in cells:
        lines.append(f"| {cell.scenario} | {cell.backend} | {cell.strategy} | {cell.metric} | {_figure(cell.real)} | "
                     f"{_figure(cell.simulated)} | {'inside' if cell.inside else '**outside**'} |")
    lines += ["", f"{sum(cell.inside for cell in cells)} of {len(cells)} cells validate."]
    lines += [f"Without records: {scenario} on {backend} {strategy} (0.8's records are not simulated "
              f"through this scenario's faults: its double ownership and time rebalancing only)." for scenario, backend, strategy
              in sorted(recordless)]
    lines += [f"Not simulated: {scenario} on {backend} {strategy} ({reason})."
              for (scenario, backend, strategy), reason in sorted((unplayed or {}).items())]
    return "\n".join(lines) + "\n"


def _figure(values: tuple[float, ...]) -> str:
    if not values:
        return "none"
    return spread(statistics.median(values), min(values), max(values), len(values))


# A server fault's run is one phase long (the timeline): its cost shows in the time without a coordinator, the
# lookups made meanwhile and the worst latency of the records its dead broker held, beside the whole run's losses.
SERVER_FAULT_MEASURES = ("coordinator gap (s)", "FindCoordinator requests without a coordinator",
                         "timeline: max latency (ms)")
SERVER_FAULT_SCENARIOS = ("split-brain-c", "split-brain-d")


def server_fault_cells(real_runs, simulated, recordless: Collection[tuple[str, str, str]] = ()) -> list:
    """The server faults' measures of each simulated cell (`SERVER_FAULT_MEASURES`), beside the real runs' (a data
    folder's runs.csv as a DataFrame); `simulated`: (scenario, backend, strategy) -> its summarised runs;
    `recordless`: as `phase_cells` takes it. PhaseCells, as `phase_cells` makes them."""
    cells = []
    for (scenario, backend, strategy), folders in sorted(simulated.items()):
        if scenario not in SERVER_FAULT_SCENARIOS:
            continue
        real = real_runs[(real_runs["scenario"] == scenario) & (real_runs["backend"] == backend)
                         & (real_runs["strategy"] == strategy) & (real_runs["sweep"].fillna("-") == "-")]
        by_metric: dict[str, list[float]] = defaultdict(list)
        for folder in folders:
            for metric, value in metrics_of(RunFolder(folder)):
                by_metric[metric].append(value)
        for metric in SERVER_FAULT_MEASURES:
            if (scenario, backend, strategy) in recordless and not without_records(metric):
                continue
            values = tuple(real.loc[real["metric"] == metric, "value"].astype(float))
            if values:
                cells.append(PhaseCell(scenario, backend, strategy, metric, values, tuple(by_metric.get(metric, ()))))
    return cells
