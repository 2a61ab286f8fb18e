"""A campaign's headline claims, declared in its file before the runs, each given one verdict.

A claim says that some cells exceed others on one metric of one scenario ("legacy's requests per join
exceed classic's at every N"). It holds only if every pair it names holds: each `higher` cell against each
`lower` cell, at every sweep value both ran. The direction is declared before the runs, so each pair gets
the one-sided exact test of `experiments.summary.inference` (higher greater than lower); the claim's
p-value is the largest of its pairs' (an intersection-union test: a claim made of several pairs is only as
strong as its weakest), and its shift the smallest. Every claim gets its p, cells that gave one value in
every run included ("identical in all n runs" describes them, it decides nothing).

The family is fixed before the runs: every claim of every campaign file the page is made from, whatever
its data. Holm's step-down over those k claims keeps the chance that any supported claim is wrong at most
5%; a claim that cannot be tested (too few runs, no runs, a measure timing can move from runs made beside
another) still counts in k, as a p of 1.

Verdicts:
- **supported**: every pair's shift points the claimed way and the claim survives Holm at 0.05;
- **not supported**: enough runs, and a shift points the other way or the claim does not survive Holm;
- **undetermined (n too small)**: some pair has fewer than 5 runs on a side;
- **undetermined (no runs)**: no pair was run;
- **undetermined (timings of parallel runs)**: the claim's measure is one timing can move and some of its
  runs ran beside another (`--parallel` > 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from experiments.campaign.model import Claim, selects
from experiments.summary.inference import (
    ALPHA,
    BOTH_CONSTANT,
    MIN_RUNS,
    ONE_SIDED,
    PARALLEL_TIMING,
    TESTED,
    Comparison,
    compare,
    coverage_text,
    holm,
    holm_adjusted,
    ran_beside,
)

SUPPORTED = "supported"
NOT_SUPPORTED = "not supported"
TOO_FEW = "undetermined (n too small)"
NO_RUNS = "undetermined (no runs)"
BESIDE = "undetermined (timings of parallel runs)"


@dataclass(frozen=True)
class ClaimResult:
    claim: Claim
    verdict: str
    p: float            # the largest one-sided p-value of the claim's pairs (nan when not tested)
    p_holm: float       # after Holm's adjustment over the k declared claims
    k: int              # the size of the declared family
    shift: float        # the smallest shift (higher - lower) of its pairs
    low: float          # that pair's interval
    high: float
    coverage: float     # the interval's coverage: exact, or a lower bound (`exact`)
    exact: bool
    pairs: int
    n: str              # the smallest runs per side, "a/b"
    described: str = ""   # "identical in all 5/5 runs" and the like: a description, not a verdict
    sides: str = ONE_SIDED
    campaign: str = ""    # the campaign file that declared it, on a page made from several


def _cells(runs: pd.DataFrame, claim: Claim, selector: str) -> pd.DataFrame:
    rows = runs[(runs["scenario"] == claim.scenario) & (runs["metric"] == claim.metric)]
    chosen = [selects(selector, backend, strategy) for backend, strategy in zip(rows["backend"], rows["strategy"],
                                                                                strict=True)]
    return rows.loc[np.asarray(chosen, dtype=bool)]


def _pairs(runs: pd.DataFrame, claim: Claim) -> list[Comparison]:
    found = []
    for high_selector in claim.higher:
        for low_selector in claim.lower:
            high, low = _cells(runs, claim, high_selector), _cells(runs, claim, low_selector)
            for (sweep, h_backend, h_strategy), h_rows in high.groupby(["sweep", "backend", "strategy"]):
                for (l_backend, l_strategy), l_rows in low[low["sweep"] == sweep].groupby(["backend", "strategy"]):
                    if (h_backend, h_strategy) != (l_backend, l_strategy):
                        beside = ran_beside(l_rows, claim.metric) or ran_beside(h_rows, claim.metric)
                        found.append(compare(l_rows["value"].to_numpy(), h_rows["value"].to_numpy(), beside=beside,
                                             sides=ONE_SIDED))
    return found


def _described(pairs: list[Comparison]) -> str:
    if pairs and all(pair.case == BOTH_CONSTANT for pair in pairs):
        n = f"{min(pair.n_a for pair in pairs)}/{min(pair.n_b for pair in pairs)}"
        if all(pair.shift == 0 for pair in pairs):
            return f"identical in all {n} runs"
        return f"one value in every run of each cell, n = {n}"
    return ""


def evaluate(runs: pd.DataFrame, claims: Sequence[Claim]) -> list[ClaimResult]:
    """Every claim's verdict, with Holm's adjustment over all of them (k = len(claims))."""
    return evaluate_family([("", runs, claims)])


def evaluate_family(campaigns: Sequence[tuple[str, pd.DataFrame, Sequence[Claim]]]) -> list[ClaimResult]:
    """The claims of several campaign files (name, runs, claims), each tested on its own campaign's runs only
    (two campaigns may run one scenario under different settings), with Holm's adjustment over the whole
    family."""
    partial = []
    for name, runs, claim in ((name, runs, claim) for name, runs, claims in campaigns for claim in claims):
        pairs = _pairs(runs, claim)
        if not pairs:
            partial.append((name, claim, NO_RUNS, math.nan, None, pairs))
            continue
        weakest = min(pairs, key=lambda pair: pair.shift)
        if any(pair.status == PARALLEL_TIMING for pair in pairs):
            partial.append((name, claim, BESIDE, math.nan, weakest, pairs))
        elif any(pair.status != TESTED for pair in pairs):
            partial.append((name, claim, TOO_FEW, math.nan, weakest, pairs))
        else:
            partial.append((name, claim, None, max(pair.p for pair in pairs), weakest, pairs))
    p_values = [item[3] for item in partial]
    adjusted, rejected = holm_adjusted(p_values), holm(p_values, ALPHA)
    results = []
    for index, (name, claim, verdict, p, weakest, pairs) in enumerate(partial):
        if verdict is None:
            holds = bool(rejected[index]) and all(pair.shift > 0 for pair in pairs)
            verdict = SUPPORTED if holds else NOT_SUPPORTED
        shift = (weakest.shift, weakest.low, weakest.high, weakest.coverage) if weakest else (math.nan,) * 4
        n = f"{min(pair.n_a for pair in pairs)}/{min(pair.n_b for pair in pairs)}" if pairs else "-"
        results.append(ClaimResult(claim, verdict, p, math.nan if math.isnan(p) else adjusted[index], len(partial),
                                   *shift, weakest.exact if weakest else True, len(pairs), n, _described(pairs),
                                   campaign=name))
    return results


def claims_frame(results: list[ClaimResult]) -> pd.DataFrame:
    columns = ["says", "scenario", "metric", "higher", "lower", "verdict", "p", "sides", "p_holm", "k", "shift", "low",
               "high", "coverage", "coverage_exact", "pairs", "n", "described"]
    return pd.DataFrame([{"says": r.claim.says, "scenario": r.claim.scenario, "metric": r.claim.metric,
                          "higher": ", ".join(r.claim.higher), "lower": ", ".join(r.claim.lower),
                          "verdict": r.verdict, "p": r.p, "sides": r.sides, "p_holm": r.p_holm, "k": r.k,
                          "shift": r.shift, "low": r.low, "high": r.high, "coverage": r.coverage,
                          "coverage_exact": r.exact, "pairs": r.pairs, "n": r.n, "described": r.described}
                         for r in results], columns=columns)


def claims_markdown(results: list[ClaimResult]) -> str:
    """The page's opening: each declared claim, its verdict, p (one-sided), Holm's p over the k declared
    claims, and its shift with the interval's coverage."""
    if not results:
        return ""
    k = len(results)
    named = any(result.campaign for result in results)
    lines = ["## Claims declared before the runs\n",
             f"Each claim was written in a campaign file before any run; the family is every claim of the campaign "
             f"files this page is made from, k = {k}, whatever the data. A claim holds only if every pair of cells "
             f"it names holds (its p is the largest of theirs, its shift the smallest). Each pair gets the exact "
             f"Mann-Whitney test, one-sided in the declared direction; Holm's adjustment over the k = {k} claims "
             f"(a claim that could not be tested counts as p = 1) keeps the chance that any supported claim is "
             f"wrong at most {ALPHA:.0%}. A pair needs {MIN_RUNS} runs a side. Cells that gave one value in every "
             f"run are tested like any other: five identical runs do not show that a measure never varies. The "
             f"shift is Hodges-Lehmann's (the median of every difference higher - lower) with its "
             f"distribution-free interval and that interval's coverage for its data (exact, or \"≥\" a bound that "
             f"errs low).\n",
             ("| campaign " if named else "")
             + f"| claim | verdict | p | Holm p (k = {k}) | shift, higher - lower [interval, coverage] | pairs | n |",
             ("| --- " if named else "") + "| --- | --- | --- | --- | --- | --- | --- |"]
    for result in results:
        p = "-" if math.isnan(result.p) else f"{result.p:.2g} ({result.sides})"
        p_holm = "-" if math.isnan(result.p_holm) else f"{result.p_holm:.2g}"
        coverage = "" if math.isnan(result.coverage) else f", {coverage_text(result.coverage, result.exact)}"
        shift = ("-" if math.isnan(result.shift)
                 else f"{_figure(result.shift)} [{_figure(result.low)}, {_figure(result.high)}{coverage}]")
        if result.described:
            shift += f"; {result.described}"
        lead = f"| {result.campaign} " if named else ""
        lines.append(f"{lead}| {result.claim.says} | **{result.verdict}** | {p} | {p_holm} | {shift} | {result.pairs} "
                     f"| {result.n} |")
    return "\n".join(lines) + "\n"


def _figure(value: float) -> str:
    """Three significant digits below 1,000, whole numbers with separated thousands above, never in exponent
    form (5,112, not 5.11e+03)."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
