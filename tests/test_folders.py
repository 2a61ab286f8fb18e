"""The run folder and the campaign folder each answer, in one place, where a file lives and what state the
folder is in (experiments/run/folder.py, experiments/campaign/folder.py)."""

from __future__ import annotations

import json

from experiments.folders.campaign_folder import CampaignFolder
from experiments.folders.run_folder import RunFolder, runs_below


def test_a_run_is_summarised_once_the_summary_record_is_written_after_its_tables(tmp_path):
    run = RunFolder(tmp_path / "run")
    run.events.mkdir(parents=True)
    assert run.is_run() and not run.is_summarised()
    run.summary.mkdir()
    run.summary_table("verdicts").write_bytes(b"")
    assert not run.is_summarised()               # interrupted before the record: summarise again
    run.summary_record.write_text("{}")
    assert run.is_summarised()


def test_the_lock_says_whether_a_run_completed_and_why_it_failed(tmp_path):
    run = RunFolder(tmp_path)
    assert run.status() is None and not run.is_completed() and run.reason() == ""
    run.lock.write_text(json.dumps({"status": "failed", "reason": "broker 1 did not start", "name": "herd",
                                    "backend": "modern"}))
    assert run.status() == "failed" and run.reason() == "broker 1 did not start"
    assert run.described() == "a failed run of herd on classic"     # the alias read as the backend's name
    run.lock.write_text("{not json")
    assert run.status() is None and "unreadable" in run.described()


def test_runs_below_finds_runs_at_any_depth_but_not_inside_a_run(tmp_path):
    for name in ("compare/classic", "compare/legacy", "deep/a/b/run"):
        RunFolder(tmp_path / name).events.mkdir(parents=True)
    (tmp_path / "compare/classic/summary/nested/events").mkdir(parents=True)   # inside a run: not a run
    found = [run.path.relative_to(tmp_path).as_posix() for run in runs_below(tmp_path)]
    assert found == ["compare/classic", "compare/legacy", "deep/a/b/run"]


def test_a_campaign_folder_is_summarised_once_its_runs_table_is_written(tmp_path):
    campaign = CampaignFolder(tmp_path)
    assert not campaign.is_campaign() and not campaign.is_summarised()
    campaign.manifest.write_text("{}")
    assert campaign.is_campaign()
    assert campaign.run("c-r0").path == tmp_path / "runs" / "c-r0"
    campaign.statistics.mkdir()
    campaign.statistics_table("runs").write_bytes(b"")
    assert campaign.is_summarised()
