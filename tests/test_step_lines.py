"""`summarize` shows its steps as they happen: numbered, each on its own line with what it does, and how long
the one before took, so a minute inside one Spark job does not look like a hang."""

import inspect
import io
import re

from rich.console import Console

from experiments.cli.step_lines import SUMMARY_STEPS, StepLines
from experiments.summary import pipeline


def test_the_steps_named_are_the_pipelines_own_in_its_order():
    named = re.findall(r'step\("([^"]+)"\)', inspect.getsource(pipeline))
    order = {name: index for index, name in enumerate(SUMMARY_STEPS)}
    assert set(named) == set(SUMMARY_STEPS)
    assert sorted(named, key=order.get) == [name for name in SUMMARY_STEPS if name in named]


def test_each_step_gets_a_numbered_line_and_the_one_before_its_time():
    out = io.StringIO()
    with StepLines("summarising 1 run", console=Console(file=out, width=200)) as step:
        for name in SUMMARY_STEPS:
            step(name)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("summarising 1 run [1/6] starting Spark: a JVM")
    assert any(line.startswith("summarising 1 run [5/6] checks and aggregates: Spark runs every check") for line in lines)
    assert re.fullmatch(r"  checks and aggregates: \d+\.\d s", lines[lines.index(next(
        line for line in lines if "[6/6] writing" in line)) - 1])
    assert re.fullmatch(r"summarising 1 run: done in \d+ s", lines[-1])


def test_nothing_to_do_prints_nothing():
    out = io.StringIO()
    with StepLines("summarising 1 run", console=Console(file=out)):
        pass
    assert out.getvalue().strip() == ""


def test_a_steps_progress_shows_beside_the_spinner_and_prints_no_line():
    out = io.StringIO()
    with StepLines("summarising 1 run", console=Console(file=out, width=200)) as step:
        step("checks and aggregates")
        step.count(12, 37)   # as the summary's Batch calls it
        assert step.progress.tasks[0].description == "summarising 1 run [5/6] checks and aggregates: 12 of 37 queries"
    assert "12 of 37" not in out.getvalue()


def test_the_stages_after_the_summary_are_steps_of_their_own(monkeypatch, tmp_path):
    """The demo's last wait is the report's charts: a step of its own, not time added to the summary's writing.
    A campaign's statistics come before its report."""
    from experiments import campaign
    from experiments.report import campaign_report, run_report
    from experiments.stages import Stages
    from experiments.statistics import campaign_stats

    steps: list[str] = []
    monkeypatch.setattr(run_report, "write_report", lambda run_dirs, out: steps.append("runs' report written"))
    monkeypatch.setattr(campaign, "completed_run_dirs", lambda folder: [])
    monkeypatch.setattr(campaign_stats, "write_statistics", lambda folder: steps.append("statistics written"))
    monkeypatch.setattr(campaign_report, "write_campaign_report", lambda folder: steps.append("report written"))

    Stages(step=steps.append).runs_report([], tmp_path)   # every run already summarised: no summary step
    assert steps == ["report", "runs' report written"]
    steps.clear()
    Stages(step=steps.append).campaign_report(tmp_path)
    assert steps == ["statistics", "statistics written", "report", "report written"]
