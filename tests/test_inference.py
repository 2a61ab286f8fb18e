"""The statistics that decide which differences are real, checked against scipy and by simulation.

- the comparisons' exact p-value is scipy's, with and without ties, and n alone bounds how small it can be;
- the claims' test of the two medians: its steps, its floor, its p the level of the first step met, one row
  or many, and its level reached exactly by its least favourable case;
- the interval of the difference of the medians, and the Hodges-Lehmann interval's textbook coverage;
- Benjamini-Hochberg and Holm reject what they should;
- cells that gave one value in every run get their exact p too (complete separation at 5/5: 2/252);
- (the A/A rates and the intervals' coverage by simulation: tests/test_inference_aa.py)
- a planted shift of two standard deviations at n = 10 is found at least 90% of the time;
- a declared claim gets one verdict: supported, not supported, or undetermined.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from experiments.campaign.model import Claim
from experiments.statistics.campaign_stats import comparisons
from experiments.statistics.claims import BESIDE, NO_RUNS, NOT_SUPPORTED, SUPPORTED, TOO_FEW, evaluate
from experiments.statistics.inference import (
    ONE_SIDED,
    PARALLEL_TIMING,
    benjamini_hochberg,
    claim_p,
    claim_p_rows,
    claim_steps,
    compare,
    exact_p,
    hodges_lehmann,
    holm,
    median_difference,
    smallest_claim_p,
    smallest_p,
)

PER_PAGE = 10


def test_the_exact_p_value_is_scipys_with_and_without_ties():
    rng = np.random.default_rng(7)
    for _ in range(60):
        m, n = rng.integers(2, 8, size=2)
        for a, b in ((rng.poisson(2, m), rng.poisson(2.5, n)), (rng.normal(size=m), rng.normal(0.5, size=n))):
            a, b = a.astype(float), b.astype(float)
            expected = stats.mannwhitneyu(b, a, method=stats.PermutationMethod(n_resamples=np.inf)).pvalue
            assert exact_p(a, b) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(("n", "smallest"), [(3, 0.10), (5, 0.0079), (6, 0.0022), (10, 1.1e-5)])
def test_n_alone_bounds_the_smallest_p_value(n, smallest):
    assert smallest_p(n, n) == pytest.approx(smallest, rel=0.02)
    assert exact_p(np.arange(n, dtype=float), np.arange(n, dtype=float) + 100) == pytest.approx(smallest_p(n, n))


@pytest.mark.parametrize(("n", "coverage"), [(5, 244 / 252), (10, 0.9567)])
def test_the_shift_interval_has_its_textbook_coverage(n, coverage):
    rng = np.random.default_rng(n)
    a, b = rng.normal(size=n), rng.normal(1.0, size=n)
    shift, low, high, covered = hodges_lehmann(a, b)
    assert covered == pytest.approx(coverage, abs=1e-4) and low <= shift <= high
    assert shift == pytest.approx(np.median(np.subtract.outer(b, a)))


def test_too_few_runs_are_not_tested_and_constant_cells_get_their_exact_p():
    assert compare([1, 2, 3], [7, 8, 9]).status == "too few runs"
    identical, constant = compare([4] * 5, [4] * 5), compare([4] * 5, [6] * 5)
    assert identical.status == constant.status == "tested"
    assert identical.p == 1.0
    assert constant.p == pytest.approx(2 / 252)                     # the floor at 5/5, not a certainty
    # a claim: the test of the two medians, whose floor at 5/5 is 1 - (31/32)^2 = 0.062
    assert compare([4] * 5, [6] * 5, sides=ONE_SIDED).p == pytest.approx(1 - (31 / 32) ** 2)
    assert compare([6] * 5, [4] * 5, sides=ONE_SIDED).p == 1.0       # the other direction
    assert compare([1, 2, 3, 4, 5], [7, 8, 9, 10, 11]).status == "tested"


def _beyond(n, k):
    """P(Binomial(n, 1/2) <= k - 1)."""
    return stats.binom.cdf(k - 1, n, 0.5)


def test_the_claims_test_steps_inwards_from_complete_separation_and_its_p_is_the_first_step_met():
    steps = claim_steps(10, 10)
    assert steps[0] == (1, 1, pytest.approx(1 - (1 - 2 ** -10) ** 2))
    assert [step[:2] for step in steps[:4]] == [(1, 1), (2, 1), (2, 2), (3, 2)]
    assert all(later[2] >= earlier[2] for earlier, later in zip(steps, steps[1:], strict=False))
    assert steps[1][2] == pytest.approx(1 - (1 - _beyond(10, 2)) * (1 - _beyond(10, 1)))
    assert smallest_claim_p(6, 6) == pytest.approx(0.031, abs=5e-4)
    assert smallest_claim_p(10, 10) == pytest.approx(0.00195, abs=1e-5)
    separated = np.arange(10.0), np.arange(10.0) + 100
    assert claim_p(*separated) == steps[0][2] and claim_p(separated[1], separated[0]) == 1.0
    # b's second lowest run above a's second highest, its lowest above neither of a's two highest: (2, 2)
    a, b = np.arange(10.0), np.array([7.5, 8.5, *range(20, 28)])
    assert claim_p(a, b) == pytest.approx(steps[2][2])
    assert claim_p(a, np.array([8.5, *range(20, 29)])) == pytest.approx(steps[1][2])     # (2, 1)
    assert claim_p([0.0] * 10, [0.0] * 10) == 1.0            # a tie separates nothing
    rng = np.random.default_rng(5)
    lower, higher = rng.normal(size=(300, 6)), rng.normal(1.0, 2.0, size=(300, 6))
    assert list(claim_p_rows(lower, higher)) == [claim_p(x, y) for x, y in zip(lower, higher, strict=True)]


def test_the_claims_test_reaches_its_level_in_its_least_favourable_case_and_no_further():
    """A cell half at 36 and half far below, beside one above 36 half the time: both medians 36, and complete
    separation as often as the test's first step allows (exactly, by its formula), so no valid test can give
    complete separation a smaller p."""
    rng = np.random.default_rng(9)
    n, draws = 6, 200_000
    lower = np.where(rng.random((draws, n)) < 0.5, 36.0, -1000.0 - rng.random((draws, n)))
    higher = np.where(rng.random((draws, n)) < 0.5, 36.0 + 1 + rng.random((draws, n)), 0.0)
    separated = (claim_p_rows(lower, higher) <= smallest_claim_p(n, n)).mean()
    assert separated == pytest.approx(smallest_claim_p(n, n), abs=3 * np.sqrt(0.031 / draws))


def test_the_interval_of_the_difference_of_the_medians():
    a, b = np.arange(10.0), np.arange(10.0) * 2 + 30
    interval = median_difference(a, b)
    assert interval.shift == pytest.approx(np.median(b) - np.median(a))
    assert (interval.low, interval.high) == (b[1] - a[8], b[8] - a[1])      # x(2) and x(9) of each
    assert interval.coverage == pytest.approx((1 - 2 * _beyond(10, 2)) ** 2) and not interval.exact
    six = median_difference(np.arange(6.0), np.arange(6.0) + 3)
    assert (six.low, six.high) == (3 - 5, 8 - 0) and six.coverage == pytest.approx((1 - 2 / 64) ** 2)


def test_the_one_sided_p_value_is_scipys_upper_tail_with_and_without_ties():
    rng = np.random.default_rng(11)
    for _ in range(40):
        a, b = rng.poisson(2, 5).astype(float), rng.poisson(3, 6).astype(float)
        expected = stats.mannwhitneyu(b, a, alternative="greater",
                                      method=stats.PermutationMethod(n_resamples=np.inf)).pvalue
        assert exact_p(a, b, sides=ONE_SIDED) == pytest.approx(expected, abs=1e-12)
        a, b = rng.normal(size=5), rng.normal(0.5, size=5)
        expected = stats.mannwhitneyu(b, a, alternative="greater", method="exact").pvalue
        assert exact_p(a, b, sides=ONE_SIDED) == pytest.approx(expected, abs=1e-12)


def test_benjamini_hochberg_and_holm():
    p = [0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205, 0.212, 0.216]
    assert list(benjamini_hochberg(p)) == [True, True] + [False] * 8
    assert list(holm([0.01, 0.04, 0.03])) == [True, False, False]
    assert list(holm([0.01, 0.02, 0.03])) == [True, True, True]


def test_a_planted_shift_of_two_standard_deviations_is_found_at_n_10():
    rng = np.random.default_rng(25)
    found = total = 0
    for _ in range(100):
        p = [compare(rng.normal(size=10), rng.normal(2.0, size=10)).p for _ in range(PER_PAGE)]
        found += int(benjamini_hochberg(p).sum())
        total += PER_PAGE
    assert found / total >= 0.90


def _runs(cells: dict[tuple[str, str], list[float]], metric: str = "m") -> pd.DataFrame:
    return pd.DataFrame([{"scenario": "s", "backend": backend, "strategy": "range", "sweep": sweep,
                          "metric": metric, "value": value}
                         for (backend, sweep), values in cells.items() for value in values])


def _claim(higher: str, lower: str, says: str = "claim") -> Claim:
    return Claim(says=says, scenario="s", metric="m", higher=(higher,), lower=(lower,))


def test_a_claim_holds_only_if_every_pair_it_names_holds():
    runs = _runs({("legacy", "N=10"): [50, 52, 51, 55, 53, 54] * 2, ("classic", "N=10"): [30, 31, 29, 33, 32, 34] * 2,
                  ("legacy", "N=20"): [150, 152, 151, 155, 153, 154] * 2, ("classic", "N=20"): [60, 61, 59, 63, 62, 64] * 2,
                  ("kip848", "N=10"): [30, 32, 31, 29, 35, 33] * 2, ("kip848", "N=20"): [90, 160, 95, 170, 99, 155] * 2})
    results = evaluate(runs, [_claim("legacy", "classic", "legacy above classic at every N"),
                              _claim("classic", "legacy"), _claim("legacy", "kip848"), _claim("legacy", "zk")])
    verdicts = [result.verdict for result in results]
    assert verdicts == [SUPPORTED, NOT_SUPPORTED, NOT_SUPPORTED, NO_RUNS]
    assert results[0].pairs == 2 and results[0].p == pytest.approx(smallest_claim_p(12, 12)) and results[0].n == "12/12"
    assert results[0].sides == "one-sided" and results[0].k == 4
    # four claims were declared (one never ran): Holm multiplies the smallest p by four
    assert results[0].p_holm == pytest.approx(4 * smallest_claim_p(12, 12))


def test_a_claim_with_too_few_runs_is_undetermined():
    runs = _runs({("legacy", "-"): [50, 52, 51], ("classic", "-"): [30, 31, 29]})
    (result,) = evaluate(runs, [_claim("legacy", "classic")])
    assert result.verdict == TOO_FEW and np.isnan(result.p) and result.n == "3/3"


def test_timings_of_runs_made_beside_another_are_shown_but_never_compared_or_claimed():
    def rows(backend, values, metric, parallel):
        return [{"scenario": "s", "backend": backend, "strategy": "range", "sweep": "-", "n": 4, "parallel": parallel,
                 "metric": metric, "value": v} for v in values]

    apart = {"legacy": [100, 104, 98, 101, 99, 102], "classic": [10, 12, 11, 9, 10, 13]}   # p 0.031 at 6/6
    for metric, parallel, status in [("stable after (s)", True, PARALLEL_TIMING), ("stable after (s)", False, "tested"),
                                     ("join: requests per change", True, "tested"), ("duplicates", True, PARALLEL_TIMING),
                                     ("fenced commits", True, PARALLEL_TIMING), ("offset regressions", True, "tested")]:
        runs = pd.DataFrame([row for backend, values in apart.items() for row in rows(backend, values, metric, parallel)])
        (row,) = comparisons(runs).itertuples()
        assert row.status == status and row.difference == (status == "tested"), (metric, parallel)
        (claimed,) = evaluate(runs, [Claim(says="c", scenario="s", metric=metric, higher=("legacy",),
                                           lower=("classic",))])
        assert claimed.verdict == (BESIDE if status == PARALLEL_TIMING else SUPPORTED), (metric, parallel)


def test_a_claim_on_cells_of_one_value_each_gets_its_exact_p_and_enters_holm():
    runs = _runs({("legacy", "-"): [2] * 10, ("classic", "-"): [0] * 10, ("kip848", "-"): [0] * 10})
    ordered, same = evaluate(runs, [_claim("legacy", "classic"), _claim("classic", "kip848")])
    assert ordered.verdict == SUPPORTED and ordered.shift == 2 and ordered.p == pytest.approx(smallest_claim_p(10, 10))
    assert ordered.p_holm == pytest.approx(2 * smallest_claim_p(10, 10)) and ordered.k == 2
    assert ordered.described == "one value in every run of each cell, n = 10/10"
    assert ordered.coverage == pytest.approx((1 - 22 / 1024) ** 2) and not ordered.exact   # a bound, any cells
    assert same.verdict == NOT_SUPPORTED and same.shift == 0 and same.p == 1.0
    assert same.described == "identical in all 10/10 runs"
    # five runs a side never support a claim: 1 - (31/32)^2 = 0.062 is above 0.05
    (five,) = evaluate(_runs({("legacy", "-"): [2] * 5, ("classic", "-"): [0] * 5}), [_claim("legacy", "classic")])
    assert five.verdict == NOT_SUPPORTED and five.p == pytest.approx(1 - (31 / 32) ** 2)
