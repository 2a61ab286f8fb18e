"""A campaign's headline claims, declared in its file before the runs, each given one verdict.

A claim says that some cells exceed others on one metric of one scenario ("legacy's requests per join
exceed modern's at every N"). It holds only if every pair it names holds: each `higher` cell against each
`lower` cell, at every sweep value both ran. Each pair gets the exact test of `experiments.summary.inference`;
the claim's p-value is the largest of its pairs' (a claim made of several pairs is only as strong as its
weakest), and its shift the smallest. Holm's step-down over the claims of a campaign keeps the chance
that any supported claim is wrong at most 5%.

Verdicts:
- **supported**: every pair's shift points the claimed way and the claim survives Holm at 0.05; or every
  run of both cells of every pair gave one value each, in the claimed order (nothing to test);
- **not supported**: enough runs, and a shift points the other way or the claim does not survive Holm;
- **undetermined (n too small)**: some pair has fewer than 5 runs on a side;
- **undetermined (no runs)**: no pair was run;
- **undetermined (timings of parallel runs)**: the claim is on a timing and some of its runs ran beside
  another (`--parallel` > 1), which stretches timings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from experiments.campaign.model import Claim, selects
from experiments.summary.inference import (
    ALPHA,
    MIN_RUNS,
    PARALLEL_TIMING,
    Comparison,
    compare,
    holm,
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
    p: float            # the largest p-value of the claim's pairs (nan when not tested)
    p_holm: float       # after Holm's adjustment over the campaign's claims
    shift: float        # the smallest shift (higher - lower) of its pairs
    low: float          # that pair's interval
    high: float
    coverage: float     # the interval's exact coverage
    pairs: int
    n: str              # the smallest runs per side, "a/b"


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
                        found.append(compare(l_rows["value"].to_numpy(), h_rows["value"].to_numpy(), beside=beside))
    return found


def evaluate(runs: pd.DataFrame, claims: tuple[Claim, ...] | list[Claim]) -> list[ClaimResult]:
    """Every claim's verdict, with Holm's adjustment over the claims that were tested."""
    partial = []
    for claim in claims:
        pairs = _pairs(runs, claim)
        if not pairs:
            partial.append((claim, NO_RUNS, math.nan, None, 0, "-"))
            continue
        weakest = min(pairs, key=lambda pair: pair.shift)
        untested = all(pair.status in ("constant", "identical") for pair in pairs)   # one value a cell
        n = f"{min(pair.n_a for pair in pairs)}/{min(pair.n_b for pair in pairs)}"
        if any(pair.status == PARALLEL_TIMING for pair in pairs):
            partial.append((claim, BESIDE, math.nan, weakest, len(pairs), n))
        elif any(pair.status == "too few runs" for pair in pairs):
            partial.append((claim, TOO_FEW, math.nan, weakest, len(pairs), n))
        elif any(pair.shift <= 0 for pair in pairs):
            partial.append((claim, NOT_SUPPORTED, math.nan if untested else max(_p(pair) for pair in pairs),
                            weakest, len(pairs), n))
        elif all(pair.status == "constant" for pair in pairs):
            partial.append((claim, SUPPORTED, math.nan, weakest, len(pairs), n))
        else:
            partial.append((claim, None, max(_p(pair) for pair in pairs), weakest, len(pairs), n))
    tested = [index for index, item in enumerate(partial) if item[1] is None]
    adjusted = _holm_adjusted([partial[index][2] for index in tested])
    rejected = holm([partial[index][2] for index in tested], ALPHA)
    results = []
    for index, (claim, verdict, p, weakest, count, n) in enumerate(partial):
        p_holm = math.nan
        if index in tested:
            position = tested.index(index)
            p_holm = adjusted[position]
            verdict = SUPPORTED if rejected[position] else NOT_SUPPORTED
        shift, low, high, coverage = ((weakest.shift, weakest.low, weakest.high, weakest.coverage) if weakest
                                      else (math.nan,) * 4)
        if weakest is not None and weakest.status in ("constant", "identical"):
            coverage = math.nan      # one value each side: the shift is exact, not estimated
        results.append(ClaimResult(claim, verdict, p, p_holm, shift, low, high, coverage, count, n))
    return results


def _p(pair: Comparison) -> float:
    return 0.0 if pair.status == "constant" else (1.0 if pair.status == "identical" else pair.p)


def _holm_adjusted(p_values: list[float]) -> list[float]:
    """Holm's adjusted p-values: the smallest alpha at which each would be rejected."""
    order = np.argsort(p_values)
    adjusted = np.empty(len(p_values))
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = running
    return list(adjusted)


def claims_frame(results: list[ClaimResult]) -> pd.DataFrame:
    columns = ["says", "scenario", "metric", "higher", "lower", "verdict", "p", "p_holm", "shift", "low", "high",
               "coverage", "pairs", "n"]
    return pd.DataFrame([{"says": r.claim.says, "scenario": r.claim.scenario, "metric": r.claim.metric,
                          "higher": ", ".join(r.claim.higher), "lower": ", ".join(r.claim.lower),
                          "verdict": r.verdict, "p": r.p, "p_holm": r.p_holm, "shift": r.shift, "low": r.low,
                          "high": r.high, "coverage": r.coverage, "pairs": r.pairs, "n": r.n} for r in results],
                        columns=columns)


def claims_markdown(results: list[ClaimResult]) -> str:
    """The page's opening: each declared claim, its verdict, p and shift."""
    if not results:
        return ""
    tested = sum(not math.isnan(result.p_holm) for result in results)
    lines = ["## Claims declared before the runs\n",
             f"Each claim was written in the campaign file before any run. A claim holds only if every pair of "
             f"cells it names holds (its p is the largest of theirs, its shift the smallest). Holm's adjustment "
             f"over the {tested} claims that needed a test keeps the chance that any supported claim is wrong at "
             f"most {ALPHA:.0%}. A claim whose cells gave one value each in every run needs none (p: -): it "
             f"holds if those values are in the claimed order. A pair needs {MIN_RUNS} runs a side. The shift is "
             f"Hodges-Lehmann's (the median of every difference higher - lower) with its distribution-free "
             f"interval and that interval's coverage.\n",
             "| claim | verdict | p (Holm) | shift, higher - lower [interval, coverage] | pairs | n |",
             "| --- | --- | --- | --- | --- | --- |"]
    for result in results:
        p = "-" if math.isnan(result.p) else f"{result.p:.2g} ({result.p_holm:.2g})" if not math.isnan(result.p_holm) \
            else f"{result.p:.2g}"
        coverage = "" if math.isnan(result.coverage) else f", {result.coverage:.0%}"
        shift = ("-" if math.isnan(result.shift)
                 else f"{result.shift:,.3g} [{result.low:,.3g}, {result.high:,.3g}{coverage}]")
        lines.append(f"| {result.claim.says} | **{result.verdict}** | {p} | {shift} | {result.pairs} | {result.n} |")
    return "\n".join(lines) + "\n"
