"""Seed 002's campaigns: the claims on its phases plan, a paired sweep steps its lists together, the whole
run's records over the limit is a campaign metric, and a load sweep reads as a curve against utilisation."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments.campaign import find_campaign, load_campaign
from experiments.folders.run_folder import RunFolder
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


LOWERED = (("group.kip848.group.consumer.session.timeout.ms", 10000),
           ("group.kip848.group.consumer.heartbeat.interval.ms", 3000))


def test_the_seed002_campaign_plans_its_cells_and_claims_on_phases():
    campaign = load_campaign(find_campaign("seed002"))
    cells = {(cell.backend, cell.strategy, cell.sweep) for cell in campaign.cells}
    assert cells == {("classic", "range", ()), ("classic", "roundrobin", ()), ("classic", "sticky", ()),
                     ("classic", "cooperative-sticky", ()), ("legacy", "range", ()), ("legacy", "roundrobin", ()),
                     ("kip848", "uniform", ()), ("kip848", "range", ()), ("kip848", "uniform", LOWERED)}
    # the cells a claim names run 10 times (the two medians' test supports nothing at 6 a side), the others 6
    named = {side for claim in campaign.claims for side in (*claim.higher, *claim.lower)}
    reps = {f"{cell.backend}/{cell.strategy}": cell.repetitions for cell in campaign.cells if not cell.sweep}
    assert all(reps[side] == 10 for side in named) and set(reps.values()) == {6, 10}
    assert len(campaign.plan()) == sum(cell.repetitions for cell in campaign.cells) == 70
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
    from experiments.statistics.campaign_stats import WHOLE_RUN_LOST, metrics_of

    run = RunFolder(tmp_path)
    run.summary.mkdir()
    pd.DataFrame({"phase": ["setup", "warmup", "timeline", "steady-50", "scale-to-100", "restart-10", "teardown"],
                  "start_s": [0.0, 2.0, 8.0, 8.0, 18.0, 40.0, 70.0], "end_s": [2.0, 8.0, 8.0, 18.0, 40.0, 70.0, 71.0],
                  "records_lost": [0, 5, 0, 1, 20, 300, 7], "max_latency_ms": 1.0, "rebalance_ms": 0.0,
                  "double_ownership_s": 0.0}).to_parquet(run.summary_table("phases"))
    metrics = dict(metrics_of(RunFolder(tmp_path)))
    assert metrics[WHOLE_RUN_LOST] == 321                # not the warm-up's nor the teardown's
    assert metrics["restart-10: records lost"] == 300


def test_a_load_sweep_reads_as_points_against_utilisation(tmp_path):
    from experiments.report.plots import utilisation_curve
    from experiments.statistics.load_sweep import ARTICLE_TOTALS, scenario_utilisation, utilisation_points

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
    from experiments.statistics.campaign_stats import cell_statistics

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


@pytest.mark.parametrize("name", ["seed002", "seed002-mixed", "seed002-load"])
def test_kip848_runs_at_kafkas_defaults_and_once_more_at_the_classic_clients_timing(name):
    """Each KIP-848 cell at Kafka 4's defaults (the brokers' 45 s session), and one more, told apart by its sweep,
    at the classic cells' 10 s session and 3 s heartbeat with the brokers' minimums lowered; the classic and
    legacy cells are the classic clients' 10 s session."""
    from experiments.run.member_configs import native_settings
    from rebalance.backends import profile

    campaign = load_campaign(find_campaign(name))
    sessions = {}
    for cell in campaign.cells:
        scenario = load(cell.scenario_path, overrides=cell.overrides(campaign.seed))
        backend = profile(cell.backend)
        settings = native_settings(scenario, backend)
        lowered = all(point in cell.sweep for point in LOWERED)
        sessions[(cell.backend, lowered)] = backend.session_ms(scenario.group.session_timeout_ms, settings)
        if lowered:
            assert settings["group.consumer.min.session.timeout.ms"] == 10000
            assert settings["group.consumer.min.heartbeat.interval.ms"] == 3000
    assert sessions[("kip848", False)] == 45_000 and sessions[("kip848", True)] == 10_000
    assert {session for (backend, _), session in sessions.items() if backend != "kip848"} == {10_000}
    keys = [cell.key for cell in campaign.cells]
    assert len(keys) == len(set(keys))


def test_the_kip848_claims_use_the_cells_at_kafkas_defaults():
    """Claims pair cells of one sweep value: classic/range (no sweep) meets only kip848/uniform without one."""
    from experiments.statistics.claims import _pairs

    for name in ("seed002", "seed002-mixed"):
        campaign = load_campaign(find_campaign(name))
        rows = [{"scenario": cell.scenario, "backend": cell.backend, "strategy": cell.strategy,
                 "sweep": ", ".join(f"{k}={v}" for k, v in cell.sweep) or "-", "metric": claim.metric,
                 "value": float(run), "parallel": 1}
                for claim in campaign.claims for cell in campaign.cells for run in range(6)]
        runs = pd.DataFrame(rows).drop_duplicates()
        for claim in campaign.claims:
            if any(side.startswith("kip848") for side in (*claim.higher, *claim.lower)):
                assert len(_pairs(runs, claim)) == 1, claim.says   # the pair at Kafka's defaults, no other


def test_the_kip848_cell_at_the_classic_timing_is_its_own_row_and_curve():
    """On the load sweep's page table and curve the lowered KIP-848 cell is not folded into the one at Kafka's
    defaults: its row and its curve carry its settings, its columns are the same utilisations."""
    from experiments.report.seed002_table import load_sweep_section
    from experiments.statistics.campaign_stats import cell_statistics
    from experiments.statistics.load_sweep import utilisation_points

    workload = "workload.service_ms={}, workload.service_p99_ms={}"
    lowered = ", ".join(f"{key}={value}" for key, value in LOWERED)
    rows = [{"scenario": "seed002", "backend": "kip848", "strategy": "uniform",
             "sweep": workload.format(median, p99) + (f", {lowered}" if at_classic_timing else ""), "n": 50,
             "metric": "whole run: records lost", "value": value + (1000 if at_classic_timing else 0)}
            for at_classic_timing in (False, True)
            for median, p99, values in [(17, 125, (20, 30, 10)), (52, 380, (400, 450, 430))] for value in values]
    text = "\n".join(load_sweep_section(cell_statistics(pd.DataFrame(rows))))
    assert "| cell | u = 0.29 | u = 0.90 |" in text
    assert "| kip848 uniform | 20 [10-30], n = 3 | 430 [400-450], n = 3 |" in text
    assert (f"| kip848 uniform ({lowered}) | 1,020 [1,010-1,030], n = 3 | 1,430 [1,400-1,450], n = 3 |") in text
    points = utilisation_points(pd.DataFrame(rows))
    assert set(points["cell"]) == {"kip848/uniform", f"kip848/uniform ({lowered})"}
