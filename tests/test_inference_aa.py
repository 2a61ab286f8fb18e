"""A/A checks that can fail: the per-comparison false-positive rate of the lab's exact test, and the real
coverage of the shift intervals against the labels the pages print, over a few thousand simulated pairs.

- Both cells drawn from one distribution (continuous; tied counts; counts that are mostly one value, so that
  one cell or both often gave one value in every run), at 5/5 and 10/10: the share of pairs with a two-sided
  p <= 0.05 is at most 5% plus MARGIN.
- The same check fails when the comparison is broken on purpose: the smaller one-sided p used where the
  two-sided one is meant.
- Each interval's printed coverage is met: exact labels within MARGIN of the simulated coverage, lower
  bounds ("≥") not above it by more than MARGIN; the blanket untied label (96.8% at 5/5) on a constant cell
  fails that check.

MARGIN: three binomial standard deviations of a rate near 5% over PAIRS pairs (0.49% each), rounded up.
"""

from __future__ import annotations

import numpy as np
import pytest

from experiments.summary.inference import (
    BOTH_CONSTANT,
    ONE_CONSTANT,
    ONE_SIDED,
    TIED,
    UNTIED,
    exact_p,
    shift_interval,
)

PAIRS = 2000
MARGIN = 0.015
LIMIT = 0.05 + MARGIN


def _continuous(rng, n):
    return rng.normal(size=n)


def _tied(rng, n):
    return rng.poisson(3, n).astype(float)


def _usual(n: int) -> float:
    """The chance of a run's usual value that makes a cell of n runs give it in every run half the time."""
    return 0.5 ** (1 / n)


def _mostly_one_value(rng, n):
    return np.where(rng.random(n) < _usual(n), 0.0, 1.0 + rng.poisson(2, n))


DRAWS = {"continuous": _continuous, "tied": _tied, "mostly one value": _mostly_one_value}


def _two_sided(a, b):
    return exact_p(a, b)


def _one_sided_as_two(a, b):
    """Broken on purpose: the smaller one-sided p, where the two-sided p is meant."""
    return min(exact_p(a, b, sides=ONE_SIDED), exact_p(b, a, sides=ONE_SIDED))


def false_positive_rate(p_of, draw, n: int, seed: int, pairs: int = PAIRS) -> tuple[float, float]:
    """(share of A/A pairs with p <= 0.05, share of pairs where a cell gave one value in every run)."""
    rng = np.random.default_rng(seed)
    hits = constant = 0
    for _ in range(pairs):
        a, b = draw(rng, n), draw(rng, n)
        hits += p_of(a, b) <= 0.05
        constant += bool(np.all(a == a[0]) or np.all(b == b[0]))
    return hits / pairs, constant / pairs


@pytest.mark.parametrize("n", [5, 10])
@pytest.mark.parametrize("kind", list(DRAWS))
def test_the_per_comparison_false_positive_rate_is_at_most_five_percent_plus_the_margin(kind, n):
    rate, constant = false_positive_rate(_two_sided, DRAWS[kind], n, seed=3400 + n)
    print(f"{kind} at {n}/{n}: {rate:.2%} of {PAIRS} A/A pairs at p <= 0.05 (a constant cell in {constant:.0%})")
    assert rate <= LIMIT, f"{kind} at {n}/{n}: {rate:.2%} of A/A pairs called different"
    if kind == "mostly one value":
        assert constant >= 0.25, "the case of a constant cell must be exercised"


@pytest.mark.parametrize("n", [5, 10])
def test_the_a_a_check_fails_when_a_one_sided_p_is_used_as_a_two_sided_one(n):
    rate, _ = false_positive_rate(_one_sided_as_two, _continuous, n, seed=3400 + n)
    print(f"broken at {n}/{n}: {rate:.2%}")
    assert rate > LIMIT, f"the broken comparison passed the A/A check at {n}/{n}: {rate:.2%}"


def _label_holds(observed: float, label: float, exact: bool) -> bool:
    return abs(observed - label) <= MARGIN if exact else observed >= label - MARGIN


def _simulated_coverage(draw_a, draw_b, target: float, n: int, seed: int, pairs: int = PAIRS):
    """Per case met: (covered share, the labels printed, whether exact, pairs)."""
    rng = np.random.default_rng(seed)
    found: dict[str, list] = {}
    for _ in range(pairs):
        interval = shift_interval(draw_a(rng, n), draw_b(rng, n))
        found.setdefault(interval.case, []).append((interval.low <= target <= interval.high, interval.coverage,
                                                    interval.exact))
    return {case: (np.mean([row[0] for row in rows]), {row[1] for row in rows}, {row[2] for row in rows}, len(rows))
            for case, rows in found.items()}


# (case, cell a, cell b, the true shift of their medians)
COVERAGE_CASES = [
    (UNTIED, lambda rng, n: rng.normal(size=n), lambda rng, n: rng.normal(1.5, size=n), 1.5),
    (TIED, lambda rng, n: rng.poisson(3, n).astype(float), lambda rng, n: rng.poisson(3, n) + 2.0, 2.0),
    (ONE_CONSTANT, lambda rng, n: np.full(n, 306.0), lambda rng, n: rng.normal(12_000, 60, size=n), 12_000 - 306.0),
    (BOTH_CONSTANT, lambda rng, n: np.where(rng.random(n) < _usual(n), 2.0, 3.0),
     lambda rng, n: np.where(rng.random(n) < _usual(n), 0.0, 1.0), -2.0),
]


@pytest.mark.parametrize("n", [5, 10])
@pytest.mark.parametrize(("case", "draw_a", "draw_b", "target"), COVERAGE_CASES, ids=[c[0] for c in COVERAGE_CASES])
def test_each_interval_covers_as_often_as_its_label_says(case, draw_a, draw_b, target, n):
    found = _simulated_coverage(draw_a, draw_b, target, n, seed=340 + n)
    assert case in found and found[case][3] >= 150, found.keys()
    observed, labels, exact, _ = found[case]
    (label,), (is_exact,) = labels, exact
    assert is_exact == (case in (UNTIED, ONE_CONSTANT))
    print(f"{case} at {n}/{n}: covered {observed:.2%} of {found[case][3]} pairs, labelled {label:.2%}")
    assert _label_holds(observed, label, is_exact), f"{case} at {n}/{n}: covered {observed:.1%}, labelled {label:.1%}"


def test_the_blanket_untied_label_on_a_constant_cell_fails_the_coverage_check():
    untied_label = shift_interval(np.arange(5.0), np.arange(5.0) + 0.5).coverage      # 244/252
    _, draw_a, draw_b, target = COVERAGE_CASES[2]
    observed = _simulated_coverage(draw_a, draw_b, target, 5, seed=345)[ONE_CONSTANT][0]
    assert untied_label == pytest.approx(244 / 252)
    assert not _label_holds(observed, untied_label, True)
    assert _label_holds(observed, 0.9375, True)
