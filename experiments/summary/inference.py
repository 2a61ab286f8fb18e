"""Deciding which differences are real: an exact two-sided Mann-Whitney test, the Hodges-Lehmann shift with
its distribution-free interval, and the error rate of a page (Benjamini-Hochberg) and of its declared claims
(Holm).

The p-value is the exact permutation p-value of the Mann-Whitney U statistic: twice the smaller of the
two tails, each the fraction of the C(a + b, a) ways to split the pooled runs into two cells of the same
sizes whose U is at least (at most) the observed one. Without ties that is `scipy.stats.mannwhitneyu(method="exact")`. With ties
(counts often tie) scipy's exact answer is its permutation method, which enumerates every split and takes
seconds at 10/10; the same distribution is counted here over the tied ranks, in milliseconds
(`_tied_distribution`, checked against scipy's permutation method in tests/test_inference.py).

The smallest p-value a comparison can reach depends only on n: 0.10 at 3/3, 0.0079 at 5/5, 0.0022 at 6/6,
1.1e-5 at 10/10. Below `MIN_RUNS` runs a side no comparison is tested.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats

PARALLEL_TIMING = "timings of parallel runs"   # not compared: a side ran beside another run
MIN_RUNS = 5          # fewer runs on a side: "too few runs", never a difference
Q = 0.05              # the false discovery rate a page controls
ALPHA = 0.05          # the family-wise error rate of a campaign's declared claims
LEVEL = 0.95          # the coverage asked of the shift's interval


@dataclass(frozen=True)
class Comparison:
    """Cell b against cell a: n each side, the Hodges-Lehmann shift (b - a) with its interval and the
    interval's exact coverage, the exact two-sided p-value, and whether the test was made at all."""
    n_a: int
    n_b: int
    shift: float
    low: float
    high: float
    coverage: float
    p: float                 # nan when not tested
    status: str              # "tested", "too few runs", "identical", "constant", PARALLEL_TIMING


def compare(a, b, *, beside: bool = False, min_runs: int = MIN_RUNS, level: float = LEVEL) -> Comparison:
    """Cell b against cell a, tested only when each has `min_runs` runs and not every run of both gave one
    value each, and never when `beside` (a timing from runs made beside another, see `ran_beside`)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    shift, low, high, coverage = hodges_lehmann(a, b, level=level)
    if beside:
        return Comparison(len(a), len(b), shift, low, high, coverage, math.nan, PARALLEL_TIMING)
    if len(a) < min_runs or len(b) < min_runs:
        return Comparison(len(a), len(b), shift, low, high, coverage, math.nan, "too few runs")
    if np.all(a == a[0]) and np.all(b == b[0]):
        # every run of each cell gave one value: nothing to test, the values say it
        status = "identical" if a[0] == b[0] else "constant"
        return Comparison(len(a), len(b), shift, low, high, coverage, math.nan, status)
    return Comparison(len(a), len(b), shift, low, high, coverage, exact_p(a, b), "tested")


def exact_p(a: np.ndarray, b: np.ndarray) -> float:
    """The exact two-sided permutation p-value of Mann-Whitney's U."""
    pooled = np.concatenate([a, b])
    if len(np.unique(pooled)) == len(pooled):
        return float(stats.mannwhitneyu(b, a, alternative="two-sided", method="exact").pvalue)
    ranks = stats.rankdata(pooled)                       # mid-ranks; doubled below to stay integers
    doubled = tuple(sorted(int(round(2 * r)) for r in ranks))
    sums, counts = _tied_distribution(doubled, len(b))
    observed = int(round(2 * ranks[len(a):].sum()))
    total = counts.sum()
    # two-sided as scipy's permutation test makes it: twice the smaller tail
    return float(min(1.0, 2 * min(counts[sums <= observed].sum(), counts[sums >= observed].sum()) / total))


@lru_cache(maxsize=4096)
def _tied_distribution(doubled_ranks: tuple[int, ...], m: int) -> tuple[np.ndarray, np.ndarray]:
    """Every possible sum of `m` of the doubled ranks, and how many of the C(N, m) subsets give it."""
    total = sum(sorted(doubled_ranks)[-m:]) if m else 0
    ways = np.zeros((m + 1, total + 1), dtype=float)     # ways[j, s]: subsets of j ranks summing to s
    ways[0, 0] = 1
    for rank in doubled_ranks:
        ways[1:, rank:] += ways[:-1, : total + 1 - rank].copy()
    sums = np.nonzero(ways[m])[0]
    return sums, ways[m][sums]


def hodges_lehmann(a: np.ndarray, b: np.ndarray, *, level: float = LEVEL) -> tuple[float, float, float, float]:
    """(shift, low, high, coverage): the median of every difference b_j - a_i, and the distribution-free
    interval [D(k), D(mn + 1 - k)] of the sorted differences with the largest k whose exact coverage under
    the Mann-Whitney distribution is at least `level`; when none is (n too small), the whole range of
    differences with the coverage it has."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) == 0 or len(b) == 0:
        return math.nan, math.nan, math.nan, math.nan
    differences = np.sort(np.subtract.outer(b, a).ravel())
    cdf = _u_cdf(len(a), len(b))
    best = None
    for k in range(1, len(differences) // 2 + 1):
        covered = 1 - 2 * cdf[k - 1]                     # P(D(k) <= shift <= D(mn+1-k)) = 1 - 2 P(U <= k - 1)
        if covered >= level:
            best = (k, covered)
    if best is None:
        k, coverage = 1, 1 - 2 * cdf[0]
    else:
        k, coverage = best
    return (float(np.median(differences)), float(differences[k - 1]), float(differences[len(differences) - k]),
            float(coverage))


@lru_cache(maxsize=256)
def _u_cdf(m: int, n: int) -> np.ndarray:
    """P(U <= u) for u = 0 .. m*n, U Mann-Whitney's statistic of m and n runs without ties: U is the rank sum
    of the n runs minus n(n+1)/2, over every way to choose their n ranks of 1 .. m+n."""
    sums, counts = _tied_distribution(tuple(2 * rank for rank in range(1, m + n + 1)), n)
    u = sums // 2 - n * (n + 1) // 2
    probabilities = np.zeros(m * n + 1)
    probabilities[u] = counts / counts.sum()
    return np.cumsum(probabilities)


def benjamini_hochberg(p_values) -> np.ndarray:
    """Which p-values are discoveries at false discovery rate Q (scipy's adjusted p-values below Q)."""
    p = np.asarray(p_values, dtype=float)
    if len(p) == 0:
        return np.zeros(0, dtype=bool)
    return stats.false_discovery_control(p, method="bh") <= Q


def holm(p_values, alpha: float = ALPHA) -> np.ndarray:
    """Holm's step-down: the i-th smallest p-value is rejected if it and every smaller one is at most
    alpha / (k - i); controls the family-wise error rate at alpha for any dependence."""
    p = np.asarray(p_values, dtype=float)
    rejected = np.zeros(len(p), dtype=bool)
    for i, index in enumerate(np.argsort(p)):
        if not p[index] <= alpha / (len(p) - i):
            break
        rejected[index] = True
    return rejected


def smallest_p(n_a: int, n_b: int) -> float:
    """The smallest two-sided exact p-value n_a and n_b runs can give: 2 / C(n_a + n_b, n_a)."""
    return min(1.0, 2 / math.comb(n_a + n_b, n_a))


def is_timing(metric: str) -> bool:
    """Metrics a run sharing the CPU with another would stretch: seconds, milliseconds, partition-seconds,
    and records lost (records processed past a latency limit). Counts of requests or anomalies are not."""
    return metric.endswith(("(s)", "(ms)", "partition-seconds unowned", "records lost"))


def ran_beside(rows, metric: str) -> bool:
    """Whether a cell's runs (a frame with an optional `parallel` column) give `metric` as a timing stretched
    by another run made at the same time."""
    return is_timing(metric) and "parallel" in rows and bool(rows["parallel"].any())
