"""`run`, `compare` and `campaign` write only into a folder of their own, and say so before anything starts.

- a non-empty --out is refused, naming the folder and --force, and nothing is started (the runner is
  replaced by one that fails the test if called);
- --force deletes a run's (or a compare's) folder and runs; it never deletes a folder that holds no run,
  a campaign's, or the current directory;
- a campaign refuses a folder it did not make, and one made by another campaign file, naming --out;
  a folder of the same campaign file is still resumed;
- the runner's counts (its final line) never include events an earlier run left in the folder.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from experiments.cli.app import app
from experiments.folders.campaign_folder import CampaignFolder
from experiments.folders.run_folder import RunFolder
from experiments.folders.run_record import RunRecord
from experiments.run import comparison, runner
from experiments.run.progress import Progress
from experiments.scenario import load, resolve
from rebalance import events as ev
from tests.fixtures.scenarios import tiny_join

SCENARIO = tiny_join("tiny", timeline_extra="""
[[timeline]]
at = 5
action = "leave"
member = 2
""")

CAMPAIGN = """\
name = "tiny-campaign"
repetitions = 1
seed = 4

[[matrix]]
scenario = "tiny.toml"
backends = ["classic"]
"""


@pytest.fixture
def scenario(tmp_path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(SCENARIO)
    return path


@pytest.fixture
def started(monkeypatch) -> list:
    """What the runner was asked to run; the runner itself is never started."""
    calls: list = []

    def run(scenario, options, **_):
        calls.append(options.run_dir)
        return runner.RunResult(options.run_dir, "completed")

    def compare(scenario, run_dir, **_):
        calls.append(run_dir)
        return [runner.RunResult(run_dir / "classic", "completed")]

    monkeypatch.setattr(runner, "run", run)
    monkeypatch.setattr(comparison, "compare", compare)
    return calls


def earlier_run(folder: Path, status: str = "completed") -> Path:
    """What a run leaves: its lock.json and event files."""
    RunFolder(folder).events.mkdir(parents=True)
    (RunFolder(folder).events / "runner.jsonl").write_text('{"type":"phase","name":"setup"}\n')
    RunFolder(folder).write_record(RunRecord(name="tiny", run_id="tiny-classic-1", backend="classic", strategy="range",
                                   session_timeout_ms=6000, topics={"t0": 4}, members=2, group="g", status=status))
    return folder


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_a_run_refuses_a_folder_an_earlier_run_left(tmp_path, scenario, started):
    out = earlier_run(tmp_path / "herd-5")
    result = invoke("run", str(scenario), "--backend", "classic", "--out", str(out))
    assert result.exit_code == 2
    assert f"--out {out} holds a completed run of tiny on classic" in result.output
    assert "--force" in result.output
    assert started == [] and RunFolder(out).lock.is_file()


def test_compare_refuses_a_non_empty_folder(tmp_path, scenario, started):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    result = invoke("compare", str(scenario), "--out", str(out))
    assert result.exit_code == 2 and f"--out {out} is not empty" in result.output and "--force" in result.output
    assert started == []


def test_a_new_or_empty_folder_is_taken(tmp_path, scenario, started):
    (tmp_path / "empty").mkdir()
    for out in (tmp_path / "empty", tmp_path / "new"):
        result = invoke("run", str(scenario), "--backend", "classic", "--out", str(out))
        assert result.exit_code == 0, result.output
    assert started == [tmp_path / "empty", tmp_path / "new"]


def test_force_deletes_an_earlier_run_then_runs(tmp_path, scenario, started):
    out = earlier_run(tmp_path / "herd-5")
    (RunFolder(out).broker_data / "t0-0").mkdir(parents=True)      # the topic a second run would trip on
    result = invoke("run", str(scenario), "--backend", "classic", "--out", str(out), "--force")
    assert result.exit_code == 0, result.output
    assert started == [out] and not out.exists()   # the (replaced) runner would make it afresh
    assert f"deleted {out}" in result.output


def test_force_replaces_a_compare_folder(tmp_path, scenario, started):
    out = tmp_path / "split"
    earlier_run(out / "legacy")
    earlier_run(out / "classic", status="failed")
    result = invoke("compare", str(scenario), "--out", str(out), "--force")
    assert result.exit_code == 0, result.output
    assert started == [out] and not out.exists()


def test_force_never_deletes_a_folder_without_a_run(tmp_path, scenario, started):
    out = tmp_path / "mine"
    (out / "sub").mkdir(parents=True)
    (out / "sub" / "thesis.tex").write_text("keep me")
    result = invoke("run", str(scenario), "--backend", "classic", "--out", str(out), "--force")
    assert result.exit_code == 2 and "holds no run" in result.output
    assert (out / "sub" / "thesis.tex").read_text() == "keep me" and started == []


def test_force_never_deletes_the_current_directory(tmp_path, scenario, started, monkeypatch):
    out = earlier_run(tmp_path / "herd-5")
    monkeypatch.chdir(RunFolder(out).events)
    result = invoke("run", str(scenario), "--backend", "classic", "--out", str(out), "--force")
    assert result.exit_code == 2 and "contains the current directory" in result.output
    assert RunFolder(out).lock.is_file() and started == []


def test_run_and_force_refuse_a_campaign_folder(tmp_path, scenario, started):
    out = tmp_path / "campaign"
    out.mkdir()
    CampaignFolder(out).manifest.write_text("{}")
    for force in ((), ("--force",)):
        result = invoke("run", str(scenario), "--backend", "classic", "--out", str(out), *force)
        assert result.exit_code == 2 and "is a campaign folder" in result.output
    assert CampaignFolder(out).manifest.is_file() and started == []


@pytest.fixture
def campaign_file(tmp_path, scenario) -> Path:
    path = tmp_path / "tiny-campaign.toml"
    path.write_text(CAMPAIGN)
    return path


@pytest.fixture
def no_campaign_runs(monkeypatch) -> list:
    """The campaign's executor records that it would have run, and runs nothing."""
    executions: list = []
    module = importlib.import_module("experiments.campaign.execute")
    monkeypatch.setattr(module._Executor, "execute", lambda self, parallel: executions.append(self.folder) or False)
    return executions


def test_a_campaign_refuses_a_folder_it_did_not_make(tmp_path, campaign_file, no_campaign_runs):
    out = earlier_run(tmp_path / "herd-5")
    result = invoke("campaign", str(campaign_file), "--out", str(out), "--no-summarize")
    assert result.exit_code == 2
    assert f"{out} exists and is not a campaign folder" in result.output and "--out" in result.output
    assert no_campaign_runs == [] and not CampaignFolder(out).manifest.exists()


def test_a_campaign_resumes_its_own_folder_and_refuses_another_campaigns(tmp_path, campaign_file, no_campaign_runs):
    out = tmp_path / "c"
    first = invoke("campaign", str(campaign_file), "--out", str(out), "--no-summarize")
    again = invoke("campaign", str(campaign_file), "--out", str(out), "--no-summarize")
    assert first.exit_code == 0 and again.exit_code == 0, first.output + again.output
    assert no_campaign_runs == [out, out]
    other = tmp_path / "other.toml"
    other.write_text(CAMPAIGN.replace("seed = 4", "seed = 5"))
    refused = invoke("campaign", str(other), "--out", str(out), "--no-summarize")
    assert refused.exit_code == 2 and "from a different campaign file" in refused.output
    assert no_campaign_runs == [out, out]


def test_the_counts_leave_out_what_an_earlier_run_wrote(tmp_path, scenario):
    events = RunFolder(tmp_path / "run").events
    events.mkdir(parents=True)
    earlier = {"type": ev.RECORDS_PRODUCED, "count": 600}
    (events / "producer.jsonl").write_text(json.dumps(earlier) + "\n")
    loaded = load(scenario)
    progress = Progress(events, loaded, resolve(loaded))
    with open(events / "producer.jsonl", "a") as handle:
        handle.write(json.dumps({"type": ev.RECORDS_PRODUCED, "count": 7}) + "\n")
    (events / "h000.jsonl").write_text(json.dumps({"type": ev.RECORDS_CONSUMED, "count": 5}) + "\n")
    progress.poll()
    assert (progress.produced, progress.consumed) == (7, 5)
