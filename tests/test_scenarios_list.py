"""`scenarios`: every name whole whatever the width, and each scenario's wall time on this machine."""

import json

from typer.testing import CliRunner

from experiments.cli.app import app
from experiments.cli.run import SCENARIO_DIR
from experiments.folders.campaign_folder import CampaignFolder
from experiments.folders.run_folder import RunFolder
from experiments.run import wall_time


def test_names_are_never_cut_when_piped_at_80_columns(monkeypatch, tmp_path):
    monkeypatch.setattr(wall_time, "RUN_ROOTS", (tmp_path,))
    result = CliRunner().invoke(app, ["scenarios"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    first_words = {line.split()[0] for line in result.output.splitlines() if line and not line.startswith(" ")}
    names = {path.stem for path in SCENARIO_DIR.glob("*.toml")}
    assert names <= first_words, names - first_words
    assert "…" not in result.output
    assert "timeline: the scenario's own clock" in result.output


def test_wall_time_is_the_median_of_recorded_runs_else_an_estimate(monkeypatch, tmp_path):
    for index, seconds in enumerate((80, 89, 120)):
        run = CampaignFolder(tmp_path / "campaign").run(f"herd-{index}").path
        run.mkdir(parents=True)
        RunFolder(run).lock.write_text(json.dumps({"name": "herd", "status": "completed", "started_ms": 1000,
                                                   "ended_ms": 1000 + seconds * 1000}))
    failed = tmp_path / "herd-failed"
    failed.mkdir()
    RunFolder(failed).lock.write_text(json.dumps({"name": "herd", "status": "failed", "started_ms": 0,
                                                  "ended_ms": 5000}))
    recorded = wall_time.recorded_seconds((tmp_path,))
    assert sorted(recorded["herd"]) == [80, 89, 120]
    herd = wall_time.expected("herd", 60, 11, recorded)
    assert (herd.seconds, herd.runs, herd.text()) == (89, 3, "89 s (median of 3)")
    guess = wall_time.expected("seed002", 135, 100, recorded)
    assert guess.estimated and guess.seconds > 135 and "estimate" in guess.text()
    monkeypatch.setattr(wall_time, "RUN_ROOTS", (tmp_path,))
    listed = CliRunner().invoke(app, ["scenarios"]).output
    herd_row = next(line for line in listed.splitlines() if line.startswith("herd "))
    assert "89 s (median of 3)" in herd_row
