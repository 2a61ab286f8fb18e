"""`coordinator_gap_s` where split brain d is read: the run report's finding and key numbers, and the results
page's split-brain table and campaign finding, with n and the spread where a column has several runs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from experiments.report.campaign_findings import campaign_columns, campaign_finding
from experiments.report.findings import scenario_finding
from experiments.report.results_doc import SPLIT_BRAIN, _per_cell_section
from experiments.report.run_tables import key_numbers
from experiments.report.scenario_runs import scenarios
from experiments.statistics.campaign_stats import COORDINATOR_GAP, GAP_LOOKUPS
from experiments.summary.read_back import RunData
from tests.fixtures.run_record import run_data


def _run(backend: str, gap: float | None, index: int = 0) -> RunData:
    empty = pd.DataFrame()
    return run_data(run_dir=Path(f"/runs/d-{backend}-{index}"), info={"name": "split-brain-d", "backend": backend,
                   "strategy": "range", "members": 3}, facts={"coordinator_gap_s": gap}, verdicts=empty,
                   phases=empty, throughput=empty, ownership=empty, faults=empty, herd=empty, metrics=empty,
                   evidence={})


RUNS = [_run("legacy", None), _run("classic", 9.1, 0), _run("classic", 9.4, 1), _run("classic", 9.2, 2),
        _run("kip848", 8.7)]


def test_the_run_report_says_how_long_the_members_went_without_a_coordinator():
    (scenario,) = scenarios(RUNS)
    text = scenario_finding(scenario).text
    assert ("Longest time a member went without its group coordinator (coordinator_gap_s): classic 9.2 [9.1-9.4] s, "
            "n = 3; kip848 8.7 s.") in text
    numbers = key_numbers(scenario).set_index("measure")
    row = numbers.loc["longest time without a coordinator, s (coordinator_gap_s)"]
    assert row.to_dict() == {"legacy": "", "classic": "9.2 [9.1-9.4], n = 3", "kip848": "8.7"}


def test_a_scenario_that_took_no_coordinator_away_says_nothing_of_it():
    (scenario,) = scenarios([_run("legacy", None), _run("classic", None)])
    assert "coordinator_gap_s" not in scenario_finding(scenario).text
    assert "longest time without a coordinator, s (coordinator_gap_s)" not in set(key_numbers(scenario)["measure"])


def _cells() -> pd.DataFrame:
    rows = []
    for backend, gap, lookups in (("classic", (9.2, 9.1, 9.4), (60, 58, 61)), ("kip848", (8.7, 8.5, 9.0), (17, 16, 18))):
        for metric, (median, low, high) in ((COORDINATOR_GAP, gap), (GAP_LOOKUPS, lookups), ("duplicates", (5, 4, 6))):
            rows.append({"scenario": "split-brain-d", "backend": backend, "strategy": "range", "sweep": "-",
                         "metric": metric, "group_size": 3, "runs": 5, "median": median, "min": low, "max": high})
    return pd.DataFrame(rows)


def test_the_results_page_s_split_brain_table_has_the_coordinator_gap_with_n_and_spread():
    lines = _per_cell_section(_cells(), "split-brain", "Split brain", SPLIT_BRAIN)
    assert "| metric | classic | kip848 |" in lines[-1]
    assert "| coordinator gap (s) | 9.2 [9.1-9.4], n = 5 | 8.7 [8.5-9.0], n = 5 |" in lines[-1]
    assert "| FindCoordinator requests without a coordinator | 60 [58-61], n = 5 | 17 [16-18], n = 5 |" in lines[-1]


def test_the_campaign_finding_gives_the_coordinator_gap_per_backend():
    finding = campaign_finding("split-brain-d", campaign_columns(_cells()), pd.DataFrame())
    assert ("Longest time a member went without its group coordinator (coordinator_gap_s): classic 9.2 [9.1-9.4] s; "
            "kip848 8.7 [8.5-9.0] s.") in finding.text
