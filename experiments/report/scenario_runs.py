"""A report's runs grouped as its sections show them: `ScenarioRuns` holds one scenario's runs, a column per
backend (per backend and strategy when one scenario ran several strategies), one run per column and group size;
`scenarios` groups a report's runs by scenario name. The findings (experiments.report.findings) and the run
report's tables read them."""

from __future__ import annotations

from dataclasses import dataclass

from experiments.summary.herd_sizes import sizes_of
from experiments.summary.read_back import RunData
from experiments.summary.verdict_words import Reading, combine, read
from rebalance.backends import column_order


def backend_order(backend: str) -> tuple[int, str]:
    """Columns go in the profiles' order (oldest protocol first, as the lab tells the story); a name no
    profile answers to follows, by name."""
    return column_order(backend)


@dataclass(frozen=True, kw_only=True)
class ScenarioRuns:
    """The runs of one scenario, as a report section shows them: a column per backend (or backend and
    strategy), a row per group size when the scenario was swept over several."""

    name: str
    description: str
    runs: tuple[RunData, ...]
    by_strategy: bool      # columns are backend/strategy: one backend ran several strategies here

    def column(self, run: RunData) -> str:
        return run.short_label if self.by_strategy else run.backend

    @property
    def columns(self) -> list[str]:
        return list(dict.fromkeys(self.column(run) for run in self.runs))

    @property
    def sizes(self) -> list[int]:
        return sorted({size for run in self.runs for size in sizes_of(run)})

    @property
    def swept(self) -> bool:
        """Run at two or more group sizes: a herd curve, not a side-by-side."""
        return len(self.sizes) >= 2

    def runs_of(self, column: str) -> list[RunData]:
        return [run for run in self.runs if self.column(run) == column]

    @property
    def runs_per_cell(self) -> int:
        """The n behind each number: runs per column (and per group size when swept); the smallest."""
        cells: dict[tuple, int] = {}
        for run in self.runs:
            key = (self.column(run), run.group_size if self.swept else None)
            cells[key] = cells.get(key, 0) + 1
        return min(cells.values()) if cells else 0

    def checks(self) -> list[str]:
        """Every check any run of the scenario answered, in the checker's order."""
        return list(dict.fromkeys(check for run in self.runs for check in run.verdicts.get("check", [])))

    def reading(self, check: str, column: str) -> Reading | None:
        """The column's runs' readings of `check`, combined (`verdicts.combine`); None when none answered it."""
        readings = [reading_of(run, check) for run in self.runs_of(column)]
        readings = [reading for reading in readings if reading is not None]
        return combine(readings) if readings else None


def reading_of(run: RunData, check: str) -> Reading | None:
    if run.verdicts.empty:
        return None
    rows = run.verdicts[run.verdicts["check"] == check]
    if rows.empty:
        return None
    row = rows.iloc[0]
    return read(check, row["verdict"], row["count"], row["detail"])


def scenarios(runs: list[RunData], descriptions: dict[str, str] | None = None) -> list[ScenarioRuns]:
    """The runs grouped by scenario name, in the order the names first appear; within a scenario the runs
    sorted by column (backends in the order they first appear) and group size."""
    descriptions = descriptions or {}
    grouped: dict[str, list[RunData]] = {}
    for run in runs:
        grouped.setdefault(run.name, []).append(run)
    found = []
    for name, members in grouped.items():
        strategies: dict[str, set] = {}
        for run in members:
            strategies.setdefault(run.backend, set()).add(run.strategy)
        by_strategy = any(len(values) > 1 for values in strategies.values())
        ordered = sorted(members, key=lambda run: (backend_order(run.backend), run.strategy,
                                                   run.group_size or 0))
        found.append(ScenarioRuns(name=name, description=descriptions.get(name, ""), runs=tuple(ordered),
                              by_strategy=by_strategy))
    return found
