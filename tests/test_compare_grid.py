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
from experiments.report.compare_table import WHOLE_TIMELINE, phase_table
from experiments.scenario import load

SCENARIO = "demo-herd"


def _timeline():
    from experiments.synthetic.simulation import Change

    return (Change(at_s=0.0, action="phase", name="steady"), Change(at_s=3.0, action="phase", name="grow"),
            Change(at_s=3.0, action="join", count=2), Change(at_s=7.0, action="phase", name="shrink"),
            Change(at_s=7.0, action="leave", count=2))


def _fake_execute(campaign, folder, **_):
    from experiments.campaign.execute import Outcome, open_folder
    from experiments.campaign.folder import CampaignFolder
    from experiments.campaign.manifest import COMPLETED
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
                         strategies=["range", "cooperative-sticky"], repeat=3, overrides=["group.members=4"])
    assert [(cell.backend, cell.strategy) for cell in grid.campaign.cells] == [
        ("classic", "range"), ("classic", "cooperative-sticky"), ("kip848", "range"),
        ("kip848", "cooperative-sticky"), ("legacy", "range")]
    assert len(grid.campaign.plan()) == 15 and {cell.common for cell in grid.campaign.cells} == {("group.members=4",)}
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


@pytest.mark.spark
def test_compare_over_a_grid_prints_one_per_phase_table_and_writes_it(spark, tmp_path, monkeypatch):
    monkeypatch.setattr("experiments.campaign.execute", _fake_execute)
    out = tmp_path / "grid"
    result = CliRunner().invoke(app, ["compare", SCENARIO, "--backends", "classic,kip848", "--strategies",
                                      "range,cooperative-sticky", "--repeat", "3", "--out", str(out),
                                      "--no-progress", "--master", "local[2]"])
    assert result.exit_code == 0, result.output
    text = result.output
    assert "4 cells x 3 runs = 12 runs" in text
    header = next(line for line in text.splitlines() if line.startswith("| phase"))
    for cell in ("classic / range", "classic / cooperative-sticky", "kip848 / range", "kip848 / cooperative-sticky"):
        assert cell in header
    grow = [line for line in text.splitlines() if line.startswith("| grow ")]
    assert len(grow) == 3 and all(line.count("n = 3") == 4 for line in grow)
    assert (out / "compare.md").read_text().count("| grow ") == 3
