"""Every measure a campaign records is classified once, as a count the schedule fixes or one timing can
move, and only the first kind is compared across runs made beside another.

- every metric name the statistics produce is in the table (none falls through to the default);
- requests, notifications and offset regressions are fixed by the schedule; duplicates, records over the
  limit, fenced commits, records handled without ownership and every duration can be moved by timing;
- duplicates from runs made two at a time are shown and not compared (the split-brain-a claim on them is
  undetermined), while their offset regressions are compared;
- a listed difference prints both cells' values and its interval's coverage for its data.
"""

from __future__ import annotations

import pandas as pd
import pytest

from experiments.campaign.model import Claim
from experiments.statistics import campaign_stats
from experiments.statistics.campaign_stats import comparisons, differences_table
from experiments.statistics.claims import BESIDE, evaluate
from experiments.statistics.inference import PARALLEL_TIMING
from experiments.statistics.measures import MEASURES, SCHEDULE, TIMING, kind_of, measure_of


def test_every_metric_the_statistics_produce_is_classified():
    produced = [*campaign_stats._HERD_METRICS.values(), *campaign_stats._PHASE_METRICS.values(),
                *campaign_stats._CHECK_METRICS.values(), campaign_stats.WHOLE_RUN_LOST,
                campaign_stats.COORDINATOR_GAP, campaign_stats.GAP_LOOKUPS, "double-ownership (s)"]
    assert [metric for metric in produced if measure_of(metric) not in MEASURES] == []


def test_the_two_kinds():
    for metric in ("join: requests per change", "leave: notifications per change", "offset regressions"):
        assert kind_of(metric) == SCHEDULE, metric
    for metric in ("duplicates", "scale-to-100: records lost", "whole run: records lost", "fenced commits",
                   "consumed without ownership", "join: stable after (s)", "stable: max latency (ms)",
                   "FindCoordinator requests without a coordinator", "something new (s)"):
        assert kind_of(metric) == TIMING, metric


def _split_brain(parallel: bool) -> pd.DataFrame:
    values = {("legacy", "duplicates"): [611, 640, 663, 655, 630], ("classic", "duplicates"): [667, 671, 672, 670, 668],
              ("legacy", "offset regressions"): [2] * 5, ("classic", "offset regressions"): [0] * 5}
    return pd.DataFrame([{"scenario": "split-brain-a", "backend": backend, "strategy": "range", "sweep": "-",
                          "n": 3, "parallel": parallel, "metric": metric, "value": value}
                         for (backend, metric), runs in values.items() for value in runs])


def test_counts_timing_can_move_are_not_compared_from_runs_made_beside_another():
    compared = comparisons(_split_brain(parallel=True)).set_index("metric")
    assert compared.loc["duplicates", "status"] == PARALLEL_TIMING and not compared.loc["duplicates", "difference"]
    assert compared.loc["offset regressions", "status"] == "tested"
    claim = Claim(says="the classic zombie duplicates more than 0.8's", scenario="split-brain-a", metric="duplicates",
                  higher=("classic",), lower=("legacy",))
    (result,) = evaluate(_split_brain(parallel=True), [claim])
    assert result.verdict == BESIDE
    (alone,) = evaluate(_split_brain(parallel=False), [claim])
    # tested: complete separation, whose p at 5/5 is 1 - (31/32)^2 = 0.062 (no claim at 5/5 is supported)
    assert alone.verdict == "not supported" and alone.p == pytest.approx(1 - (31 / 32) ** 2)


def test_a_listed_difference_prints_both_cells_values_and_its_coverage():
    compared = comparisons(_split_brain(parallel=False))
    table = differences_table(compared[compared["difference"]]).set_index("metric")
    row = table.loc["duplicates"]
    assert {row["a"], row["b"]} == {"classic: 670 [667-672], n = 5", "legacy: 640 [611-663], n = 5"}
    assert row["difference of medians (b - a) [interval, coverage]"].endswith(", ≥ 87.8%]")   # any cells, 5/5
    assert table.loc["offset regressions", "difference of medians (b - a) [interval, coverage]"].endswith(
        "2.0, ≥ 87.8%]")
