"""The family of declared claims is fixed before the runs: Holm over every claim, whatever the data.

- six declared claims, four of them tested as before and two whose cells gave one value in every run: all six
  get an exact one-sided p and Holm's k is 6 (not the 4 that "needed a test");
- a claim that cannot be tested (too few runs) still counts in k, and so does every earlier look the family
  takes in (`earlier`), never supported;
- the claims' table prints k, the measure's name and "one-sided" beside each p, and no blanket "97%";
- on a page made from several campaign files, each claim is tested on its own campaign's runs: two campaigns
  may run one scenario under different settings (seed002 and its load sweep), and pooling them would mix them.
"""

from __future__ import annotations

import pandas as pd
import pytest

from experiments.campaign.model import Claim
from experiments.statistics.claims import (
    NOT_SUPPORTED,
    SUPPORTED,
    TOO_FEW,
    claims_markdown,
    evaluate,
    evaluate_family,
)
from experiments.statistics.inference import smallest_claim_p

TEN = smallest_claim_p(10, 10)       # complete separation at 10/10: 0.00195
LEGACY = [50, 52, 51, 55, 53, 54, 50, 56, 52, 57]
CLASSIC = [30, 31, 29, 33, 32, 34, 30, 28, 31, 33]


def _runs(cells: dict[str, list[float]], metric: str) -> list[dict]:
    return [{"scenario": "s", "backend": backend, "strategy": "range", "sweep": "-", "metric": metric, "value": value}
            for backend, values in cells.items() for value in values]


def _claim(metric: str, higher: str = "legacy", lower: str = "classic") -> Claim:
    return Claim(says=f"{higher} above {lower} on {metric}", scenario="s", metric=metric, higher=(higher,),
                 lower=(lower,))


def test_every_declared_claim_enters_holm_with_its_exact_p():
    separated = {"legacy": LEGACY, "classic": CLASSIC}
    rows = []
    for metric in ("m1", "m2", "m3", "m4"):
        rows += _runs(separated, metric)
    rows += _runs({"legacy": [2] * 10, "classic": [0] * 10}, "constant")
    rows += _runs({"legacy": [10, 12, 9, 14, 11] * 2, "classic": [11, 10, 13, 9, 12] * 2}, "overlap")
    rows += _runs({"legacy": [1] * 10, "classic": [0] * 10}, "whole run: records lost")
    claims = [_claim(metric) for metric in ("m1", "m2", "m3", "m4", "constant", "overlap", "whole run: records lost")]
    results = evaluate(pd.DataFrame(rows), claims)
    assert [result.k for result in results] == [7] * 7
    assert [result.p for result in results[:5]] == pytest.approx([TEN] * 5)
    assert results[0].p_holm == pytest.approx(7 * TEN)        # k = 7, not the 4 pairs that vary
    assert [result.verdict for result in results] == [SUPPORTED] * 5 + [NOT_SUPPORTED, SUPPORTED]
    table = claims_markdown(results)
    assert "| Holm p (k = 7) |" in table and table.count("(one-sided)") == 7 and "97%" not in table
    assert "| whole run: records over 3 s or never handled |" in table
    assert "the higher cell's median run is no larger than the lower cell's" in table


def test_a_claim_that_cannot_be_tested_still_counts_in_the_family():
    rows = _runs({"legacy": LEGACY, "classic": CLASSIC}, "m")
    rows += _runs({"legacy": [50, 52, 51], "classic": [30, 31, 29]}, "few")
    tested, few = evaluate(pd.DataFrame(rows), [_claim("m"), _claim("few")])
    assert few.verdict == TOO_FEW and few.k == tested.k == 2
    assert tested.p_holm == pytest.approx(2 * TEN) and tested.verdict == SUPPORTED


def test_earlier_looks_in_the_family_count_in_k_and_are_never_supported():
    runs = pd.DataFrame(_runs({"legacy": LEGACY, "classic": CLASSIC}, "m"))
    (alone,) = evaluate_family([("mine", runs, [_claim("m")])])
    (looked,) = evaluate_family([("mine", runs, [_claim("m")])], earlier=24)
    assert alone.k == 1 and looked.k == 25 and looked.p == alone.p == pytest.approx(TEN)
    assert alone.verdict == SUPPORTED and looked.p_holm == pytest.approx(25 * TEN)
    assert looked.verdict == SUPPORTED                         # 0.00195 <= 0.05 / 25 = 0.0020 ...
    (more,) = evaluate_family([("mine", runs, [_claim("m")])], earlier=25)
    assert more.verdict == NOT_SUPPORTED                       # ... and > 0.05 / 26 = 0.0019


def test_each_campaign_tests_its_claims_on_its_own_runs():
    mine = pd.DataFrame(_runs({"legacy": LEGACY, "classic": CLASSIC}, "m"))
    theirs = pd.DataFrame(_runs({"legacy": [0, 1, 0, 1, 0] * 2, "classic": [90, 91, 92, 93, 94] * 2}, "m"))
    same_words = _claim("m")
    first, second = evaluate_family([("mine", mine, [same_words]), ("theirs", theirs, [same_words])])
    assert (first.campaign, first.verdict, first.n) == ("mine", SUPPORTED, "10/10")
    assert (second.campaign, second.verdict, second.n) == ("theirs", NOT_SUPPORTED, "10/10")
    assert first.k == second.k == 2 and first.p_holm == pytest.approx(2 * TEN)
    table = claims_markdown([first, second])
    assert table.count("| mine | legacy above classic on m |") == 1 and "| theirs | " in table
