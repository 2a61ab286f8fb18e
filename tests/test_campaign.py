"""Campaigns: the matrix file, the statistics, and a real campaign that survives a SIGKILL and a resume.

- the loader reports every problem with its line, and validates every cell's scenario before anything runs;
- the plan interleaves cells and gives every backend of one repetition the same seed;
- the order-statistic interval of the median has its textbook coverage; a comparison needs 5 runs a side and an
  exact test, and a declared claim gets one verdict;
- end to end (real ZooKeeper, brokers, members): one scenario x 2 backends x 2 repetitions; the campaign is
  SIGKILLed after its first run, nothing of that run is left running, a resume skips the completed run and
  finishes the rest, and the statistics carry n, median and spread per cell.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from experiments.campaign import Manifest, builtin_names, find_campaign, load_campaign
from experiments.cli.app import app
from experiments.faults.process import processes_with_marker
from experiments.folders.campaign_folder import CampaignFolder
from experiments.folders.run_folder import RunFolder
from experiments.scenario import ScenarioError
from experiments.statistics.campaign_stats import comparisons, median_interval, write_statistics
from tests.fixtures.scenarios import tiny_join
from tests.fixtures.spark import layout_summarised_with_the_suite

SCENARIO = tiny_join("tiny-join")

CAMPAIGN = """\
name = "tiny"
repetitions = 2
seed = 40

[[matrix]]
scenario = "tiny-join.toml"
backends = ["legacy", "classic"]
"""


CLAIM = """
[[claims]]
says = "legacy duplicates more than classic"
scenario = "tiny-join"
metric = "duplicates"
higher = ["legacy"]
lower = ["classic"]
"""


def write_campaign(folder: Path, text: str = CAMPAIGN) -> Path:
    (folder / "tiny-join.toml").write_text(SCENARIO)
    path = folder / "tiny.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", builtin_names())
def test_every_built_in_campaign_plans_and_its_claims_name_its_own_cells(name):
    campaign = load_campaign(find_campaign(name))     # the loader checks every claim's cells and metric
    plan = campaign.plan()
    assert plan, name
    if campaign.claims:                              # a claim is tested only at 5 runs a side or more
        assert all(cell.repetitions >= 5 for cell in campaign.cells), name


def test_the_plan_interleaves_cells_and_shares_seeds_across_backends(tmp_path):
    campaign = load_campaign(write_campaign(tmp_path, CAMPAIGN.replace("repetitions = 2", "repetitions = 3")))
    plan = campaign.plan()
    assert [(run.cell.backend, run.repetition) for run in plan] == [
        ("legacy", 0), ("classic", 0), ("legacy", 1), ("classic", 1), ("legacy", 2), ("classic", 2)]
    assert [run.seed for run in plan] == [40, 40, 41, 41, 42, 42]
    scenario = campaign.scenario_of(plan[2])
    assert scenario.seed == 41 and list(scenario.backends) == ["legacy"]


def test_the_block_repetitions_and_the_default_of_five(tmp_path):
    text = CAMPAIGN.replace("repetitions = 2\n", "").replace('backends = ["legacy", "classic"]', 'backends = ["legacy"]')
    text += '\n[[matrix]]\nscenario = "tiny-join.toml"\nbackends = ["classic"]\nrepetitions = 7\n'
    campaign = load_campaign(write_campaign(tmp_path, text))
    counts = {cell.backend: cell.repetitions for cell in campaign.cells}
    assert counts == {"legacy": 5, "classic": 7} and len(campaign.plan()) == 12
    assert [run.cell.backend for run in campaign.plan()][-2:] == ["classic", "classic"]   # interleaved, then the rest


def test_a_folder_of_runs_from_another_commit_is_refused_unless_mixing_is_allowed(tmp_path):
    from experiments.campaign.execute import CampaignMismatch, open_folder
    from experiments.campaign.manifest import COMPLETED

    campaign = load_campaign(write_campaign(tmp_path))
    folder = tmp_path / "out"
    manifest = open_folder(campaign, folder)
    first = manifest.runs[next(iter(manifest.runs))]
    first.status, first.git_commit = COMPLETED, "0123456789abcdef0123"
    manifest.write(folder)
    CampaignFolder(folder).run(first.run).path.mkdir(parents=True)
    CampaignFolder(folder).run(first.run).lock.write_text('{"status": "completed"}')
    with pytest.raises(CampaignMismatch, match="--allow-mixed-commits"):
        open_folder(campaign, folder)
    assert open_folder(campaign, folder, allow_mixed_commits=True).runs[first.run].status == COMPLETED


def test_commits_hold_the_same_code_when_they_differ_only_in_what_no_run_executes(tmp_path):
    from experiments.run.provenance import same_code

    def commit(path: str, text: str) -> str:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
        for argv in (["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", path]):
            subprocess.run(["git", *argv], cwd=tmp_path, check=True)
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, text=True, capture_output=True).stdout.strip()

    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    code = commit("legacy_zk/member.py", "x = 1\n")
    data = commit("docs/results-data/seed002/runs.csv", "run\n")
    tested = commit("tests/test_member.py", "assert True\n")
    readme = commit("README.md", "figures\n")
    changed = commit("legacy_zk/member.py", "x = 2\n")
    assert same_code(code, data, tmp_path) and same_code(data, code, tmp_path)
    assert same_code(code, readme, tmp_path) and same_code(tested, code, tmp_path)
    assert not same_code(readme, changed, tmp_path)
    assert not same_code(data, changed, tmp_path)
    assert not same_code(code, "0" * 40, tmp_path)


def test_runs_a_data_folder_holds_are_left_out_and_a_folder_that_is_not_one_is_refused(tmp_path):
    from experiments.campaign.execute import execute

    campaign = load_campaign(write_campaign(tmp_path))
    said: list[str] = []
    recorded = frozenset(planned.name for planned in campaign.plan())
    outcome = execute(campaign, tmp_path / "out", say=said.append, recorded=recorded)
    assert not outcome.interrupted and outcome.counts == {"pending": len(recorded)}
    assert f"{len(recorded)} recorded in the data folder" in said[0]

    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("")
    result = CliRunner().invoke(app, ["campaign", str(write_campaign(tmp_path)), "--out", str(tmp_path / "o2"),
                                      "--data", str(tmp_path / "junk")])
    assert result.exit_code == 2 and "not a results-data folder" in result.output
    assert not (tmp_path / "o2").exists()


def test_a_folder_gains_the_runs_its_campaign_plans_since(tmp_path):
    """A scenario without a backends list runs on every registered backend, so a backend registered after
    a campaign folder was made adds cells to the same file's plan: resuming adds them as pending runs and
    keeps the runs already recorded."""
    from experiments.campaign.execute import open_folder
    from experiments.campaign.manifest import COMPLETED, PENDING

    campaign = load_campaign(write_campaign(tmp_path))
    folder = tmp_path / "out"
    manifest = open_folder(campaign, folder)
    first, *later = list(manifest.runs)
    for name in later:                      # as if these cells did not exist when the folder was made
        del manifest.runs[name]
    manifest.runs[first].status = COMPLETED
    manifest.write(folder)
    CampaignFolder(folder).run(first).path.mkdir(parents=True)
    CampaignFolder(folder).run(first).lock.write_text(json.dumps({"status": "completed"}))

    reopened = open_folder(campaign, folder)
    assert list(reopened.runs) == [first, *later]
    assert reopened.runs[first].status == COMPLETED
    assert all(reopened.runs[name].status == PENDING for name in later)


def test_every_problem_of_a_campaign_is_reported_with_its_line(tmp_path):
    path = write_campaign(tmp_path, """\
name = "x"
repetitions = 0
colour = "red"

[[matrix]]
scenario = "tiny-join.toml"
backends = ["legacy"]
strategies = ["cooperative-sticky"]

[[matrix]]
scenario = "missing.toml"
""")
    with pytest.raises(ScenarioError) as caught:
        load_campaign(path)
    text = "\n".join(caught.value.lines())
    assert ":2: repetitions: must be a whole number >= 1" in text
    assert ":3: colour: unknown key" in text
    assert ":5: matrix.0: cell tiny-join-legacy-cooperative-sticky" in text and "legacy backend knows only" in text
    assert ":11: matrix.1.scenario: no scenario 'missing.toml'" in text


@pytest.mark.parametrize(("n", "k_low", "coverage"), [(3, 1, 0.75), (5, 1, 0.9375), (6, 1, 0.96875),
                                                      (10, 2, 0.978515625), (20, 6, 0.958610534)])
def test_the_median_interval_is_the_order_statistic_interval(n, k_low, coverage):
    values = np.arange(1, n + 1, dtype=float)[::-1]     # order must not matter
    low, high, got = median_interval(values)
    assert (low, high) == (k_low, n + 1 - k_low)
    assert got == pytest.approx(coverage, abs=1e-6)


def test_a_herd_metric_counts_only_the_changes_of_the_scenario_timeline(tmp_path):
    """The warm-up's first joins (a host's members at once) and the teardown's leaves are not the change a
    herd experiment measures: only the changes between the end of the warm-up and the teardown count."""
    from experiments.statistics.campaign_stats import metrics_of

    run = RunFolder(tmp_path)
    run.summary.mkdir()
    pd.DataFrame({"phase": ["setup", "warmup", "timeline", "stable", "join-1", "teardown"],
                  "start_s": [0.0, 2.0, 8.0, 8.0, 18.0, 78.0], "end_s": [2.0, 8.0, 8.0, 18.0, 78.0, 79.0],
                  "records_lost": 0, "max_latency_ms": 1.0, "rebalance_ms": 0.0, "double_ownership_s": 0.0,
                  }).to_parquet(run.summary_table("phases"))
    changes = [(3.0, "join", 0, 400), (5.0, "join", 4, 90),     # warm-up: the first host, then a second
               (19.0, "join", 5, 20), (43.0, "leave", 6, 10),   # the scenario's join and leave
               (78.5, "leave", 5, 5)]                           # teardown
    pd.DataFrame([{"t": t, "kind": kind, "live_before": before, "requests": requests, "notifications": 0,
                   "stable_s": 1.0, "stop_the_world_s": 0.0, "unowned_partition_s": 0.0}
                  for t, kind, before, requests in changes]).to_parquet(run.summary_table("herd"))
    metrics = dict(metrics_of(RunFolder(tmp_path)))
    assert metrics["join: requests per change"] == 20
    assert metrics["leave: requests per change"] == 10


def test_a_difference_needs_five_runs_a_side_and_the_exact_test():
    def rows(backend, values):
        return [{"scenario": "s", "backend": backend, "strategy": "range", "sweep": "-", "n": 4,
                 "metric": "m", "value": v} for v in values]

    few = comparisons(pd.DataFrame(rows("legacy", [100, 104, 98]) + rows("classic", [10, 12, 11])))
    assert not few["difference"].any() and few["reading"].iloc[0] == "too few runs (n = 3/3; needs 5)"
    same = comparisons(pd.DataFrame(rows("legacy", [10, 11, 12, 10, 13]) + rows("classic", [11, 10, 12, 13, 10])))
    assert not same["difference"].any() and same["reading"].iloc[0].startswith("no difference shown at n = 5/5")
    apart = comparisons(pd.DataFrame(rows("legacy", [100, 104, 98, 101, 99]) + rows("classic", [10, 12, 11, 9, 10])))
    row = apart.iloc[0]
    assert row["difference"] and row["shift"] == -90.0 and row["p"] == pytest.approx(2 / 252)
    # the difference of the medians, within each cell's [min, max] at 5/5: covered at least (15/16)^2 of the time
    assert (row["ci_low"], row["ci_high"]) == (-95.0, -86.0) and row["coverage"] == pytest.approx((15 / 16) ** 2)
    fixed = comparisons(pd.DataFrame(rows("legacy", [7] * 5) + rows("classic", [7] * 5)))
    assert fixed["reading"].iloc[0] == "no difference shown at n = 5/5 (p = 1 two-sided); identical in all 5/5 runs"
    assert fixed["p"].iloc[0] == 1.0


def test_cells_that_differ_in_backend_and_strategy_are_compared_too():
    def rows(backend, strategy, values):
        return [{"scenario": "churn", "backend": backend, "strategy": strategy, "sweep": "-", "n": 4,
                 "metric": "records lost", "value": v} for v in values]

    compared = comparisons(pd.DataFrame(rows("legacy", "range", [900, 950, 1000, 1100, 990])
                                        + rows("classic", "range", [400, 420, 380, 500, 450])
                                        + rows("classic", "sticky", [10, 0, 5, 30, 3])))
    assert sorted(compared["compares"]) == ["backend", "both", "strategy"]
    both = compared[compared["compares"] == "both"].iloc[0]
    assert (both["a"], both["b"]) == ("legacy/range", "classic/sticky") and both["difference"]


def _manifest_statuses(folder: Path) -> dict[str, str]:
    try:
        return {name: entry.status for name, entry in Manifest.read(folder).runs.items()}
    except (OSError, ValueError, KeyError):
        return {}


@pytest.mark.zk
@pytest.mark.broker
@pytest.mark.slow
@pytest.mark.timeout(900)   # three real runs; each waits on the event it needs, the budget only guards a hang
def test_a_campaign_survives_a_sigkill_and_resumes(tmp_path):
    path = write_campaign(tmp_path, CAMPAIGN.replace("repetitions = 2", "repetitions = 1"))   # two runs
    folder = (tmp_path / "out").resolve()
    command = [sys.executable, "-m", "experiments.cli.app", "campaign", str(path), "--out", str(folder), "--no-summarize"]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 480
    while list(_manifest_statuses(folder).values()).count("completed") < 1:
        if first.poll() is not None or time.monotonic() > deadline:
            first.kill()
            raise AssertionError(f"no run completed: {first.stdout.read().decode()}")
        time.sleep(0.2)
    while "running" not in _manifest_statuses(folder).values():   # the second run has started
        assert time.monotonic() < deadline, "the second run never started"
        time.sleep(0.1)
    running = next(name for name, status in _manifest_statuses(folder).items() if status == "running")
    while not CampaignFolder(folder).run(running).lock.is_file():    # ... and has written its record
        assert time.monotonic() < deadline, "the second run never wrote its lock.json"
        time.sleep(0.1)
    first.kill()
    first.communicate(timeout=30)

    statuses = _manifest_statuses(folder)
    assert sorted(statuses.values()) == ["completed", "running"]
    killed = next(name for name, status in statuses.items() if status == "running")
    done = next(name for name, status in statuses.items() if status == "completed")
    started_before = Manifest.read(folder).runs[done].started_ms
    deadline = time.monotonic() + 60
    while processes_with_marker(str(CampaignFolder(folder).run(killed).path)):
        assert time.monotonic() < deadline, "a process of the killed run survived the campaign"
        time.sleep(0.5)

    resumed = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "1 already completed" in resumed.stderr
    manifest = Manifest.read(folder)
    assert {entry.status for entry in manifest.runs.values()} == {"completed"}
    assert manifest.runs[done].started_ms == started_before, "a completed run was not run again"
    assert list(CampaignFolder(folder).incomplete.iterdir())[0].name.startswith(killed), "the killed run's events are kept"
    assert manifest.machine["cores"] == os.cpu_count() and manifest.machine["versions"]["kazoo"]
    assert {entry.seed for entry in manifest.runs.values()} == {40}
    for entry in manifest.runs.values():
        lock = json.loads(CampaignFolder(folder).run(entry.run).lock.read_text())
        assert lock["seed"] == entry.seed and lock["backend"] == entry.backend



@pytest.mark.spark
def _claimed_campaign(root: Path) -> list[Path]:
    """A campaign folder (in `root`/out) whose runs are synthetic logs, legacy's with duplicates planted: its run
    folders, for the suite's Spark pass."""
    from experiments.campaign.execute import open_folder
    from experiments.campaign.manifest import COMPLETED
    from experiments.synthetic.anomalies import Anomaly
    from experiments.synthetic.simulation import SyntheticRun, write_run

    root.mkdir(parents=True)
    campaign = load_campaign(write_campaign(root, CAMPAIGN.replace("repetitions = 2", "repetitions = 5") + CLAIM))
    folder = root / "out"
    manifest = open_folder(campaign, folder)
    for planned in campaign.plan():
        anomalies = frozenset({Anomaly.DUPLICATE}) if planned.cell.backend == "legacy" else frozenset()
        write_run(CampaignFolder(folder).run(planned.name).path, SyntheticRun(name=planned.name, backend=planned.cell.backend,
                                                             seed=planned.seed, anomalies=anomalies))
        manifest.runs[planned.name].status = COMPLETED
    manifest.runs[campaign.plan()[0].name].git_commit = "0123456789abcdef"   # as if made after a resume
    manifest.write(folder)
    return [CampaignFolder(folder).run(name).path for name in manifest.runs]


layout_summarised_with_the_suite("claimed-campaign", _claimed_campaign)


def test_statistics_and_report_of_a_campaign_folder(tmp_path, synthetic_runs):
    """A campaign folder whose runs are synthetic logs (legacy with duplicates planted), summarised and
    reduced to statistics: per cell n, median, spread; backends compared; report and results page written."""
    from experiments.report.campaign_report import write_campaign_report
    from experiments.report.results_doc import results_markdown

    folder = synthetic_runs["claimed-campaign"].root / "out"
    write_statistics(folder)

    cells = pd.read_parquet(CampaignFolder(folder).statistics_table("cells"))
    duplicates = cells[cells["metric"] == "duplicates"].set_index("backend")
    assert duplicates.loc["legacy", "runs"] == 5 and duplicates.loc["classic", "runs"] == 5
    assert duplicates.loc["classic", "max"] == 0 and duplicates.loc["legacy", "min"] > 0
    assert duplicates.loc["legacy", "coverage"] == pytest.approx(0.9375)
    compared = pd.read_parquet(CampaignFolder(folder).statistics_table("comparisons"))
    row = compared[(compared["metric"] == "duplicates") & (compared["compares"] == "backend")].iloc[0]
    assert row["a"] == "legacy" and row["shift"] < 0
    assert row["status"] == "tested" and row["p"] == pytest.approx(2 / 252)   # complete separation, the floor
    claims = pd.read_parquet(CampaignFolder(folder).statistics_table("claims"))
    # complete separation at 5/5: the claims' test gives 1 - (31/32)^2 = 0.062, above 0.05
    assert list(claims["verdict"]) == ["not supported"] and claims["n"].iloc[0] == "5/5"
    statistics = CampaignFolder(folder).statistics_markdown.read_text()
    assert "Claims declared before the runs" in statistics and "94% interval of the median, n = 5" in statistics
    report = write_campaign_report(folder)
    assert report.html.is_file() and any(image.name == "duplicates.png" for image in report.images)
    page = results_markdown([folder])
    assert "n = 5" in page and "Which differences hold up" in page
    assert page.index("legacy duplicates more than classic") < page.index("Which differences hold up")
    assert "1 runs from commit `0123456789ab`" in page

    # A second campaign folder is pooled run by run: the same cells now have six runs, both campaigns named.
    other = tmp_path / "other"
    shutil.copytree(folder, other)
    copied = json.loads(CampaignFolder(other).manifest.read_text())
    copied["campaign"]["name"] = "more"
    CampaignFolder(other).manifest.write_text(json.dumps(copied))
    pooled = results_markdown([folder, other])
    assert "n = 10" in pooled and "n = 5," not in pooled
    assert "campaign `more`" in pooled and "./lab results docs/results-data/" in pooled
    assert "./lab campaign more --out runs/more --data docs/results-data/more\n" in pooled
    notes = tmp_path / "readings.md"
    notes.write_text("## Reading the tables\n\nThe legacy duplicates held up.\n")
    annotated = results_markdown([folder], notes)
    assert "The legacy duplicates held up." in annotated and f"--notes {notes}" in annotated


def test_the_coordinator_gap_is_a_campaign_metric_when_the_run_has_one(tmp_path):
    """A run's coordinator_gaps table gives the group's maximum and the lookups made meanwhile."""
    from experiments.statistics.campaign_stats import COORDINATOR_GAP, GAP_LOOKUPS, metrics_of

    run = RunFolder(tmp_path)
    run.summary.mkdir()
    assert COORDINATOR_GAP not in dict(metrics_of(RunFolder(tmp_path)))
    pd.DataFrame({"fault_id": ["f1"] * 3, "kind": "coordinator_kill", "link": None, "member": ["a", "b", "c"],
                  "fault_t": 10.0, "answered_t": [21.5, 22.0, None], "gap_s": [11.5, 12.0, None],
                  "first_answer": "Heartbeat", "find_coordinator_requests": [9, 11, 30]}).to_parquet(
        run.summary_table("coordinator_gaps"))
    metrics = dict(metrics_of(RunFolder(tmp_path)))
    assert metrics[COORDINATOR_GAP] == 12.0 and metrics[GAP_LOOKUPS] == 50


def test_a_run_whose_conditions_are_invalid_is_kept_aside_and_made_again(tmp_path, monkeypatch):
    """The run conditions of every attempt are planted (the run itself is real): invalid, then invalid again
    once the one replacement allowed here is used up; the run is then recorded invalid, both attempts kept."""
    import importlib

    from experiments.campaign.manifest import INVALID

    executing = importlib.import_module("experiments.campaign.execute")   # the module, not its function

    monkeypatch.setattr(executing, "MAX_REPLACEMENTS", 1)
    monkeypatch.setattr(executing, "_conditions", lambda target: ("invalid", "a task waited for a CPU 97% of the time"))
    campaign = load_campaign(write_campaign(tmp_path, CAMPAIGN.replace("repetitions = 2", "repetitions = 1")
                                            .replace('["legacy", "classic"]', '["classic"]')))
    said: list[str] = []
    outcome = executing.execute(campaign, tmp_path / "out", say=said.append)
    (entry,) = outcome.manifest.runs.values()
    assert entry.status == INVALID and entry.conditions == "invalid"
    assert [item["reason"] for item in entry.replaced] == ["a task waited for a CPU 97% of the time"]
    assert RunFolder(tmp_path / "out" / entry.replaced[0]["folder"]).events.is_dir(), "the replaced attempt is kept"
    assert CampaignFolder(tmp_path / "out").run(entry.run).is_completed(), "the last attempt is kept too"
    assert "1 invalid, 1 replaced" in said[-1]
    from experiments.campaign import completed_run_dirs
    assert completed_run_dirs(tmp_path / "out") == [], "an invalid run is left out of the statistics"
