"""Power, computed rather than drawn: the chance the claims' test supports a claim, under a stated model of
the runs, and the runs a cell that make it 80%.

    [[detect]]                       # any number of them, in a campaign file
    scenario = "split-brain-a"       # optional: the scenario the shift is expected in
    metric = "duplicates"
    shift = 30                       # the smallest shift worth finding, in the metric's unit
    sd = 15                          # the run-to-run standard deviation expected (from earlier runs)

The test is a declared claim's (`inference.claim_p`), at Holm's strictest step over the family of k,
alpha / k (a claim's first step; later steps are easier, so the power errs low). At that level it supports a
pair when the higher cell's k_b-th lowest run lies above the lower cell's k_a-th highest, (k_a, k_b) the
last of `inference.claim_steps` whose level is at most alpha / k; a claim of several pairs needs every pair
at once. The model: every run normal, each cell with its mean and run-to-run sd (a cell of sd 0 gives its
mean in every run), the higher cells a shift above the highest lower cell. The chance that every higher
cell's k_b-th lowest run lies above every lower cell's k_a-th highest is a one-dimensional integral of the
order statistics' distributions (P(X(k) <= t) = P(Binomial(n, F(t)) >= k), scipy's beta distribution),
summed by the trapezoid rule on a grid of `GRID` points across each cell's mean +- 12 sd (a cell of sd 0: its value); sweep points are independent, so a
claim's power is the product over them. Ten times the grid moves no figure by 0.01 points
(tests/test_power.py): the figures are computed, not drawn, and the same on every machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from experiments.campaign.model import Detect
from experiments.statistics.inference import ALPHA, MIN_RUNS, claim_steps, smallest_claim_p

TARGET = 0.80
MOST_RUNS = 60
GRID = 2_001
WIDTH = 12          # the grid spans each cell's mean +- WIDTH sd


@dataclass(frozen=True)
class Cell:
    mean: float
    sd: float           # 0: the mean in every run


def step_at(n_lower: int, n_higher: int, threshold: float) -> tuple[int, int] | None:
    """(k_lower, k_higher) of the last step of the claims' test whose level is at most `threshold`; None when
    even complete separation is above it."""
    met = [(k_a, k_b) for k_a, k_b, level in claim_steps(n_lower, n_higher) if level <= threshold * (1 + 1e-12)]
    return met[-1] if met else None


def _order_at_most(cell: Cell, n: int, k: int, t: np.ndarray) -> np.ndarray:
    """P(X(k) <= t), X(k) the k-th lowest of n runs of the cell."""
    if cell.sd == 0:
        return (t >= cell.mean).astype(float)
    return stats.beta.cdf(stats.norm.cdf(t, cell.mean, cell.sd), k, n - k + 1)


def separation(higher: Sequence[Cell], lower: Sequence[Cell], n: int, k_lower: int, k_higher: int,
               grid: int = GRID) -> float:
    """P(every higher cell's k_higher-th lowest run > every lower cell's k_lower-th highest run), n runs a
    cell: the integral of P(min over higher > t) against the distribution of the max over lower."""
    cells = [*higher, *lower]
    t = np.unique(np.concatenate([np.linspace(cell.mean - WIDTH * cell.sd, cell.mean + WIDTH * cell.sd,
                                              grid if cell.sd else 1) for cell in cells]))
    at_most = np.ones_like(t)
    for cell in lower:
        at_most *= _order_at_most(cell, n, n + 1 - k_lower, t)
    above = np.ones_like(t)
    for cell in higher:
        above *= 1.0 - _order_at_most(cell, n, k_higher, t)
    mass = np.diff(np.concatenate([[0.0], at_most]))
    # the trapezoid over each step where both are continuous; where the max over lower has a single value,
    # the chance of being strictly above it (a tie does not separate); just below a higher cell's single
    # value, the chance from the left
    before = np.concatenate([[above[0]], above[:-1]])
    jumps = np.isin(t, [cell.mean for cell in lower if cell.sd == 0])       # the max over lower has mass there
    drops = np.isin(t, [cell.mean for cell in higher if cell.sd == 0])      # the min over higher reaches it
    weight = np.where(jumps, above, np.where(drops, before, (above + before) / 2))
    return float(np.clip((weight * mass).sum(), 0.0, 1.0))


def claim_power(points: Sequence[tuple[Sequence[Cell], Sequence[Cell]]], n: int, threshold: float) -> float:
    """The chance the claims' test supports every pair of a claim at `threshold`, n runs a cell: per sweep
    point (higher cells, lower cells), independent of the others."""
    step = step_at(n, n, threshold)
    if step is None:
        return 0.0
    k_lower, k_higher = step
    return float(np.prod([separation(higher, lower, n, k_lower, k_higher) for higher, lower in points]))


def runs_for_power(points, threshold: float, *, target: float = TARGET, most: int = MOST_RUNS) -> tuple[int | None, float]:
    """The fewest runs a cell (at least MIN_RUNS) whose power reaches `target`, and that power; None when
    even `most` runs do not."""
    reached = 0.0
    for n in range(MIN_RUNS, most + 1):
        reached = claim_power(points, n, threshold)
        if reached >= target:
            return n, reached
    return None, reached


def declared_points(shift: float, sd: float, pairs: int = 1) -> list[tuple[list[Cell], list[Cell]]]:
    """A declared model: `pairs` independent pairs, each a lower cell at 0 and a higher one `shift` above,
    both of run-to-run sd `sd`."""
    return [([Cell(shift, sd)], [Cell(0.0, sd)]) for _ in range(pairs)]


def power(n: int, shift: float, sd: float, *, k: int = 1, pairs: int = 1) -> float:
    """The power of `pairs` independent pairs of n runs a cell, `shift` apart, sd `sd`, at ALPHA / k."""
    return claim_power(declared_points(shift, sd, pairs), n, ALPHA / max(k, 1))


def power_line(detect: Detect, k: int, ran: int | None = None) -> str:
    """One sentence: the shift, the n that gives it 80% power and the power of the n the campaign ran (one
    pair, both cells of the declared sd)."""
    threshold = ALPHA / max(k, 1)
    points = declared_points(detect.shift, detect.sd)
    n, reached = runs_for_power(points, threshold)
    where = f" in {detect.scenario}" if detect.scenario else ""
    needs = (f"{TARGET:.0%} power needs n = {n} a cell ({reached:.1%})" if n is not None
             else f"{MOST_RUNS} runs a cell reach only {reached:.1%} power")
    line = (f"{detect.metric}{where}: a shift of {detect.shift:,.6g} with a run-to-run sd of {detect.sd:,.6g} "
            f"({detect.shift / detect.sd:.2g} sd; normal runs): {needs}; the claims' test at {ALPHA:g}/{max(k, 1)} "
            f"= {threshold:.2g}, computed, not drawn")
    if ran is not None:
        line += (f"; the campaign ran n = {ran}, power {claim_power(points, ran, threshold):.1%}"
                 if ran >= 2 else f"; the campaign ran n = {ran}")
    return line + "."


# -- every claim's own power -------------------------------------------------------------------------------

NO_SHIFT_SDS = 3    # a claim whose file declares no shift for its measure: the shift is this many observed sd


@dataclass(frozen=True)
class ClaimPower:
    """A claim's power at the runs its campaign made and the runs a cell that give it 80%, under the file's
    model (every cell of the declared sd) and the runs' own (each cell of its observed sd)."""
    campaign: str
    says: str
    metric: str
    pairs: int
    ran: int
    shift: float
    declared_shift: bool      # else NO_SHIFT_SDS observed sd
    sd: float | None          # declared; None when the file declares none for the measure
    power_declared: float | None
    sds: tuple[float, float]  # the smallest and largest observed sd among the claim's cells
    power_observed: float
    needed: int | None        # runs a cell for TARGET under the observed model; None: more than MOST_RUNS
    constant: tuple[str, ...]  # the claim's cells that gave one value in every run, "backend/strategy (value)"


def claim_powers(campaign: str, runs, claims, detections: Sequence[Detect], k: int) -> list[ClaimPower]:
    """Each claim of a campaign: its shift (the file's `[[detect]]` for its measure and scenario, else
    NO_SHIFT_SDS observed sd), and its power at Holm's first step over k."""
    from experiments.statistics.claims import claim_pairs

    threshold = ALPHA / max(k, 1)
    found = []
    for claim in claims:
        pairs = claim_pairs(runs, claim)
        if not pairs:
            continue
        detect = next((d for d in detections if d.metric == claim.metric and d.scenario in (None, claim.scenario)),
                      None)
        cells: dict[tuple[str, tuple[str, str]], np.ndarray] = {}
        for pair in pairs:
            cells[(pair.sweep, pair.lower)] = pair.lower_values
            cells[(pair.sweep, pair.higher)] = pair.higher_values
        sds = {key: float(np.std(values, ddof=1)) if len(values) > 1 else 0.0 for key, values in cells.items()}
        largest = max(sds.values())
        shift = detect.shift if detect else NO_SHIFT_SDS * largest if largest else 1.0
        declared, observed = [], []
        for sweep in dict.fromkeys(pair.sweep for pair in pairs):
            lower = list(dict.fromkeys(pair.lower for pair in pairs if pair.sweep == sweep))
            higher = list(dict.fromkeys(pair.higher for pair in pairs if pair.sweep == sweep))
            top = max(float(np.median(cells[(sweep, cell)])) for cell in lower)
            observed.append(([Cell(top + shift, sds[(sweep, cell)]) for cell in higher],
                             [Cell(float(np.median(cells[(sweep, cell)])), sds[(sweep, cell)]) for cell in lower]))
            if detect:
                declared.append(([Cell(shift, detect.sd)] * len(higher), [Cell(0.0, detect.sd)] * len(lower)))
        ran = min(len(values) for values in cells.values())
        needed, _ = runs_for_power(observed, threshold)
        constant = tuple(dict.fromkeys(f"{'/'.join(cell)} ({_value(values[0])})"
                                       for (_, cell), values in cells.items() if np.all(values == values[0])))
        found.append(ClaimPower(campaign, claim.says, claim.metric, len(pairs), ran, shift, detect is not None,
                                detect.sd if detect else None,
                                claim_power(declared, ran, threshold) if detect else None,
                                (min(sds.values()), largest), claim_power(observed, ran, threshold), needed, constant))
    return found


def _value(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:.3g}"


def amount(value: float) -> str:
    """A shift or an sd as the pages print it: whole with separated thousands from 100 on, else 2 digits."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2g}"


def power_markdown(powers: list[ClaimPower], k: int, models: Sequence[str] = ()) -> str:
    """Every claim's own power; `models`: what each campaign file's model assumes beside what its runs show."""
    threshold = ALPHA / max(k, 1)
    lines = ["## Power\n",
             f"Each claim's power: the chance the claims' test supports it at Holm's first step over this page's "
             f"k = {k} ({ALPHA:g}/{k} = {threshold:.2g}; later steps are easier, so the figures err low), when its "
             f"higher cells lie the shift above its lower ones; a claim of several pairs needs every pair at once "
             f"(its power is the product over its sweep points). Two models, both of normal runs: the campaign "
             f"file's (every cell of the run-to-run sd its `[[detect]]` declares for the measure) and the runs' "
             f"own (each cell of the sd its runs show, the lower cells at their medians; a cell that gave one value "
             f"in every run has no spread). The shift is the one the file declares for the claim's measure, else "
             f"{NO_SHIFT_SDS} observed sd (the claim's largest). Computed, not drawn: the order statistics' "
             f"distributions integrated (experiments/statistics/power.py), each figure exact to 0.01 points. n runs "
             f"a side give a claim's pair no p below 1 - (1 - 2^-n)² ({smallest_claim_p(6, 6):.2g} at 6, "
             f"{smallest_claim_p(10, 10):.2g} at 10), so at 6 runs a cell no claim can pass {threshold:.2g}, "
             f"whatever its shift. The last column is the next campaign's size: the runs a cell that give "
             f"{TARGET:.0%} power at the spreads these runs show, at this page's k.\n",
             "| campaign | claim | pairs | n | shift | power at n, the file's model | power at n, the runs' model "
             f"| runs a cell for {TARGET:.0%}, the runs' model |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for power in powers:
        shift = (f"{amount(power.shift)}" if power.declared_shift
                 else f"{amount(power.shift)} ({NO_SHIFT_SDS} sd; none declared)" if power.sds[1]
                 else "any (no spread; none declared)")
        declared = "-" if power.sd is None else f"sd {amount(power.sd)}: {power.power_declared:.1%}"
        low, high = power.sds
        observed = (f"sd {amount(low)}" + (f" to {amount(high)}" if high != low else "")
                    + f": {power.power_observed:.1%}")
        needed = f"{power.needed}" if power.needed is not None else f"more than {MOST_RUNS}"
        lines.append(f"| {power.campaign} | {power.says} | {power.pairs} | {power.ran} | {shift} | {declared} | "
                     f"{observed} | {needed} |")
    if models:
        lines += ["", "What each file's model assumes, beside what its runs show:", "", *(f"- {line}" for line in models)]
    return "\n".join(lines) + "\n"


