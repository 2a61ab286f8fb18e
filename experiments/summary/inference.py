"""Deciding which differences are real: the exact Mann-Whitney test, the Hodges-Lehmann shift with its
distribution-free interval and that interval's real coverage, and the error rate of a page
(Benjamini-Hochberg) and of its declared claims (Holm).

The p-value is the exact permutation p-value of the Mann-Whitney U statistic. Two-sided it is twice the
smaller of the two tails, each the fraction of the C(a + b, a) ways to split the pooled runs into two cells
of the same sizes whose U is at least (at most) the observed one; one-sided ("b greater than a") it is the
upper tail alone. Without ties that is `scipy.stats.mannwhitneyu(method="exact")`, counted here from U's
exact distribution (`_u_cdf`). With ties (counts often tie) scipy's exact answer is its permutation method, which enumerates every split and takes seconds at
10/10; the same distribution is counted here over the tied ranks, in milliseconds (`_tied_distribution`,
checked against scipy's permutation method in tests/test_inference.py). Every comparison with enough runs
gets its p, including cells that gave one value in every run: five identical runs do not show that a
measure never varies, and complete separation at 5/5 is the test's most extreme outcome, p = 2/252
two-sided (1/252 one-sided), not a certainty.

The smallest two-sided p-value a comparison can reach depends only on n: 0.10 at 3/3, 0.0079 at 5/5,
0.0022 at 6/6, 1.1e-5 at 10/10. Below `MIN_RUNS` runs a side no comparison is tested.

The interval's coverage depends on the data's case (`shift_interval`):
- untied: exactly 1 - 2 P(U <= k - 1) for [D(k), D(mn + 1 - k)] of the sorted differences (continuous data);
- tied: at least that (the closed interval on discrete data covers at least as often as on continuous
  data, Noether 1967); the label is a bound that errs low;
- one cell gave one value c in every run: the interval is the other cell's order statistics minus c, so its
  coverage is that of an interval of the other cell's median, 1 - 2 P(Binomial(n, 1/2) <= j - 1) with
  j = ceil(k / n_constant) (93.75% at 5/5, 89% at 10/10), exact when c is the constant cell's median and the
  other cell is untied, at least that when it is tied;
- both cells gave one value each: the interval is one point, which covers the difference of the medians
  when each cell's [min, max] covers its median; each does with probability at least 1 - 2^(1 - n) whatever
  the distribution, so the coverage is at least the product (87.9% at 5/5): a bound that errs low.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats

from experiments.summary.measures import moved_by_timing

PARALLEL_TIMING = "moved by timing, runs made beside another"   # not compared (`ran_beside`)
TESTED = "tested"
TOO_FEW = "too few runs"
MIN_RUNS = 5          # fewer runs on a side: "too few runs", never a difference
Q = 0.05              # the false discovery rate a page controls
ALPHA = 0.05          # the family-wise error rate of a page's declared claims
LEVEL = 0.95          # the coverage asked of the shift's interval
TWO_SIDED, ONE_SIDED = "two-sided", "one-sided"

UNTIED, TIED, ONE_CONSTANT, BOTH_CONSTANT = "untied", "tied", "one cell constant", "both cells constant"


@dataclass(frozen=True)
class Interval:
    """The Hodges-Lehmann shift (b - a) and its interval; `coverage` is exact when `exact`, else a lower
    bound; `case` says which argument gives it."""
    shift: float
    low: float
    high: float
    coverage: float
    exact: bool
    case: str


@dataclass(frozen=True)
class Comparison:
    """Cell b against cell a: n each side, the Hodges-Lehmann shift (b - a) with its interval and that
    interval's coverage (exact, or a lower bound), the exact p-value and its sides, and whether the test was
    made at all."""
    n_a: int
    n_b: int
    shift: float
    low: float
    high: float
    coverage: float
    p: float                 # nan when not tested
    status: str              # TESTED, TOO_FEW, PARALLEL_TIMING
    exact: bool = True       # the coverage is exact (else a lower bound)
    case: str = UNTIED
    sides: str = TWO_SIDED


def compare(a, b, *, beside: bool = False, min_runs: int = MIN_RUNS, level: float = LEVEL,
            sides: str = TWO_SIDED) -> Comparison:
    """Cell b against cell a, tested when each has `min_runs` runs, never when `beside` (a measure timing
    can move, from runs made beside another, see `ran_beside`). One-sided: "b greater than a"."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    interval = shift_interval(a, b, level=level)
    fields = dict(n_a=len(a), n_b=len(b), shift=interval.shift, low=interval.low, high=interval.high,
                  coverage=interval.coverage, exact=interval.exact, case=interval.case, sides=sides)
    if beside:
        return Comparison(**fields, p=math.nan, status=PARALLEL_TIMING)
    if len(a) < min_runs or len(b) < min_runs:
        return Comparison(**fields, p=math.nan, status=TOO_FEW)
    return Comparison(**fields, p=exact_p(a, b, sides=sides), status=TESTED)


def exact_p(a: np.ndarray, b: np.ndarray, *, sides: str = TWO_SIDED) -> float:
    """The exact permutation p-value of Mann-Whitney's U: two-sided, or one-sided for b greater than a."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    pooled = np.concatenate([a, b])
    if len(np.unique(pooled)) == len(pooled):
        # untied: U (pairs with b above a) against its exact distribution, as scipy's method="exact"
        u = int((b[:, None] > a[None, :]).sum())
        cdf = _u_cdf(len(a), len(b))
        upper = 1.0 - (cdf[u - 1] if u else 0.0)
        if sides == ONE_SIDED:
            return float(min(1.0, upper))
        return float(min(1.0, 2 * min(cdf[u], upper)))
    ranks = stats.rankdata(pooled)                       # mid-ranks; doubled below to stay integers
    doubled = tuple(sorted(int(round(2 * r)) for r in ranks))
    sums, counts = _tied_distribution(doubled, len(b))
    observed = int(round(2 * ranks[len(a):].sum()))
    total = counts.sum()
    upper = counts[sums >= observed].sum() / total
    if sides == ONE_SIDED:
        return float(upper)
    # two-sided as scipy's permutation test makes it: twice the smaller tail
    return float(min(1.0, 2 * min(counts[sums <= observed].sum() / total, upper)))


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


def _order(m: int, n: int, level: float) -> tuple[int, float]:
    """The largest k whose interval [D(k), D(mn + 1 - k)] covers at least `level` for untied data, with
    that coverage; k = 1 (the whole range of differences) when none does."""
    cdf = _u_cdf(m, n)
    best = (1, 1 - 2 * cdf[0])
    for k in range(1, m * n // 2 + 1):
        covered = 1 - 2 * cdf[k - 1]                     # P(D(k) <= shift <= D(mn+1-k)) = 1 - 2 P(U <= k - 1)
        if covered >= level:
            best = (k, covered)
    return best


def shift_interval(a, b, *, level: float = LEVEL) -> Interval:
    """The median of every difference b_j - a_i, its interval [D(k), D(mn + 1 - k)], and that interval's
    coverage for the data's case (see the module's docstring)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) == 0 or len(b) == 0:
        return Interval(math.nan, math.nan, math.nan, math.nan, False, "")
    differences = np.sort(np.subtract.outer(b, a).ravel())
    k, untied_coverage = _order(len(a), len(b), level)
    shift, low, high = float(np.median(differences)), float(differences[k - 1]), float(differences[-k])
    a_constant, b_constant = bool(np.all(a == a[0])), bool(np.all(b == b[0]))
    if a_constant and b_constant:
        bound = (1 - 2.0 ** (1 - len(a))) * (1 - 2.0 ** (1 - len(b)))
        return Interval(shift, low, high, bound, False, BOTH_CONSTANT)
    if a_constant or b_constant:
        constant, other = (a, b) if a_constant else (b, a)
        j = math.ceil(k / len(constant))
        untied_other = len(np.unique(other)) == len(other)
        return Interval(shift, low, high, median_coverage(len(other), j), untied_other, ONE_CONSTANT)
    pooled = np.concatenate([a, b])
    untied = len(np.unique(pooled)) == len(pooled)
    return Interval(shift, low, high, float(untied_coverage), untied, UNTIED if untied else TIED)


def hodges_lehmann(a, b, *, level: float = LEVEL) -> tuple[float, float, float, float]:
    """(shift, low, high, coverage) of `shift_interval`."""
    interval = shift_interval(a, b, level=level)
    return interval.shift, interval.low, interval.high, interval.coverage


def median_coverage(n: int, k: int) -> float:
    """P(x(k) <= median <= x(n+1-k)) = 1 - 2 P(Binomial(n, 1/2) <= k - 1), for continuous data."""
    return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n


def coverage_text(coverage: float, exact: bool) -> str:
    """"96.8%" when exact, "≥ 87.9%" for a lower bound (rounded down, so the label never claims more)."""
    if coverage is None or math.isnan(coverage):
        return "-"
    if exact:
        return f"{coverage:.1%}"
    return f"≥ {math.floor(coverage * 1000 + 1e-9) / 10:.1f}%"


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
    alpha / (k - i); controls the family-wise error rate at alpha for any dependence. A nan (a claim that
    could not be tested) counts in k and is never rejected."""
    p = np.nan_to_num(np.asarray(p_values, dtype=float), nan=1.0)
    rejected = np.zeros(len(p), dtype=bool)
    for i, index in enumerate(np.argsort(p, kind="stable")):
        if not p[index] <= alpha / (len(p) - i):
            break
        rejected[index] = True
    return rejected


def holm_adjusted(p_values) -> list[float]:
    """Holm's adjusted p-values (the smallest alpha at which each is rejected); a nan counts in k as 1."""
    p = np.nan_to_num(np.asarray(p_values, dtype=float), nan=1.0)
    adjusted = np.empty(len(p))
    running = 0.0
    for rank, index in enumerate(np.argsort(p, kind="stable")):
        running = max(running, min(1.0, (len(p) - rank) * p[index]))
        adjusted[index] = running
    return list(adjusted)


def smallest_p(n_a: int, n_b: int, sides: str = TWO_SIDED) -> float:
    """The smallest exact p-value n_a and n_b runs can give: 2 / C(n_a + n_b, n_a), half that one-sided."""
    return min(1.0, (2 if sides == TWO_SIDED else 1) / math.comb(n_a + n_b, n_a))


def ran_beside(rows, metric: str) -> bool:
    """Whether a cell's runs (a frame with an optional `parallel` column: the run had another beside it)
    give `metric` as a measure timing can move (`experiments.summary.measures`) from a run made beside
    another."""
    return moved_by_timing(metric) and "parallel" in rows and bool(rows["parallel"].astype(bool).any())
