"""The classic protocol's backend is named `classic`, and `modern`, its earlier name, is an alias of it.

- the registry: `profile("modern")` is the classic profile; unknown names are refused with the choices;
- the command line: `run --backend modern` runs as `classic` (its folder, events and lock.json say so),
  and `member --backend modern` makes a classic member;
- a campaign file's `backends` and claims may say `modern`; its cells are named `classic`;
- what older runs wrote is read as `classic`: lock.json, a summary's run.json, the events' backend field,
  a campaign manifest;
- what the report shows of a backend (colour, marker, column) is its profile's answer, alias or not.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from experiments.campaign.manifest import Manifest, RunEntry
from experiments.campaign.model import load_campaign
from experiments.cli.app import app
from experiments.folders.run_folder import RunFolder, record_to_summarise
from experiments.folders.run_record import NoRunRecord
from experiments.report.plots import backend_style
from experiments.report.scenario_runs import backend_order
from experiments.run import runner
from experiments.run.runner import Run, RunOptions
from experiments.scenario import loads, resolve
from experiments.summary.read_back import load_run
from experiments.synthetic.kip848_simulation import Kip848Simulation
from experiments.synthetic.simulation import simulation_class
from rebalance.backends import GroupProtocol, backend_names, canonical_name, profile, profiles
from tests.fixtures.scenarios import tiny_join


def test_the_registry_answers_to_the_alias():
    assert backend_names() == ("classic", "kip848", "legacy")
    assert profile("modern") is profile("classic") and profile("classic").aliases == ("modern",)
    assert canonical_name("modern") == "classic" and canonical_name("unknown") == "unknown"
    assert [each.name for each in profiles()] == ["legacy", "classic", "kip848"]   # oldest protocol first
    assert [each.group_protocol for each in profiles()] == [None, GroupProtocol.CLASSIC, GroupProtocol.CONSUMER]
    with pytest.raises(ValueError, match="classic, kip848, legacy"):
        profile("zookeeper")


@pytest.fixture
def started(monkeypatch) -> list:
    """The options the runner was asked to run with; the runner itself is never started."""
    calls: list = []

    def run(scenario, options, **_):
        calls.append(options)
        return runner.RunResult(options.run_dir, "completed")

    monkeypatch.setattr(runner, "run", run)
    return calls


@pytest.mark.parametrize("given", ["classic", "modern"])
def test_run_takes_the_alias_and_runs_the_backend_by_its_name(tmp_path, started, given):
    scenario = tmp_path / "tiny.toml"
    scenario.write_text(tiny_join("tiny"))
    result = CliRunner().invoke(app, ["run", str(scenario), "--backend", given, "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert [options.backend for options in started] == ["classic"]


def test_run_refuses_an_unknown_backend_naming_the_choices(tmp_path, started):
    scenario = tmp_path / "tiny.toml"
    scenario.write_text(tiny_join("tiny"))
    result = CliRunner().invoke(app, ["run", str(scenario), "--backend", "zk", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "choose one of classic, kip848, legacy" in result.output
    assert not started


def test_a_run_given_the_alias_records_the_backends_name(tmp_path):
    scenario = loads(tiny_join("tiny").replace('name = "tiny"', 'name = "tiny"\nbackends = ["modern"]'),
                     source="tiny.toml")
    assert scenario.backends == ("classic",)
    run = Run(scenario, RunOptions(backend="modern", run_dir=tmp_path, progress=False), resolve(scenario))
    assert run.backend == "classic" and run.profile.name == "classic" and "-classic-" in run.run_id


def test_member_takes_the_alias():
    result = CliRunner().invoke(app, ["member", "--backend", "modern", "--group", "g", "--topic", "t"])
    assert result.exit_code == 2 and "--bootstrap HOST:PORT is required for the classic backend" in result.output


def test_a_campaign_file_may_name_the_alias_and_its_cells_are_named_classic(tmp_path):
    (tmp_path / "tiny.toml").write_text(tiny_join("tiny"))
    path = tmp_path / "old.toml"
    path.write_text('name = "old"\nrepetitions = 5\n\n[[matrix]]\nscenario = "tiny.toml"\n'
                    'backends = ["legacy", "modern"]\n\n[[claims]]\nsays = "s"\nscenario = "tiny"\n'
                    'metric = "duplicates"\nhigher = ["legacy"]\nlower = ["modern/range"]\n')
    campaign = load_campaign(path)
    assert [cell.backend for cell in campaign.cells] == ["legacy", "classic"]
    assert campaign.cells[1].key.startswith("tiny-classic-range")
    assert campaign.claims[0].lower == ("modern/range",)   # kept as written; it selects the classic cells


def test_an_older_summary_and_older_events_are_read_as_classic(tmp_path):
    old = RunFolder(tmp_path / "run")
    old.summary.mkdir(parents=True)
    old.summary_record.write_text(json.dumps({"info": {"name": "old", "backend": "modern", "strategy": "range"},
                                                  "facts": {}}))
    assert load_run(tmp_path / "run").backend == "classic"
    # a run whose record names the backend by its earlier name
    RunFolder(tmp_path).lock.write_text(json.dumps({
        "name": "old", "run_id": "old-1", "backend": "modern", "strategy": "range", "session_timeout_ms": 10000,
        "topics": {"t": 2}, "members": 2, "group": "g", "status": "completed"}))
    assert record_to_summarise(RunFolder(tmp_path)).backend == "classic"


def test_a_run_without_its_record_is_refused_by_name(tmp_path):
    """The summary reads what a run was from its lock.json and guesses nothing from events."""
    RunFolder(tmp_path).events.mkdir()
    with pytest.raises(NoRunRecord, match="no lock.json"):
        record_to_summarise(RunFolder(tmp_path))


def test_an_older_campaign_manifest_is_read_as_classic(tmp_path):
    entry = RunEntry(run="tiny-modern-range-r0", cell="tiny-modern-range", scenario="tiny", scenario_sha256="0",
                     backend="modern", strategy="range", sweep={}, overrides=[], repetition=0, seed=1)
    Manifest(campaign={"name": "old"}, machine={}, runs={entry.run: entry}).write(tmp_path)
    (read,) = Manifest.read(tmp_path).runs.values()
    assert read.backend == "classic" and read.run == "tiny-modern-range-r0"


def test_the_report_asks_the_profile_for_style_and_column():
    assert backend_style("modern") == backend_style("classic") == (profile("classic").colour, profile("classic").marker)
    assert len({backend_style(name) for name in backend_names()}) == 3
    assert backend_style("new", ["new", "other"]) != backend_style("other", ["new", "other"])   # no profile: spares
    assert sorted(["kip848", "unknown", "classic", "legacy", "modern"], key=backend_order) == [
        "legacy", "classic", "modern", "kip848", "unknown"]


def test_a_synthetic_run_simulates_the_protocol_its_profile_names():
    assert simulation_class("kip848") is Kip848Simulation
    assert simulation_class("classic") is simulation_class("legacy") is simulation_class("modern")
    assert simulation_class("classic") is not Kip848Simulation


def test_the_settings_check_names_the_section_as_the_file_spells_it():
    from experiments.run.member_configs import check_member_settings
    from experiments.scenario import ScenarioError

    text = tiny_join("tiny") + '\n[group.modern]\n"heartbeat.interval.ms" = "often"\n'
    scenario = loads(text, source="tiny.toml")
    with pytest.raises(ScenarioError) as caught:
        check_member_settings(scenario, profile("classic"))
    (problem,) = caught.value.problems
    assert problem.field == "group.modern"
    assert problem.line == next(n for n, line in enumerate(text.splitlines(), 1) if line == "[group.modern]")


def test_a_page_names_the_assignor_a_backend_runs_under_a_classic_name():
    from rebalance.backends import profile

    assert profile("kip848").strategy_label("cooperative-sticky") == "cooperative-sticky (runs uniform)"
    assert profile("kip848").strategy_label("range") == "range"
    assert profile("kip848").strategy_label("default") == "uniform"
    assert profile("classic").strategy_label("cooperative-sticky") == "cooperative-sticky"
