"""A campaign's headline claims, declared in its file before the runs, each given one verdict.

A claim says that some cells exceed others on one metric of one scenario ("legacy's requests per join
exceed classic's at every N"). It holds only if every pair it names holds: each `higher` cell against each
`lower` cell, at every sweep value both ran. Each pair gets the test of the two medians
(`experiments.statistics.inference.claim_p`), one-sided in the declared direction, whose null is "the higher
cell's median run is no larger than the lower's", true to its level whatever the cells' spreads; the
claim's p-value is the largest of its pairs' (an intersection-union test: a claim made of several pairs is
only as strong as its weakest), and its difference of medians the smallest. Every claim gets its p, cells
that gave one value in every run included ("identical in all n runs" describes them, it decides nothing).

The family is fixed before the runs: every claim of every campaign file the page is made from, whatever
its data, and every earlier look at one of them on the same code (`earlier`: the page's ledger of looks,
experiments.report.looks). Holm's step-down over those k keeps the chance that any supported claim is wrong
at most 5%; a claim that cannot be tested (too few runs, no runs, a measure timing can move from runs made
beside another) still counts in k, as a p of 1, and so does every earlier look.

Verdicts:
- **supported**: every pair's difference of medians points the claimed way and the claim survives Holm at
  0.05;
- **not supported**: enough runs, and a difference points the other way or the claim does not survive
  Holm; never "equal";
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
from experiments.statistics.inference import (
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
    smallest_claim_p,
)
from experiments.statistics.measure_names import measure_name

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
    p_holm: float       # after Holm's adjustment over the family of k
    k: int              # the size of the family: the declared claims and the earlier looks that count
    shift: float        # the smallest difference of medians (higher - lower) of its pairs
    low: float          # that pair's interval
    high: float
    coverage: float     # the interval's coverage: a lower bound unless `exact`
    exact: bool
    pairs: int
    n: str              # the smallest runs per side, "a/b"
    described: str = ""   # "identical in all 5/5 runs" and the like: a description, not a verdict
    sides: str = ONE_SIDED
    campaign: str = ""    # the campaign file that declared it, on a page made from several


@dataclass(frozen=True)
class Pair:
    """One pair of cells a claim names at one sweep value: the lower and the higher cell's runs."""
    sweep: str
    lower: tuple[str, str]      # (backend, strategy)
    higher: tuple[str, str]
    lower_values: np.ndarray
    higher_values: np.ndarray
    beside: bool                # a measure timing can move, from runs made beside another


def _cells(runs: pd.DataFrame, claim: Claim, selector: str) -> pd.DataFrame:
    rows = runs[(runs["scenario"] == claim.scenario) & (runs["metric"] == claim.metric)]
    chosen = [selects(selector, backend, strategy) for backend, strategy in zip(rows["backend"], rows["strategy"],
                                                                                strict=True)]
    return rows.loc[np.asarray(chosen, dtype=bool)]


def claim_pairs(runs: pd.DataFrame, claim: Claim) -> list[Pair]:
    """Every pair of cells the claim names: each higher cell against each lower one, at every sweep value
    both ran."""
    found = []
    for high_selector in claim.higher:
        for low_selector in claim.lower:
            high, low = _cells(runs, claim, high_selector), _cells(runs, claim, low_selector)
            for (sweep, h_backend, h_strategy), h_rows in high.groupby(["sweep", "backend", "strategy"]):
                for (l_backend, l_strategy), l_rows in low[low["sweep"] == sweep].groupby(["backend", "strategy"]):
                    if (h_backend, h_strategy) != (l_backend, l_strategy):
                        beside = ran_beside(l_rows, claim.metric) or ran_beside(h_rows, claim.metric)
                        found.append(Pair(str(sweep), (l_backend, l_strategy), (h_backend, h_strategy),
                                          l_rows["value"].to_numpy(dtype=float), h_rows["value"].to_numpy(dtype=float),
                                          beside))
    return found


def _pairs(runs: pd.DataFrame, claim: Claim) -> list[Comparison]:
    return [compare(pair.lower_values, pair.higher_values, beside=pair.beside, sides=ONE_SIDED)
            for pair in claim_pairs(runs, claim)]


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


def evaluate_family(campaigns: Sequence[tuple[str, pd.DataFrame, Sequence[Claim]]], earlier: int = 0) -> list[ClaimResult]:
    """The claims of several campaign files (name, runs, claims), each tested on its own campaign's runs only
    (two campaigns may run one scenario under different settings), with Holm's adjustment over the whole
    family: the claims and `earlier` looks that count in it (never supported now)."""
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
    k = len(partial) + earlier
    adjusted, rejected = holm_adjusted(p_values, k), holm(p_values, ALPHA, k)
    results = []
    for index, (name, claim, verdict, p, weakest, pairs) in enumerate(partial):
        if verdict is None:
            holds = bool(rejected[index]) and all(pair.shift > 0 for pair in pairs)
            verdict = SUPPORTED if holds else NOT_SUPPORTED
        shift = (weakest.shift, weakest.low, weakest.high, weakest.coverage) if weakest else (math.nan,) * 4
        n = f"{min(pair.n_a for pair in pairs)}/{min(pair.n_b for pair in pairs)}" if pairs else "-"
        results.append(ClaimResult(claim, verdict, p, math.nan if math.isnan(p) else adjusted[index], k,
                                   *shift, weakest.exact if weakest else False, len(pairs), n, _described(pairs),
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


THE_TEST = ("Each pair gets the test of the two medians, one-sided in the declared direction. Its null, in "
            "words: the higher cell's median run is no larger than the lower cell's, whatever the two cells' "
            "spreads and shapes. The claim is supported at a step when the higher cell's k-th lowest run lies "
            "above the lower cell's k-th highest (k = 1: every run above every run); under that null each of "
            "the two lies beyond its cell's median with probability at most P(Binomial(n, ½) ≤ k - 1), for "
            "any distribution, so the step's p is 1 - (1 - that of one cell)(1 - that of the other). Complete "
            "separation gives {floors}, and no test that holds its level for every pair of distributions can "
            "give it less.")


def claims_markdown(results: list[ClaimResult], *, family: str = "", notes: dict[int, str] | None = None) -> str:
    """The page's opening: each declared claim, its verdict, p (one-sided), Holm's p over the family of k,
    and its difference of medians with the interval's coverage. `family`: what k counts, when more than the
    declared claims (the page's rule of looks); `notes`: a note per result (by index) beside its verdict."""
    if not results:
        return ""
    k = results[0].k
    named = any(result.campaign for result in results)
    floors = sorted({(result.n, smallest_claim_p(*map(int, result.n.split("/")))) for result in results
                     if "/" in result.n and min(map(int, result.n.split("/"))) >= MIN_RUNS})
    floor_text = ", ".join(f"{p:.2g} at {n}" for n, p in floors) or "its floor"
    lines = ["## Claims declared before the runs\n",
             "Each claim was written in a campaign file before any run. "
             + (family or f"The family is every claim of the campaign files this page is made from, k = {k}, "
                          f"whatever the data.")
             + f" A claim holds only if every pair of cells it names holds (its p is the largest of theirs, its "
             f"difference the smallest). {THE_TEST.format(floors=floor_text)} Holm's adjustment over the "
             f"k = {k} (a claim that could not be tested counts as p = 1) keeps the chance that any supported "
             f"claim is wrong at most {ALPHA:.0%}. A pair needs {MIN_RUNS} runs a side. Cells that gave one "
             f"value in every run are tested like any other: five identical runs do not show that a measure never "
             f"varies. Beside each claim, the difference of the two cells' medians (higher - lower; the weakest "
             f"pair's) with an interval from each cell's order-statistic interval of its median, labelled with "
             f"the coverage it has for any distributions (\"≥\": a bound). \"Not supported\" never means equal: "
             f"it means these runs do not show the claimed order.\n",
             ("| campaign " if named else "")
             + f"| claim | measure | verdict | p | Holm p (k = {k}) | difference of medians, higher - lower "
               f"[interval, coverage] | pairs | n |",
             ("| --- " if named else "") + "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for index, result in enumerate(results):
        p = "-" if math.isnan(result.p) else f"{result.p:.2g} ({result.sides})"
        p_holm = "-" if math.isnan(result.p_holm) else f"{result.p_holm:.2g}"
        coverage = "" if math.isnan(result.coverage) else f", {coverage_text(result.coverage, result.exact)}"
        shift = ("-" if math.isnan(result.shift)
                 else f"{_figure(result.shift)} [{_figure(result.low)}, {_figure(result.high)}{coverage}]")
        if result.described:
            shift += f"; {result.described}"
        lead = f"| {result.campaign} " if named else ""
        note = (notes or {}).get(index, "")
        verdict = f"**{result.verdict}**" + (f"; {note}" if note else "")
        lines.append(f"{lead}| {result.claim.says} | {measure_name(result.claim.metric)} | {verdict} | {p} | "
                     f"{p_holm} | {shift} | {result.pairs} | {result.n} |")
    return "\n".join(lines) + "\n"


def _figure(value: float) -> str:
    """Three significant digits below 1,000, whole numbers with separated thousands above, never in exponent
    form (5,112, not 5.11e+03)."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
