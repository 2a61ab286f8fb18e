"""Benchmark: whether the claims' test holds its error rate, and the intervals their labels, under unequal
spreads; the figures docs/campaigns.md quotes.

    .venv/bin/python benchmarks/bench_evidence.py [--draws 40000] [--permutation-draws 4000]
        [--coverage-draws 10000] [--seed 48] [--only false-positives|coverage]

False positives: pairs of cells drawn under the claims' null, "neither cell tends to be larger" (the same
median, spreads free): one cell constant (36 in every run) beside one varying around it (36 + N(0, 1)), a
near-constant cell (36, each run off by N(0, 10) one time in ten) beside a varying one, normal cells whose spreads
differ by a ratio of 1, 2, 5, 10 and 100, and a skewed cell (lognormal) beside a symmetric one of the same
median. Each pair is one claim, "the second cell is larger", tested at 6/6 and 10/10 by the page's test
before (the exact one-sided Mann-Whitney test), by Brunner-Munzel's studentized permutation test (6/6 only:
every one of the 924 splits), and by the claims' test now (`inference.claim_p`, the test of the two
medians). Printed: the
share supported at Holm's first step over 19 claims (0.05/19 = 0.26%, the nominal) and at 0.05, and the family-wise error of 19 such claims under Holm, 1 - (1 - r)^19 with r
the share at 0.05/19 (Holm supports nothing unless its first step does; the claims are independent).

Coverage: the interval of the difference (b - a) printed beside each claim, before (Hodges-Lehmann's,
`inference.shift_interval`, labelled with U's exact coverage) and now (the difference of the medians,
`inference.median_difference`), for a near-constant cell (36, each run off by N(0, s) one time in ten, s = 1, 5, 20) beside a
varying one of the same median, and normal cells a shift of 1 apart with spread ratios 1, 5 and 10: the
share of draws whose interval covers the true difference, against the label (before: per label, the
labels that at least a tenth of the draws got).

Every figure is a share of seeded draws: the same on every machine. The standard error of a share r over N
draws is sqrt(r (1 - r) / N): 0.025 points at r = 0.26% and N = 40,000.
"""

from __future__ import annotations

import argparse
import itertools
import time
import warnings

import numpy as np
from scipy import stats

from experiments.statistics.inference import (
    ONE_SIDED,
    claim_p_rows,
    coverage_text,
    exact_p,
    median_difference,
    shift_interval,
)

HOLM_FIRST = 0.05 / 19       # Holm's first step over the 19 claims the page declared
CLAIMS = 19


def constant(rng, n, size):
    return np.full((size, n), 36.0)


def varying(rng, n, size, spread=1.0):
    return 36.0 + spread * rng.normal(size=(size, n))


def near_constant(rng, n, size, spread=10.0):
    values = np.full((size, n), 36.0)
    off = rng.random((size, n)) < 0.1
    return np.where(off, 36.0 + spread * rng.normal(size=(size, n)), values)


def lognormal(rng, n, size):
    return 36.0 * np.exp(rng.normal(size=(size, n)))      # median 36, skewed


NULLS = {
    "constant vs varying": (constant, varying),
    "near-constant vs varying": (near_constant, varying),
    "spread ratio 1": (varying, lambda rng, n, size: varying(rng, n, size, 1.0)),
    "spread ratio 2": (varying, lambda rng, n, size: varying(rng, n, size, 2.0)),
    "spread ratio 5": (varying, lambda rng, n, size: varying(rng, n, size, 5.0)),
    "spread ratio 10": (varying, lambda rng, n, size: varying(rng, n, size, 10.0)),
    "spread ratio 100": (varying, lambda rng, n, size: varying(rng, n, size, 100.0)),
    "skewed vs symmetric": (lambda rng, n, size: varying(rng, n, size, 20.0), lognormal),
}


def mann_whitney(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.array([exact_p(x, y, sides=ONE_SIDED) for x, y in zip(a, b, strict=True)])


def brunner_munzel_permutation(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Brunner-Munzel's statistic (scipy) against its distribution over every split of the pooled runs into
    two cells of the same sizes; a split whose variance estimate is 0 gives +inf or -inf by the sign of its
    rank difference (scipy's division), 0 when that is 0 too."""
    m, n = a.shape[1], b.shape[1]
    splits = np.array([[i for i in range(m + n) if i not in chosen]
                       + list(chosen) for chosen in itertools.combinations(range(m + n), n)])
    found = []
    for x, y in zip(a, b, strict=True):
        pooled = np.concatenate([x, y])
        split = pooled[splits]
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            observed = float(np.nan_to_num(stats.brunnermunzel(x, y).statistic, nan=0.0))
            every = stats.brunnermunzel(split[:, :m], split[:, m:], axis=1).statistic
        every = np.where(np.isnan(every), 0.0, every)
        found.append(float(np.mean(every >= observed - 1e-12)))
    return np.array(found)


def rates(p: np.ndarray) -> str:
    first, five = (p <= HOLM_FIRST).mean(), (p <= 0.05).mean()
    family = 1 - (1 - first) ** CLAIMS
    return f"{first:7.3%} ({first / HOLM_FIRST:4.1f}x) {five:6.2%}   family-wise over {CLAIMS}: {family:5.1%}"


def false_positives(draws: int, permutation_draws: int, seed: int) -> None:
    print(f"False positives under the claims' null ({draws:,} claims a line; nominal at 0.05/19: "
          f"{HOLM_FIRST:.3%}).")
    print(f"{'null':26} {'n':>5} {'test':28} {'0.05/19':>16} {'0.05':>6}")
    for n in (6, 10):
        for index, (name, (draw_a, draw_b)) in enumerate(NULLS.items()):
            rng = np.random.default_rng([seed, n, index])
            a, b = draw_a(rng, n, draws), draw_b(rng, n, draws)
            tests = [("Mann-Whitney (before)", mann_whitney), ("claims' test (now)", claim_p_rows)]
            if n == 6 and permutation_draws:
                tests.insert(1, ("Brunner-Munzel permutation", None))
            for label, test in tests:
                if test is None:
                    p = brunner_munzel_permutation(a[:permutation_draws], b[:permutation_draws])
                else:
                    p = test(a, b)
                print(f"{name:26} {n:>2}/{n:<2} {label:28} {rates(p)}")
        print()


def coverage(draws: int, seed: int) -> None:
    print(f"Coverage of the interval of the difference ({draws:,} draws a line).")
    cases = {f"near-constant (off by N(0, {s})) vs varying": (
        lambda rng, n, s=s: near_constant(rng, n, 1, s)[0], lambda rng, n: varying(rng, n, 1)[0], 0.0)
        for s in (1, 5, 20)}
    cases |= {f"spread ratio {r}, shift 1": (lambda rng, n: rng.normal(size=n),
                                             lambda rng, n, r=r: 1.0 + r * rng.normal(size=n), 1.0)
              for r in (1, 5, 10)}
    for n in (6, 10):
        for index, (name, (draw_a, draw_b, target)) in enumerate(cases.items()):
            rng = np.random.default_rng([seed, n, 100 + index])
            before: dict[str, list[bool]] = {}
            now = []
            for _ in range(draws):
                a, b = draw_a(rng, n), draw_b(rng, n)
                old, new = shift_interval(a, b), median_difference(a, b)
                before.setdefault(coverage_text(old.coverage, old.exact), []).append(old.low <= target <= old.high)
                now.append(new.low <= target <= new.high)
            shown = "; ".join(f"{np.mean(hits):.1%} of the {len(hits):,} labelled {label}"
                              for label, hits in sorted(before.items(), key=lambda item: -len(item[1]))
                              if len(hits) >= draws // 10)
            print(f"{name:42} {n:>2}/{n:<2} now: covered {np.mean(now):6.1%}, labelled "
                  f"{coverage_text(new.coverage, new.exact)}   before: covered {shown}")
        print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=40_000)
    parser.add_argument("--permutation-draws", type=int, default=4_000)
    parser.add_argument("--coverage-draws", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=48)
    parser.add_argument("--only", choices=["false-positives", "coverage"])
    args = parser.parse_args()
    started = time.monotonic()
    if args.only != "coverage":
        false_positives(args.draws, args.permutation_draws, args.seed)
    if args.only != "false-positives":
        coverage(args.coverage_draws, args.seed)
    print(f"({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    from experiments.run.machine import print_index

    print_index()   # every figure below is this machine's, as fast as this line says
    main()
