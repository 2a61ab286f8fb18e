"""Deciding which differences are real: the tests, the intervals their pages print and those intervals'
real coverage, and the error rate of a page (Benjamini-Hochberg) and of its declared claims (Holm).

Two tests, for two questions:

- **A declared claim** ("range loses more records than cooperative-sticky") says one cell is larger than
  another. Its null, in words: *the higher cell's median run is no larger than the lower cell's*, whatever
  the two cells' spreads and shapes. The test (`claim_p`) asks whether the higher cell's k-th lowest run lies
  above the lower cell's k-th highest, from k = 1 (complete separation) inwards (`claim_steps`). Each cell's
  k-th run from its end lies beyond its median with probability at most P(Binomial(n, ½) <= k - 1), for any
  distribution, ties and constant cells included, and the cells are independent, so under the null the
  step is met with probability at most 1 - (1 - that of a)(1 - that of b): its p, exact as a bound for
  every pair of distributions. Its floor is complete separation, 1 - (1 - 2^-n_a)(1 - 2^-n_b): 0.031 at
  6/6, 0.0020 at 10/10; no test valid for every pair of distributions can give complete separation less
  (a cell half at one value and half far below it, beside one above that value half the time, separates
  completely that often). The exact one-sided
  Mann-Whitney test the claims had before has a narrower null, "the two cells have one distribution"; under
  unequal spreads it supports a direction too often (a constant cell against one varying around the same
  median: at 6/6, p <= 0.05/19 in 1.6% of pairs instead of 0.26%), and so does Brunner-Munzel's studentized
  permutation test, whose p for complete separation at 6/6 is 1/924 (benchmarks/bench_evidence.py).
- **A comparison of the page** (every pair of cells, Benjamini-Hochberg) asks only whether two cells
  differ. Its null, in words: *the two cells' runs come from one distribution*; the exact two-sided
  Mann-Whitney test (`exact_p`), twice the smaller tail of U's permutation distribution (scipy's exact
  method without ties; with ties the same distribution counted over the tied ranks, `_tied_distribution`,
  checked against scipy's permutation method in tests/test_inference.py). A difference it finds says the
  cells differ, in place, spread or shape; the difference of their medians says which median is higher.

Below `MIN_RUNS` runs a side no comparison is tested. Every comparison with enough runs gets its p,
including cells that gave one value in every run: five identical runs do not show that a measure never
varies.

The interval (`median_difference`) is of the difference of the cells' medians, b - a:
[low_b - high_a, high_b - low_a] from each cell's order-statistic interval of its median,
[x(k), x(n+1-k)]. Each covers its cell's median with probability at least 1 - 2 P(Binomial(n, ½) <= k - 1)
whatever the distribution (ties and constant cells included), and the cells are independent, so the
difference is covered at least as often as the product of the two: the label is that product, "≥", true for
any spreads and shapes. The k of each cell are the largest whose product reaches 95%; where none does (below
10 runs a side) each interval is [min, max] and the label says what it reaches (≥ 93.8% at 6/6, ≥ 87.8% at
5/5). The Hodges-Lehmann shift's interval (`shift_interval`), the page's before, assumes the two cells differ
by a shift alone; under unequal spreads it covers less than its label (at 10/10, spread ratio 10: 91% for a
95.7% label), and it is kept only to show that in tests and benchmarks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from experiments.statistics.measures import moved_by_timing

PARALLEL_TIMING = "moved by timing, runs made beside another"   # not compared (`ran_beside`)
TESTED = "tested"
TOO_FEW = "too few runs"
MIN_RUNS = 5          # fewer runs on a side: "too few runs", never a difference
Q = 0.05              # the false discovery rate a page controls
ALPHA = 0.05          # the family-wise error rate of a page's declared claims
LEVEL = 0.95          # the coverage asked of an interval
TWO_SIDED, ONE_SIDED = "two-sided", "one-sided"
CLAIM_TEST = "two medians, one-sided"              # `claim_p`, as the ledger of looks names it

UNTIED, TIED, ONE_CONSTANT, BOTH_CONSTANT = "untied", "tied", "one cell constant", "both cells constant"


@dataclass(frozen=True)
class Interval:
    """An estimate of b - a and its interval; `coverage` is exact when `exact`, else a lower bound; `case`
    says what the cells' runs were (untied, tied, one cell or both constant)."""
    shift: float
    low: float
    high: float
    coverage: float
    exact: bool
    case: str


@dataclass(frozen=True)
class Comparison:
    """Cell b against cell a: n each side, the difference of their medians (b - a) with its interval and
    that interval's coverage (a lower bound), the p-value and its sides, and whether the test was made at
    all."""
    n_a: int
    n_b: int
    shift: float             # the difference of the medians, b - a
    low: float
    high: float
    coverage: float
    p: float                 # nan when not tested
    status: str              # TESTED, TOO_FEW, PARALLEL_TIMING
    exact: bool = False      # the coverage is exact (else a lower bound)
    case: str = UNTIED
    sides: str = TWO_SIDED


def compare(a, b, *, beside: bool = False, min_runs: int = MIN_RUNS, level: float = LEVEL,
            sides: str = TWO_SIDED) -> Comparison:
    """Cell b against cell a, tested when each has `min_runs` runs, never when `beside` (a measure timing
    can move, from runs made beside another, see `ran_beside`). Two-sided: the exact Mann-Whitney test (null:
    one distribution); one-sided, "b larger than a": the test of the two medians (null: b's median at most
    a's), `claim_p`."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    interval = median_difference(a, b, level=level)
    fields = dict(n_a=len(a), n_b=len(b), shift=interval.shift, low=interval.low, high=interval.high,
                  coverage=interval.coverage, exact=interval.exact, case=interval.case, sides=sides)
    if beside:
        return Comparison(**fields, p=math.nan, status=PARALLEL_TIMING)
    if len(a) < min_runs or len(b) < min_runs:
        return Comparison(**fields, p=math.nan, status=TOO_FEW)
    p = claim_p(a, b) if sides == ONE_SIDED else exact_p(a, b)
    return Comparison(**fields, p=p, status=TESTED)


# -- a declared claim: the test of the two medians -------------------------------------------------------

def _beyond(n: int, k: int) -> float:
    """P(Binomial(n, ½) <= k - 1): the most often x(k) of n runs lies above the cell's median (and x(n+1-k)
    below it), whatever the distribution."""
    return (1 - median_coverage(n, k)) / 2


def _level(n_a: int, n_b: int, k_a: int, k_b: int) -> float:
    """The chance that b's k_b-th lowest run lies above a's k_a-th highest when b's median is at most a's:
    at most that one of the two lies beyond its cell's median, 1 - (1 - beyond_a)(1 - beyond_b)."""
    return 1 - (1 - _beyond(n_a, k_a)) * (1 - _beyond(n_b, k_b))


@lru_cache(maxsize=256)
def claim_steps(n_a: int, n_b: int) -> tuple[tuple[int, int, float], ...]:
    """The test's steps, fixed before any data: (k_a, k_b, level) from (1, 1) (complete separation) on,
    each step one run further in on the side whose next level is lower (a on a tie), to the medians. A step
    is met when b's k_b-th lowest run is above a's k_a-th highest; each step met implies every later one."""
    k_a, k_b = 1, 1
    steps = [(1, 1, _level(n_a, n_b, 1, 1))]
    while k_a < (n_a + 1) // 2 or k_b < (n_b + 1) // 2:
        options = []
        if k_a < (n_a + 1) // 2:
            options.append((_level(n_a, n_b, k_a + 1, k_b), 0, k_a + 1, k_b))
        if k_b < (n_b + 1) // 2:
            options.append((_level(n_a, n_b, k_a, k_b + 1), 1, k_a, k_b + 1))
        level, _, k_a, k_b = min(options)
        steps.append((k_a, k_b, level))
    return tuple(steps)


def claim_p(a, b) -> float:
    """The one-sided p of "b larger than a" against the null "b's median is at most a's", whatever the
    cells' distributions: the level of the first step (`claim_steps`) whose k_b-th lowest run of b lies
    above the k_a-th highest of a; 1 when even the medians do not separate."""
    a, b = np.sort(np.asarray(a, dtype=float)), np.sort(np.asarray(b, dtype=float))
    for k_a, k_b, level in claim_steps(len(a), len(b)):
        if b[k_b - 1] > a[len(a) - k_a]:
            return float(level)
    return 1.0


def claim_p_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`claim_p` of every row of a (pairs x n_a) and b (pairs x n_b) at once, for simulations."""
    a, b = np.sort(np.asarray(a, dtype=float), axis=1), np.sort(np.asarray(b, dtype=float), axis=1)
    p = np.ones(len(a))
    for k_a, k_b, level in reversed(claim_steps(a.shape[1], b.shape[1])):
        p = np.where(b[:, k_b - 1] > a[:, a.shape[1] - k_a], level, p)
    return p


def smallest_claim_p(n_a: int, n_b: int) -> float:
    """The smallest p a claim's pair can give: complete separation, 1 - (1 - 2^-n_a)(1 - 2^-n_b) (0.031 at
    6/6, 0.0020 at 10/10). No test valid for every pair of distributions can give complete separation less:
    a cell half at one value and half far below it, beside one above that value half the time, separates
    completely that often."""
    return claim_steps(n_a, n_b)[0][2]


# -- the interval: the difference of the medians -------------------------------------------------------

def median_orders(n_a: int, n_b: int, level: float = LEVEL) -> tuple[int, int, float]:
    """(k_a, k_b, coverage): the order statistics of each cell's interval of its median, [x(k), x(n+1-k)],
    the largest whose product of coverages reaches `level` (the most runs left out in all, then the higher
    product), else [min, max] on both sides; the product is what the difference's interval is labelled."""
    best = (1, 1, median_coverage(n_a, 1) * median_coverage(n_b, 1))
    for k_a in range(1, (n_a + 1) // 2 + 1):
        for k_b in range(1, (n_b + 1) // 2 + 1):
            covered = median_coverage(n_a, k_a) * median_coverage(n_b, k_b)
            if covered >= level and (k_a + k_b, covered) > (best[0] + best[1], best[2] if best[2] >= level else 0):
                best = (k_a, k_b, covered)
    return best


def median_difference(a, b, *, level: float = LEVEL) -> Interval:
    """median(b) - median(a) and its interval [x_b(k_b) - x_a(n_a+1-k_a), x_b(n_b+1-k_b) - x_a(k_a)],
    which covers the difference of the two medians at least as often as the product of the two cells'
    coverages, whatever their distributions (see the module's docstring)."""
    a, b = np.sort(np.asarray(a, dtype=float)), np.sort(np.asarray(b, dtype=float))
    if len(a) == 0 or len(b) == 0:
        return Interval(math.nan, math.nan, math.nan, math.nan, False, "")
    k_a, k_b, covered = median_orders(len(a), len(b), level)
    return Interval(float(np.median(b) - np.median(a)), float(b[k_b - 1] - a[len(a) - k_a]),
                    float(b[len(b) - k_b] - a[k_a - 1]), covered, False, _case(a, b))


def _case(a: np.ndarray, b: np.ndarray) -> str:
    a_constant, b_constant = bool(np.all(a == a[0])), bool(np.all(b == b[0]))
    if a_constant and b_constant:
        return BOTH_CONSTANT
    if a_constant or b_constant:
        return ONE_CONSTANT
    pooled = np.concatenate([a, b])
    return UNTIED if len(np.unique(pooled)) == len(pooled) else TIED


# -- a comparison of the page: the exact Mann-Whitney test ---------------------------------------------

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
    # scipy.stats is imported here, not at the top: it takes seconds, and every command reads this module's constants
    from scipy import stats

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
    """The Hodges-Lehmann shift (the median of every difference b_j - a_i), its interval
    [D(k), D(mn + 1 - k)] and the label the page gave it before `median_difference`: the exact coverage of
    U's distribution when the cells are untied, "≥" that when tied, the other cell's interval of its median
    when one cell was constant, the product of [min, max]'s coverages when both were. Every label assumes the
    two cells differ by a shift alone; kept to show, in tests and benchmarks/bench_evidence.py, where it
    fails under unequal spreads."""
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
    from scipy import stats

    return stats.false_discovery_control(p, method="bh") <= Q


def holm(p_values, alpha: float = ALPHA, k: int | None = None) -> np.ndarray:
    """Holm's step-down: the i-th smallest p-value is rejected if it and every smaller one is at most
    alpha / (k - i); controls the family-wise error rate at alpha for any dependence. A nan (a claim that
    could not be tested) counts in k and is never rejected; `k` above the count adds members never rejected
    (earlier looks in the family, as a p of 1: the step-down can only get stricter)."""
    p = _padded(p_values, k)
    rejected = np.zeros(len(p), dtype=bool)
    for i, index in enumerate(np.argsort(p, kind="stable")):
        if not p[index] <= alpha / (len(p) - i):
            break
        rejected[index] = True
    return rejected[:len(np.atleast_1d(p_values))]


def holm_adjusted(p_values, k: int | None = None) -> list[float]:
    """Holm's adjusted p-values (the smallest alpha at which each is rejected); a nan counts in k as 1, and
    so does every member `k` adds."""
    p = _padded(p_values, k)
    adjusted = np.empty(len(p))
    running = 0.0
    for rank, index in enumerate(np.argsort(p, kind="stable")):
        running = max(running, min(1.0, (len(p) - rank) * p[index]))
        adjusted[index] = running
    return [float(value) for value in adjusted[:len(np.atleast_1d(p_values))]]


def _padded(p_values, k: int | None) -> np.ndarray:
    p = np.nan_to_num(np.asarray(p_values, dtype=float), nan=1.0)
    return np.concatenate([p, np.ones(max(0, (k or 0) - len(p)))])


def smallest_p(n_a: int, n_b: int, sides: str = TWO_SIDED) -> float:
    """The smallest exact p-value n_a and n_b runs can give: 2 / C(n_a + n_b, n_a), half that one-sided."""
    return min(1.0, (2 if sides == TWO_SIDED else 1) / math.comb(n_a + n_b, n_a))


def ran_beside(rows, metric: str) -> bool:
    """Whether a cell's runs (a frame with an optional `parallel` column: the run had another beside it)
    give `metric` as a measure timing can move (`experiments.statistics.measures`) from a run made beside
    another."""
    return moved_by_timing(metric) and "parallel" in rows and bool(rows["parallel"].astype(bool).any())
