"""`compare SCENARIO --backends ... --strategies ... --repeat N`: a grid of cells run as a campaign and answered
with one per-phase table, `median [min-max], n = runs` in every entry. The campaign executor is replaced by one
that writes simulated runs (as the demo's test does); the campaign made on the spot, the Spark summary, the
statistics and the table are real."""

from __future__ import annotations

import pandas as pd
import pytest
from typer.testing import CliRunner

from experiments.campaign.grid import grid_campaign
from experiments.cli.app import app
from experiments.cli.run import SCENARIO_DIR
from experiments.report.compare_table import phase_table
from experiments.report.reference_rows import ARTICLE_PHASES_TOTAL, WHOLE_TIMELINE
from experiments.scenario import load

SCENARIO = "seed002"   # it declares the article's figures ([reference]); the runs are simulated, and short


def _timeline():
    """seed002's phases, in seconds instead of minutes."""
    from experiments.synthetic.simulation import Change

    return (Change(at_s=0.0, action="phase", name="steady-50"), Change(at_s=2.0, action="phase", name="scale-to-100"),
            Change(at_s=2.0, action="join", count=2), Change(at_s=5.0, action="phase", name="scale-to-50"),
            Change(at_s=5.0, action="leave", count=2), Change(at_s=8.0, action="phase", name="restart-10"),
            Change(at_s=8.0, action="crash", count=1))


def _fake_execute(campaign, folder, **_):
    from experiments.campaign.execute import Outcome, open_folder
    from experiments.campaign.manifest import COMPLETED
    from experiments.folders.campaign_folder import CampaignFolder
    from experiments.synthetic.simulation import SyntheticRun, write_run

    manifest = open_folder(campaign, folder)
    for planned in campaign.plan():
        cell = planned.cell
        write_run(CampaignFolder(folder).run(planned.name).path,
                  SyntheticRun(name=cell.scenario, backend=cell.backend, strategy=cell.strategy, members=3,
                               duration_s=11.0, rate=60.0, timeline=_timeline(), seed=planned.seed))
        manifest.runs[planned.name].status = COMPLETED
    manifest.write(folder)
    return Outcome(folder=folder, manifest=manifest, interrupted=False)


def test_the_grid_is_every_backend_and_strategy_it_can_run_each_repeated():
    path = SCENARIO_DIR / f"{SCENARIO}.toml"
    grid = grid_campaign(load(path), path, backends=["classic", "kip848", "legacy"],
                         strategies=["range", "cooperative-sticky"], repeat=3, overrides=["producer.rate=300"])
    assert [(cell.backend, cell.strategy) for cell in grid.campaign.cells] == [
        ("classic", "range"), ("classic", "cooperative-sticky"), ("kip848", "range"),
        ("kip848", "cooperative-sticky"), ("legacy", "range")]
    assert len(grid.campaign.plan()) == 15 and {cell.common for cell in grid.campaign.cells} == {("producer.rate=300",)}
    assert grid.left_out == ("legacy/cooperative-sticky: legacy has range, roundrobin",)


def test_the_table_has_a_row_per_phase_and_measure_and_a_column_per_cell():
    rows = []
    for backend, strategy, base in (("classic", "range", 100), ("kip848", "uniform", 0)):
        for metric, value in (("steady: records lost", 0), ("grow: records lost", base),
                              ("grow: max latency (ms)", 3000), ("whole run: records lost", base + 1)):
            rows.append({"scenario": "s", "backend": backend, "strategy": strategy, "sweep": "-", "metric": metric,
                         "runs": 3, "median": value, "min": value, "max": value + 10})
    table = phase_table(pd.DataFrame(rows))
    assert list(table.columns) == ["phase", "measure", "classic / range", "kip848 / uniform"]
    assert list(dict.fromkeys(table["phase"])) == ["steady", "grow", WHOLE_TIMELINE]
    grow = table[(table["phase"] == "grow") & (table["measure"] == "records over 3 s or never handled")].iloc[0]
    assert grow["classic / range"] == "100 [100-110], n = 3"
    assert table.iloc[-1]["kip848 / uniform"] == "1 [1-11], n = 3"


def test_with_a_reference_its_figures_stand_beside_the_labs_under_its_phase_names():
    reference = load(SCENARIO_DIR / f"{SCENARIO}.toml").reference
    cells, runs = [], []
    for run, lost in (("a", (0, 100, 5)), ("b", (0, 300, 7)), ("c", (1, 200, 6))):
        for phase, value in zip(("steady-50", "scale-to-50", "restart-10"), lost, strict=True):
            runs.append({"run": run, "backend": "classic", "strategy": "range", "sweep": "-",
                         "metric": f"{phase}: records lost", "value": value})
    for phase, median in (("steady-50", 0), ("scale-to-50", 200), ("restart-10", 6)):
        cells.append({"scenario": SCENARIO, "backend": "classic", "strategy": "range", "sweep": "-",
                      "metric": f"{phase}: records lost", "runs": 3, "median": median, "min": median, "max": median})
    table = phase_table(pd.DataFrame(cells), pd.DataFrame(runs), reference)
    assert list(table.columns) == ["phase", "measure", "reference: range", "classic / range"]
    down = table[table["phase"] == "100 → 50 (scale-to-50)"].set_index("measure")
    assert down.loc["records over 3 s or never handled", "reference: range"] == "5,977"
    assert down.loc["max latency (ms)", "reference: range"] == "14,394"
    steady = table[table["phase"] == "steady-50"].iloc[0]
    assert steady["reference: range"] == "-"
    total = table[table["phase"] == ARTICLE_PHASES_TOTAL].iloc[0]     # per run 105, 307, 206: steady left out
    assert (total["reference: range"], total["classic / range"]) == ("6,189", "206 [105-307], n = 3")


def test_the_seed002_references_totals_are_the_sums_of_their_phases():
    for name in ("seed002", "seed002-mixed", "seed002-killed", "seed002-podwise"):
        reference = load(SCENARIO_DIR / f"{name}.toml").reference
        for strategy, figures in reference.figures.items():
            assert sum(values[0] for values in figures.values()) == reference.totals[strategy], (name, strategy)


@pytest.mark.spark
def test_compare_over_a_grid_prints_one_per_phase_table_and_writes_it(spark, tmp_path, monkeypatch):
    monkeypatch.setattr("experiments.campaign.execute", _fake_execute)
    out = tmp_path / "grid"
    result = CliRunner().invoke(app, ["compare", SCENARIO, "--backends", "classic,kip848", "--strategies",
                                      "range,cooperative-sticky", "--repeat", "3", "--out", str(out),
                                      "--no-progress", "--master", "local[2]", "--force"])
    assert result.exit_code == 0, result.output
    text = result.output
    assert "4 cells x 3 runs = 12 runs" in text
    header = next(line for line in text.splitlines() if line.startswith("| phase"))
    for column in ("reference: range", "classic / range", "kip848 / range", "reference: cooperative-sticky",
                   "classic / cooperative-sticky", "kip848 / cooperative-sticky (runs uniform)"):   # the assignor it runs
        assert f" {column} |" in header, column
    down = [line for line in text.splitlines() if line.startswith("| 100 → 50 (scale-to-50) ")]
    assert len(down) == 3 and all(line.count("n = 3") == 4 for line in down)
    assert "| 5,977 |" in down[0] and "| 0 |" in down[0]        # the article's range and cooperative-sticky
    assert any(line.startswith(f"| {ARTICLE_PHASES_TOTAL} ") and "6,189" in line for line in text.splitlines())
    assert any(line.startswith(f"| {WHOLE_TIMELINE} ") for line in text.splitlines())
    assert "its total counts its own phases only" in text
    assert (out / "compare.md").read_text().count("| 100 → 50 (scale-to-50) ") == 3

    # The run report reads the same reference beside one run's phases.
    from experiments.campaign import completed_run_dirs
    from experiments.report.run_tables import strategy_table
    from experiments.summary.read_back import load_run

    run = load_run(next(path for path in completed_run_dirs(out) if "classic-range" in path.name))
    table = strategy_table([run])
    assert list(table.columns[:3]) == ["phase", "measure", "reference: range"]
    row = table[(table["phase"] == "100 → 50 (scale-to-50)") & (table["measure"] == "records over 3 s or never handled")].iloc[0]
    assert row["reference: range"] == "5,977"
    assert {ARTICLE_PHASES_TOTAL, WHOLE_TIMELINE} <= set(table["phase"])
