"""A scenario's `[reference]`: published per-phase figures the lab's runs are read beside (seed 002's article).

    [reference]
    source = "Seed 002's article, its table of scenario 2 (docs/seed002.md)"
    phases = { "50 → 100" = "scale-to-100", "100 → 50" = "scale-to-50", "restart 10" = "restart-10" }

    [reference.strategies.range]        # a strategy's figures, a phase of `phases` each:
    "50 → 100" = [0, 2274, 2850]        #   [records over 3 s, max latency ms, time rebalancing ms]
    "100 → 50" = [5977, 14394, 10400]
    "restart 10" = [212, 4263, 2950]
    total = 6189                        # records over 3 s over the reference's phases alone

`phases` maps the reference's own phase names to the lab's (its timeline's phase names), and the pages print
the reference's. The reference's total covers its phases only; the lab's whole-timeline total also counts the
steady phases, so the pages give the lab's sum over the reference's phases beside it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

# A phase's figures, in this order: the reference's three measures.
MEASURES = ("records over 3 s", "max latency, ms", "time rebalancing, ms")
TOTAL_KEY = "total"


@dataclass(frozen=True, kw_only=True)
class Reference:
    source: str
    phases: tuple[tuple[str, str], ...]                    # (the reference's phase name, the lab's phase)
    figures: Mapping[str, Mapping[str, tuple[float, ...]]] = field(default_factory=dict)  # strategy -> phase -> 3
    totals: Mapping[str, float] = field(default_factory=dict)    # strategy -> records over 3 s, its phases alone

    def name_of(self, lab_phase: str) -> str | None:
        """The reference's name for one of the lab's phases, or None."""
        return next((name for name, lab in self.phases if lab == lab_phase), None)

    def figure(self, strategy: str, phase: str, measure: str) -> float | None:
        figures = self.figures.get(strategy, {}).get(phase)
        return None if figures is None else figures[MEASURES.index(measure)]

    @classmethod
    def from_json(cls, document: object) -> Reference | None:
        """Back from a run record's resolved scenario (lists where the scenario had tuples); None if absent."""
        if not isinstance(document, Mapping) or not document.get("source"):
            return None
        return cls(source=str(document["source"]),
                   phases=tuple((str(name), str(lab)) for name, lab in document.get("phases", ())),
                   figures={strategy: {phase: tuple(values) for phase, values in by_phase.items()}
                            for strategy, by_phase in (document.get("figures") or {}).items()},
                   totals=dict(document.get("totals") or {}))


Fail = Callable[[tuple, str], None]


def read_reference(table: object, fail: Fail, strategies: tuple[str, ...]) -> Reference | None:
    """The `[reference]` table checked, each problem named by its key through `fail(path, message)`;
    `strategies` are the names a strategy table may have."""
    if table is None:
        return None
    path = ("reference",)
    if not isinstance(table, dict):
        fail(path, "must be a table: source, phases and strategies")
        return None
    for key in sorted(set(table) - {"source", "phases", "strategies"}):
        fail((*path, key), "unknown field (expected one of: phases, source, strategies)")
    source = table.get("source")
    if not isinstance(source, str) or not source.strip():
        fail((*path, "source"), "missing: where the figures come from (a title, a link or a docs/ page)")
    phases = _phases(table.get("phases"), fail)
    figures, totals = {}, {}
    by_strategy = table.get("strategies", {})
    if not isinstance(by_strategy, dict) or not by_strategy:
        fail((*path, "strategies"), "must hold a table per strategy, e.g. [reference.strategies.range]")
        by_strategy = {}
    names = {name for name, _ in phases}
    for strategy, values in by_strategy.items():
        where = (*path, "strategies", strategy)
        if strategy not in strategies:
            fail(where, f"unknown strategy {strategy!r} (expected one of: {', '.join(strategies)})")
            continue
        if not isinstance(values, dict):
            fail(where, "must be a table: a phase of `phases` = [records over 3 s, max latency ms, "
                        "time rebalancing ms], and total")
            continue
        figures[strategy], total = _figures(values, names, where, fail)
        if total is not None:
            totals[strategy] = total
    return Reference(source=str(source or ""), phases=phases, figures=figures, totals=totals)


def _phases(value: object, fail: Fail) -> tuple[tuple[str, str], ...]:
    where = ("reference", "phases")
    if not isinstance(value, dict) or not value:
        fail(where, 'must map the reference\'s phase names to the lab\'s, e.g. { "50 → 100" = "scale-to-100" }')
        return ()
    found = []
    for name, lab in value.items():
        if not isinstance(lab, str) or not lab:
            fail((*where, name), f"must name one of the timeline's phases, got {lab!r}")
            continue
        found.append((name, lab))
    return tuple(found)


def _figures(values: dict, names: set[str], where: tuple, fail: Fail) -> tuple[dict, float | None]:
    figures, total = {}, None
    for key, given in values.items():
        if key == TOTAL_KEY:
            total = _number(given)
            if total is None:
                fail((*where, key), f"must be a number of records (0 or more), got {given!r}")
            continue
        if key not in names:
            fail((*where, key), f"not a phase of reference.phases (those are: {', '.join(sorted(names))})")
            continue
        numbers = [_number(item) for item in given] if isinstance(given, list) else []
        if len(numbers) != len(MEASURES) or None in numbers:
            fail((*where, key), f"must be three numbers (0 or more): [{', '.join(MEASURES)}], got {given!r}")
            continue
        figures[key] = tuple(numbers)
    return figures, total


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return None
    return float(value)
