"""What a set of runs shows, in sentences generated from their summaries (never written by hand).

A report opens with one short paragraph per scenario. It says what differs between backends, with the
numbers and n:

- a scenario run once per backend (split brain, churn): each check that found something, grouped by
  the backends it found it on ("on all three backends", "only on legacy"), with the count or the
  seconds; then protections that fired, checks that could not tell, and how many checks were ok
  everywhere;
- a scenario swept over group sizes (the herd): requests per membership change by N per backend,
  the log-log slope, and the fitted cost model's terms (`herd_model_sentence`); then the checks as above;
- a campaign (`campaign_findings`): the same sentences over the campaign's statistics, every number as
  `median [min-max]` with its n, and the differences between backends that hold up.

The runs come grouped by scenario (experiments.report.scenario_runs).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pandas as pd

from experiments.report.scenario_runs import ScenarioRuns, backend_order, reading_of
from experiments.summary import checks
from experiments.summary.herd_sizes import by_size, size_text
from experiments.summary.read_back import RunData, herd_points, herd_slopes
from experiments.summary.verdict_words import Word

# -- numbers in words --------------------------------------------------------------------------


def count(value: float | None) -> str:
    """A count: whole, with thousands separators; "-" where there is none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.0f}"


def seconds(value: float | None) -> str:
    """Seconds to 0.1."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.1f}"


def names(items: Iterable[str]) -> str:
    """"legacy", "legacy and classic", "legacy, classic and kip848"."""
    items = list(items)
    return " and ".join(items) if len(items) < 3 else ", ".join(items[:-1]) + " and " + items[-1]


_NUMBER_WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}


def spread_text(median: float, low: float, high: float, *, unit: str = "") -> str:
    """`18.0 [17.8-20.8] s`: the median and the range of the repetitions, in the metric's precision."""
    show = seconds if unit == "s" else count if all(float(v).is_integer() for v in (median, low, high)) else seconds
    suffix = f" {unit}" if unit in ("s", "ms") else ""
    if unit == "ms":
        show = count
    middle = show(median)
    return (f"{middle}{suffix}" if low == high == median else f"{middle} [{show(low)}-{show(high)}]{suffix}")


# -- what the checks found ---------------------------------------------------------------------



def _amount(check: str, runs: list[RunData]) -> str:
    """The number a finding carries, for one column's runs (the median when there are several): seconds
    of double ownership, records for the record checks, the check's count otherwise."""
    values = []
    for run in runs:
        reading = reading_of(run, check)
        if reading is None or reading.word in (Word.OK, Word.UNKNOWN):
            continue
        evidence = run.evidence.get(check)
        if check == checks.DOUBLE_OWNERSHIP.name and evidence is not None and "duration_s" in evidence and len(evidence):
            values.append(("s", float(evidence["duration_s"].sum())))
        elif check == checks.CONSUMED_WITHOUT_OWNERSHIP.name and evidence is not None and "records" in evidence and len(evidence):
            values.append(("", float(evidence["records"].sum())))
        else:
            values.append(("", float(reading.count)))
    if not values:
        return ""
    unit = values[0][0]
    middle = float(pd.Series([value for _, value in values]).median())
    return f"{seconds(middle)} s" if unit == "s" else count(middle)


def _where(chosen: list[str], columns: list[str]) -> str:
    if len(columns) == 1:
        return f"on {chosen[0]}"
    if len(chosen) == len(columns):
        return f"on all {_NUMBER_WORDS.get(len(columns), len(columns))} backends" if len(columns) > 2 else "on both backends"
    return f"only on {names(chosen)}"


def _range(amounts: list[str]) -> str:
    """"10.4-23.5 s" from ["23.5 s", "10.4 s", "19.1 s"]; counts likewise."""
    unit = " s" if amounts[0].endswith(" s") else ""
    numbers = sorted(float(a.removesuffix(" s").replace(",", "")) for a in amounts)
    show = seconds if unit else count
    low, high = show(numbers[0]), show(numbers[-1])
    return (low if low == high else f"{low}-{high}") + unit


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def conditions_sentences(scenario: ScenarioRuns) -> list[str]:
    """The runs' conditions first, in numbers: whether the machine carried them. Every run that was not ok
    gets its reasons; runs that were ok are counted."""
    lines, ok = [], 0
    for column in scenario.columns:
        for run in scenario.runs_of(column):
            reading = reading_of(run, checks.CONDITIONS.name)
            if reading is None:
                continue
            if reading.word is Word.OK:
                ok += 1
                continue
            where = f"{column} at {size_text(run)}" if scenario.swept else column
            lines.append(f"Run conditions {reading.label} on {where}: {reading.meaning}.")
    if ok and not lines:
        only = scenario.runs[0] if len(scenario.runs) == 1 else None
        meaning = reading_of(only, checks.CONDITIONS.name).meaning if only is not None else ""
        lines.append(f"Run conditions ok{': ' + meaning if meaning else ' on every run'}.")
    elif ok:
        lines.append(f"Run conditions ok on the other {ok} run{'s' if ok > 1 else ''}.")
    return lines


def check_sentences(scenario: ScenarioRuns) -> list[str]:
    """The checks of a scenario in sentences: findings grouped by where they happened, then protections,
    then checks that could not tell, then the count of checks ok everywhere."""
    columns = scenario.columns
    found: dict[tuple[str, ...], list[str]] = {}
    protected: list[str] = []
    counted: list[str] = []   # cross-checks whose two counts differ, per column
    unknown: dict[str, list[tuple[str, str]]] = {}
    clean = 0
    sentences: list[str] = []
    for check in scenario.checks():
        if check == checks.CONDITIONS.name:
            continue
        readings = {column: scenario.reading(check, column) for column in columns}
        words = {column: reading.word for column, reading in readings.items() if reading is not None}
        violated = [column for column in columns if words.get(column) is Word.VIOLATED]
        guarded = [column for column in columns if words.get(column) is Word.PROTECTED]
        differ = [column for column in columns if words.get(column) is Word.DIFFER]
        untold = [column for column in columns if words.get(column) is Word.UNKNOWN]
        if differ:
            counted.append(f"{names(differ)} ({'; '.join(readings[column].difference for column in differ)})")
        if not violated and not guarded and not untold and not differ:
            clean += 1
            continue
        noun = spec.phrase if (spec := checks.spec(check)) else check
        if violated:
            amounts = [_amount(check, scenario.runs_of(column)) for column in violated]
            if len(violated) == 1 or len(columns) == 1:
                shown = amounts[0]
            elif len(violated) == len(columns):
                shown = _range(amounts)
            else:
                shown = ", ".join(f"{column} {amount}" for column, amount in zip(violated, amounts, strict=True))
            found.setdefault(tuple(violated), []).append(f"{noun} ({shown})" if shown else noun)
        if guarded:
            amounts = [_amount(check, scenario.runs_of(column)) for column in guarded]
            protected.append(f"{noun} on {names(guarded)} ({', '.join(amounts)})")
        for column in untold:
            for run in scenario.runs_of(column):
                reading = reading_of(run, check)
                if reading is not None and reading.word is Word.UNKNOWN:
                    where = f"{column} at {size_text(run)}" if scenario.swept else column
                    unknown.setdefault(where, []).append((check, reading.meaning))
    for where, nouns in sorted(found.items(), key=lambda item: (-len(item[0]), [columns.index(c) for c in item[0]])):
        sentences.append(f"Found: {names(nouns)}." if len(columns) == 1 else
                         _sentence(f"{names(nouns)} {_where(list(where), columns)}."))
    if protected:
        sentences.append("Protection: " + "; ".join(protected) + ".")
    if counted:
        sentences.append("The servers' and the members' request counts differ on " + "; ".join(counted)
                         + ": a cross-check of the measurement, not an anomaly; the figures use the members' counts.")
    for where, untold_checks in unknown.items():
        if len(untold_checks) == 1:
            check, meaning = untold_checks[0]
            sentences.append(_sentence(f"{check}: unknown on {where}" + (f" ({meaning})." if meaning else ".")))
        else:
            sentences.append(f"{len(untold_checks)} checks unknown on {where} (the log lacks what they need: "
                             f"{untold_checks[0][1]}, ...).")
    total = len([check for check in scenario.checks() if check != checks.CONDITIONS.name])
    runs = " on every run" if len(scenario.runs) > 1 else ""
    if total and clean == total:
        sentences.append(f"All {total} checks ok{runs}.")
    elif clean:
        sentences.append(f"{clean} other check{'s' if clean != 1 else ''} ok{runs}.")
    return sentences


# -- the herd ---------------------------------------------------------------------------------

def herd_costs(runs: Sequence[RunData]) -> pd.DataFrame:
    """Requests per change by backend, strategy, group size N and kind of change (join, leave): the median
    over a run's changes of that kind to a group of its size, then over the runs of the same line and N.
    `line` names it (`kip848 (uniform)`); `overlapped`: some such change began before the one before it
    was stable, or was not stable when the next began (experiments.summary.herd.overlapping)."""
    from experiments.summary.herd_model import line_label

    rows = []
    for run in by_size(runs):
        changes = run.herd_changes()
        if run.group_size is None or changes.empty:
            continue
        strategy = run.strategy
        for kind, group in changes.groupby("kind"):
            overlapped = bool(group["overlapped"].fillna(False).any()) if "overlapped" in group else False
            rows.append({"backend": run.backend, "strategy": strategy, "line": line_label(run.backend, strategy),
                         "N": int(run.group_size), "kind": str(kind), "requests": float(group["requests"].median()),
                         "overlapped": overlapped})
    columns = ["backend", "strategy", "line", "N", "kind", "requests", "overlapped"]
    if not rows:
        return pd.DataFrame(columns=columns)
    return pd.DataFrame(rows).groupby(columns[:5], as_index=False).agg(
        requests=("requests", "median"), overlapped=("overlapped", "any"))[columns]


def _line_order(line: str) -> tuple[int, str]:
    return backend_order(line.split(" ")[0])


def herd_sentence(points: pd.DataFrame, *, n: int | None = None, runs: Sequence[RunData] = ()) -> str:
    """The herd's finding: requests per join and per leave by group size and backend (from `runs`; the
    median of the two, from `points`, without them), then the fitted cost model (`herd_model_sentence`),
    or the log-log slopes where there is none. `points` is `read_back.herd_points`."""
    if points.empty:
        return "No membership change was measured."
    sizes = sorted(points["N"].unique())
    at = f"at N = {' / '.join(str(int(size)) for size in sizes)}"
    costs = herd_costs(runs)
    sentences = []
    kinds = [kind for kind in ("join", "leave") if kind in set(costs["kind"])]
    for kind in kinds:
        mine = costs[costs["kind"] == kind]
        parts = [f"{line} " + " / ".join(_cost(group, size) for size in sizes)
                 for line, group in sorted(mine.groupby("line"), key=lambda item: _line_order(str(item[0])))]
        sentences.append(f"Requests per {kind} {at}: {'; '.join(parts)}.")
    if costs["overlapped"].any():
        sentences.append("*: the change overlapped another (the next began before it was stable).")
    if not kinds:
        parts = []
        for backend, group in sorted(points.groupby("backend"), key=lambda item: backend_order(str(item[0]))):
            by_n = group.groupby("N")["requests_per_change"].median()
            parts.append(f"{backend} " + " / ".join(count(by_n.get(size)) for size in sizes))
        sentences.append(f"Requests per membership change (median of the join and the leave) {at}: "
                         f"{'; '.join(parts)}.")
    model = herd_model_sentence(points, runs)
    slopes = herd_slopes(points)
    if model:
        sentences.append(model)
    elif slopes:
        ordered = sorted(slopes.items(), key=lambda item: backend_order(item[0]))
        sentences.append("Log-log slope " + ", ".join(f"{backend} {slope:.1f}" for backend, slope in ordered)
                         + " (1: grows as N, 2: as N squared).")
    text = " ".join(sentences)
    return text[:-1] + f" (n = {n} per backend and N)." if n else text


def _cost(costs: pd.DataFrame, size: int) -> str:
    """One line's requests at N = `size`, starred where a change overlapped another."""
    row = costs[costs["N"] == size]
    if row.empty:
        return "-"
    return count(row["requests"].iloc[0]) + ("*" if row["overlapped"].iloc[0] else "")


def herd_model_sentence(points: pd.DataFrame, runs: Sequence[RunData] = ()) -> str | None:
    """The fitted cost model of a join per backend (`experiments.summary.herd_model`, the terms each backend's profile
    names), in a sentence; None without runs. A model that could not be fitted is said once, with why.

    The hook takes the herd points (as `herd_sentence` and the herd chart do) and the runs whose changes
    the model is fitted to."""
    del points   # the model fits the runs' individual changes, not the medians of the points
    if not runs:
        return None
    from experiments.summary.herd_model import TERM_MEANING, HerdModel, NoFit, change_rows, fit_models

    models = fit_models(change_rows(list(runs)), kinds=("join",))
    fitted = sorted((model for model in models if isinstance(model, HerdModel)),
                    key=lambda model: (backend_order(model.backend), model.strategy))
    reasons = sorted({model.reason for model in models if isinstance(model, NoFit)})
    left_out = sum(model.left_out for model in models)
    overlapped = (f"; {left_out} overlapped change{'s' if left_out != 1 else ''} left out"
                  if left_out else "")
    if not fitted:
        return f"No fitted cost model ({'; '.join(reasons)}{overlapped})." if reasons else None
    fits = min(model.fits for model in fitted)
    terms = sorted({coefficient.term for model in fitted for coefficient in model.coefficients} - {"1", "N2", "N"})
    legend = "".join(f", {'M' if term == 'moved' else term}: {TERM_MEANING[term]}" for term in terms)
    constant = [model.label for model in fitted if model.terms == ("1",)]
    same_m = f"; {names(constant)}: the same M in every join, a constant" if constant else ""
    return ("Fitted cost of a join: " + "; ".join(f"{model.label} ≈ {model.formula}" for model in fitted)
            + f" (least squares over {len(fitted[0].sizes)} group sizes, n = {fits} fit{'s' if fits != 1 else ''}"
            + f"{legend}{same_m}{overlapped}).")


# -- a report's findings ------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Finding:
    """One scenario's paragraph: its name, what ran (backends, sizes, n), and what the runs show."""

    scenario: str
    ran: str
    text: str

    @property
    def line(self) -> str:
        return f"{self.scenario} ({self.ran}): {self.text}"


# -- time without a coordinator -----------------------------------------------------------------

GAP_WORDS = "Longest time a member went without its group coordinator (coordinator_gap_s)"


def coordinator_gaps(runs: Sequence[RunData]) -> list[float]:
    """The runs' `coordinator_gap_s` (experiments.summary.coordinator_gaps), where a run has one."""
    values = [run.facts.coordinator_gap_s for run in runs]
    return [float(value) for value in values if value is not None and not pd.isna(value)]


def gap_text(values: list[float]) -> str:
    """`9.1 s` for one run; `9.1 [8.9-9.4] s, n = 5` for several."""
    series = pd.Series(values)
    if len(values) == 1:
        return f"{seconds(values[0])} s"
    return f"{spread_text(series.median(), series.min(), series.max(), unit='s')}, n = {len(values)}"


def gap_sentence(scenario: ScenarioRuns) -> str:
    """The scenario's coordinator gap per column, in a sentence; "" where no run has one (no coordinator was
    killed or cut off, or the backend has none: legacy's members coordinate in ZooKeeper)."""
    parts = [f"{column} {gap_text(values)}" for column in scenario.columns
             if (values := coordinator_gaps(scenario.runs_of(column)))]
    return f"{GAP_WORDS}: {'; '.join(parts)}." if parts else ""


def scenario_finding(scenario: ScenarioRuns) -> Finding:
    """What a scenario's runs show: whether the machine carried them (their conditions), the herd sentence when
    it was swept, then its checks in sentences, then the time without a coordinator where the scenario took it
    away."""
    n = scenario.runs_per_cell
    each = ("one run" if len(scenario.runs) == 1 else "one run each") if n == 1 else f"{n} runs each"
    sizes = f" at N = {', '.join(map(str, scenario.sizes))}" if scenario.swept else ""
    ran = f"{names(scenario.columns)}{sizes}; {each}, n = {n}"
    lead = herd_sentence(herd_points(list(scenario.runs)), runs=scenario.runs) if scenario.swept else ""
    return Finding(scenario=scenario.name, ran=ran,
                   text=" ".join(part for part in (*conditions_sentences(scenario), lead, *check_sentences(scenario),
                                                   gap_sentence(scenario)) if part))


def findings(scenarios_: list[ScenarioRuns]) -> list[Finding]:
    """One finding per scenario, in report order."""
    return [scenario_finding(scenario) for scenario in scenarios_]
