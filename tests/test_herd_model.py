"""The herd cost model: coefficients recovered from known costs, folded terms, spread, refusals."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from experiments.summary.herd_model import HerdModel, NoFit, curve, fit_models, fit_one


def rows(backend: str, cost, grid, repetitions: int = 1, noise: float = 0.0, kind: str = "join") -> pd.DataFrame:
    rng = np.random.default_rng(7)
    out = []
    for rep in range(repetitions):
        for n, p, m in grid:
            out.append({"run": f"runs/{backend}-{n}-{p}-{rep}", "backend": backend, "kind": kind, "N": n, "P": p,
                        "M": float(m), "requests": cost(n, p, m) + rng.normal(0, noise), "repetition": rep})
    return pd.DataFrame(out)


def test_legacy_terms_are_recovered_over_an_n_by_p_grid():
    grid = [(n, p, 0) for n in (5, 10, 25, 50) for p in (100, 200, 400)]
    model = fit_one("legacy", "join", rows("legacy", lambda n, p, m: 1.0 * n * n + 12 * n + 4 * p + 30, grid))
    assert isinstance(model, HerdModel) and not model.folded
    found = {c.term: c.median for c in model.coefficients}
    assert found == pytest.approx({"N2": 1.0, "N": 12.0, "P": 4.0, "1": 30.0}, abs=1e-6)
    assert model.worst_residual < 1e-9
    assert model.formula.startswith("1.00·N² + 12.0·N + 4.00·P")


def test_p_in_step_with_n_folds_the_partition_term_into_n():
    grid = [(n, 2 * n, 0) for n in (4, 8, 16, 32)]
    model = fit_one("legacy", "join", rows("legacy", lambda n, p, m: n * n + 10 * n + 3 * p + 5, grid))
    assert model.terms == ("N2", "N", "1") and "P = 2N" in model.folded
    found = {c.term: c.median for c in model.coefficients}
    assert found["N"] == pytest.approx(10 + 3 * 2) and found["N2"] == pytest.approx(1.0)


def test_kip848_costs_what_the_moved_members_cost_and_modern_what_every_member_costs():
    grid = [(n, 2 * n, m) for n, m in ((10, 3), (30, 4), (100, 3), (300, 5), (1000, 4))]
    kip = fit_one("kip848", "join", rows("kip848", lambda n, p, m: 6 * m + 2, grid))
    assert {c.term: round(c.median, 6) for c in kip.coefficients} == {"moved": 6.0, "1": 2.0}
    classic = fit_one("classic", "join", rows("classic", lambda n, p, m: 4 * n + 3, grid))
    assert {c.term: round(c.median, 6) for c in classic.coefficients} == {"N": 4.0, "1": 3.0}
    assert curve(classic, np.array([50.0]), partitions=100.0)[0] == pytest.approx(203.0)


def test_spread_is_over_one_fit_per_repetition():
    grid = [(n, 2 * n, 0) for n in (10, 30, 100, 300)]
    model = fit_one("classic", "join", rows("classic", lambda n, p, m: 4 * n + 3, grid, repetitions=5, noise=20))
    slope = model.coefficients[0]
    assert model.fits == 5 and slope.low < slope.median < slope.high
    assert slope.low == pytest.approx(4, abs=0.5) and slope.high == pytest.approx(4, abs=0.5)
    assert "n = 5 fits" in model.sentence()


def test_fewer_than_four_group_sizes_give_no_model_and_say_why():
    grid = [(n, 2 * n, 0) for n in (8, 16, 32)]
    refused = fit_models(rows("legacy", lambda n, p, m: n * n, grid))
    assert len(refused) == 1 and isinstance(refused[0], NoFit)
    assert "3 group sizes; a fit needs at least 4" in refused[0].sentence()
