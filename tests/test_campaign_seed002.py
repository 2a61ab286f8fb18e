"""Seed 002's campaigns: the claims on its phases plan, a paired sweep steps its lists together, the whole
run's records over the limit is a campaign metric, and a load sweep reads as a curve against utilisation."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments.campaign import find_campaign, load_campaign
from experiments.run.folder import RunFolder
from experiments.scenario import ScenarioError, load

PAIRED = """\
name = "paired"
repetitions = 1

[[matrix]]
scenario = "seed002"
backends = ["classic"]
sweep = { "workload.service_ms" = [17, 35], "workload.service_p99_ms" = [125, 255] }
paired = true
"""


def test_the_seed002_campaign_plans_its_cells_and_claims_on_phases():
    campaign = load_campaign(find_campaign("seed002"))
    cells = {(cell.backend, cell.strategy) for cell in campaign.cells}
    assert cells == {("classic", "range"), ("classic", "roundrobin"), ("classic", "sticky"),
                     ("classic", "cooperative-sticky"), ("legacy", "range"), ("legacy", "roundrobin"),
                     ("kip848", "uniform"), ("kip848", "range")}
    assert len(campaign.plan()) == 48 and all(cell.repetitions == 6 for cell in campaign.cells)
    metrics = {claim.metric for claim in campaign.claims}
    assert metrics == {"scale-to-50: records lost", "scale-to-100: records lost", "whole run: records lost",
                       "scale-to-50: rebalancing (ms)", "restart-10: records lost"}
    assert any(side.startswith("kip848/") for claim in campaign.claims for side in claim.lower)
    for run in campaign.plan()[:8]:                    # every cell's scenario: the article's setup
        scenario = campaign.scenario_of(run)
        assert scenario.producer.rate == 600 and scenario.topics[0].partitions == 50
        assert round(scenario.load().utilisation, 2) == 0.26


def test_the_load_campaign_sweeps_utilisation_with_the_service_times_shape():
    campaign = load_campaign(find_campaign("seed002-load"))
    assert {(cell.backend, cell.strategy) for cell in campaign.cells} == {
        ("classic", "range"), ("classic", "cooperative-sticky"), ("kip848", "uniform")}
    loads = sorted({campaign.scenario_of(run).load().utilisation for run in campaign.plan()})
    assert loads == pytest.approx([0.3, 0.6, 0.8, 0.9], abs=0.006)
    sigma = load("experiments/scenarios/seed002.toml").workload.sigma
    assert all(campaign.scenario_of(run).workload.sigma == pytest.approx(sigma, abs=0.01) for run in campaign.plan())


def test_a_paired_sweep_steps_its_lists_together(tmp_path):
    path = tmp_path / "paired.toml"
    path.write_text(PAIRED)
    sweeps = [cell.sweep for cell in load_campaign(path).cells]
    assert sweeps == [(("workload.service_ms", 17), ("workload.service_p99_ms", 125)),
                      (("workload.service_ms", 35), ("workload.service_p99_ms", 255))]
    path.write_text(PAIRED.replace("paired = true\n", ""))
    assert len(load_campaign(path).cells) == 4          # crossed: every combination
    path.write_text(PAIRED.replace("[125, 255]", "[125]"))
    with pytest.raises(ScenarioError, match="one length"):
        load_campaign(path)


def test_the_whole_run_counts_the_records_lost_of_the_timeline_only(tmp_path):
    from experiments.summary.campaign_stats import WHOLE_RUN_LOST, _metrics_of

    summary = RunFolder(tmp_path).summary
    summary.mkdir()
    pd.DataFrame({"phase": ["setup", "warmup", "timeline", "steady-50", "scale-to-100", "restart-10", "teardown"],
                  "start_s": [0.0, 2.0, 8.0, 8.0, 18.0, 40.0, 70.0], "end_s": [2.0, 8.0, 8.0, 18.0, 40.0, 70.0, 71.0],
                  "records_lost": [0, 5, 0, 1, 20, 300, 7], "max_latency_ms": 1.0, "rebalance_ms": 0.0,
                  "double_ownership_s": 0.0}).to_parquet(summary / "phases.parquet")
    metrics = dict(_metrics_of(RunFolder(tmp_path)))
    assert metrics[WHOLE_RUN_LOST] == 321                # not the warm-up's nor the teardown's
    assert metrics["restart-10: records lost"] == 300


def test_a_load_sweep_reads_as_points_against_utilisation(tmp_path):
    from experiments.report.plots import utilisation_curve
    from experiments.summary.load_sweep import ARTICLE_TOTALS, scenario_utilisation, utilisation_points

    sweep = "workload.service_ms={}, workload.service_p99_ms={}"
    runs = pd.DataFrame([{"scenario": "seed002", "backend": "classic", "strategy": strategy,
                          "sweep": sweep.format(median, p99), "metric": "whole run: records lost", "value": value}
                         for strategy, median, p99, value in [("range", 17, 125, 10), ("range", 52, 380, 900),
                                                              ("range", 52, 380, 700)]]
                        + [{"scenario": "seed002", "backend": "classic", "strategy": "range", "sweep": "-",
                            "metric": "whole run: records lost", "value": 3}])
    points = utilisation_points(runs)
    assert list(points["utilisation"]) == [0.295, 0.899, 0.899] and list(points["cell"]) == ["classic/range"] * 3
    assert round(scenario_utilisation("seed002"), 2) == 0.26
    image = utilisation_curve(points, tmp_path / "load.png", article=ARTICLE_TOTALS, assumed=0.26)
    assert image.read_bytes().startswith(b"\x89PNG")


def test_a_scenario_named_as_its_campaign_is_the_scenario_not_the_campaign_file(tmp_path):
    campaigns = tmp_path / "campaigns"
    campaigns.mkdir()
    path = campaigns / "seed002.toml"                 # the built-in campaign's case, at an absolute path
    path.write_text(PAIRED.replace('name = "paired"', 'name = "seed002"'))
    assert {cell.scenario for cell in load_campaign(path.absolute()).cells} == {"seed002"}


def test_a_built_in_campaign_beside_another_is_never_taken_for_its_scenario():
    campaign = load_campaign(find_campaign("seed002-load"))   # beside campaigns/seed002.toml
    assert {cell.scenario_path.parent.name for cell in campaign.cells} == {"scenarios"}


def test_a_campaign_report_draws_the_utilisation_curve_of_a_load_sweep(tmp_path):
    from experiments.report.campaign_report import _utilisation_plot

    sweep = "workload.service_ms={}, workload.service_p99_ms={}"
    runs = pd.DataFrame([{"scenario": "seed002", "backend": "kip848", "strategy": "uniform",
                          "sweep": sweep.format(median, p99), "metric": "whole run: records lost", "value": value}
                         for median, p99, value in [(17, 125, 0), (35, 255, 40)]])
    assert _utilisation_plot(runs, tmp_path).name == "utilisation.png"
    assert _utilisation_plot(runs.iloc[:1], tmp_path) is None        # one utilisation is not a curve


def test_a_load_sweep_gets_its_own_table_and_never_stands_for_the_shipped_scenario():
    """A swept cell is another experiment: the article's side-by-side table takes only the scenario as it
    ships; the sweep is read against utilisation, a column a point."""
    from experiments.report.seed002_table import load_sweep_section, seed002_section
    from experiments.summary.campaign_stats import cell_statistics

    sweep = "workload.service_ms={}, workload.service_p99_ms={}"
    rows = [{"scenario": "seed002", "backend": "classic", "strategy": "range", "sweep": sweep.format(median, p99),
             "n": 50, "metric": "whole run: records lost", "value": value}
            for median, p99, values in [(17, 125, (20, 30, 10)), (52, 380, (40_000, 45_000, 43_000))]
            for value in values]
    swept = cell_statistics(pd.DataFrame(rows))
    assert seed002_section(swept) == [], "a sweep's point is not the article's scenario"
    text = "\n".join(load_sweep_section(swept))
    assert "| cell | u = 0.29 | u = 0.90 |" in text
    assert "| classic range | 20 [10-30], n = 3 | 43,000 [40,000-45,000], n = 3 |" in text
    shipped = cell_statistics(pd.DataFrame([{**row, "sweep": "-"} for row in rows]))
    assert seed002_section(shipped) and load_sweep_section(shipped) == []
