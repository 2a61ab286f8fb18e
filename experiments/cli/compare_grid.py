"""`compare SCENARIO --backends ... --strategies ... --repeat N`: the grid run as a campaign (a progress bar with
the time left), summarised, and answered with one per-phase table (experiments.report.compare_table)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import typer
from rich.console import Console

from experiments.folders.campaign_folder import CampaignFolder
from experiments.scenario import Scenario, ScenarioError
from rebalance.backends import backend_names, canonical_name
from rebalance.command_line import command

console = Console(highlight=False)
PROGRESS_LINE = re.compile(r"^\\[(\\d+)/(\\d+)\\]")


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def _names(option: str, value: str | None, default: list[str]) -> list[str]:
    names = [name.strip() for name in (value or "").split(",") if name.strip()]
    if value is not None and not names:
        _fail(f"{option} {value!r}: name at least one, comma-separated")
    return names or default


def compare_grid(name: str, path: Path, scenario: Scenario, overrides: list[str], *, backends: str | None,
                 strategies: str | None, repeat: int, out: Path | None, zk_provider: str, progress: bool,
                 force: bool, master: str) -> None:
    from experiments.campaign import CampaignMismatch, execute
    from experiments.campaign.grid import grid_campaign
    from experiments.cli.campaign import _hold_against_capacity, summarize_campaign

    if repeat < 1:
        _fail(f"--repeat {repeat}: at least 1")
    chosen = _names("--backends", backends, list(scenario.backends))
    unknown = [backend for backend in chosen if canonical_name(backend) not in backend_names()]
    if unknown:
        _fail(f"--backends: unknown {', '.join(unknown)}; choose from {', '.join(backend_names())}")
    missing = [backend for backend in chosen if canonical_name(backend) not in scenario.backends]
    if missing:
        _fail(f"--backends: scenario {name!r} does not run on {', '.join(missing)} "
              f"(its backends: {', '.join(scenario.backends)})")
    try:
        grid = grid_campaign(scenario, path, backends=chosen, strategies=_names("--strategies", strategies,
                             [scenario.group.strategy]), repeat=repeat, overrides=overrides)
    except ScenarioError as error:
        _fail("; ".join(error.lines()))
    for note in grid.left_out:
        typer.echo(f"left out: {note}", err=True)
    if not grid.campaign.cells:
        _fail("no cell of the grid can run: no backend has any of the strategies")
    _hold_against_capacity(grid.campaign, force=force)
    root = out or Path("runs") / f"compare-{scenario.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if root.exists() and any(root.iterdir()) and not CampaignFolder(root).is_campaign():
        _fail(f"--out {root} is neither empty nor a grid's folder to resume")
    runs = len(grid.campaign.plan())
    console.print(f"compare {scenario.name}: {len(grid.campaign.cells)} cells x {repeat} runs = {runs} runs into "
                  f"{root}", soft_wrap=True)
    try:
        with _ProgressBar(runs, _first_estimate(scenario, runs), live=progress) as bar:
            outcome = execute(grid.campaign, root, zk_provider=zk_provider, say=bar.say)
    except CampaignMismatch as error:
        _fail(str(error))
    if outcome.interrupted:
        console.print(f"interrupted; the same command with --out {root} resumes it", soft_wrap=True)
        raise typer.Exit(130)
    console.print("summary: one Spark pass over every run, then the statistics ...", soft_wrap=True)
    summarize_campaign(root, master)
    _answer(root, scenario, grid.left_out)


def _answer(root: Path, scenario: Scenario, left_out: tuple[str, ...]) -> None:
    import pandas as pd

    from experiments.report.compare_table import grid_markdown, phase_table
    from experiments.summary import markdown_table

    folder = CampaignFolder(root)
    cells = pd.read_parquet(folder.statistics_table("cells"))
    runs = pd.read_parquet(folder.statistics_table("runs"))
    table = phase_table(cells[cells["sweep"] == "-"], runs[runs["sweep"] == "-"], scenario.reference)
    notes = [f"left out: {note}" for note in left_out]
    folder.grid_table.write_text(grid_markdown(f"{scenario.name}: compare grid", table, scenario.reference, notes),
                                 encoding="utf-8")
    console.print(markdown_table(table), soft_wrap=True, markup=False)
    if scenario.reference is not None:
        console.print(f"reference: {scenario.reference.source}; its total counts its own phases only, the "
                      "whole timeline's also the steady ones", soft_wrap=True, markup=False)
    for note in notes:
        console.print(note, soft_wrap=True, markup=False)
    console.print(f"table: {folder.grid_table}; report: {folder.report.html}", soft_wrap=True)
    console.print(f"next: {command(f'results {root}')}", soft_wrap=True)


def _first_estimate(scenario: Scenario, runs: int) -> float:
    """Seconds for the whole grid before any run has ended: the scenario's expected wall time, `runs` times."""
    from experiments.run import wall_time
    from experiments.run.capacity import peak_members
    from experiments.scenario import resolve

    one = wall_time.expected(scenario.name, scenario.duration, peak_members(resolve(scenario)),
                             wall_time.recorded_seconds())
    return one.seconds * runs


class _ProgressBar:
    """The executor's lines (`[k/n] run completed; ...`) as a bar with the runs done and the time left: the
    scenario's expected wall time until a run has ended, then the runs' own average."""

    def __init__(self, runs: int, estimate_s: float, *, live: bool) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.runs, self.estimate_s, self.started = runs, estimate_s, time.monotonic()
        self.progress = Progress(TextColumn("runs"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 TextColumn("{task.description}"), console=Console(stderr=True),
                                 disable=not live)
        self.task = self.progress.add_task(self._left(0), total=runs)

    def __enter__(self) -> _ProgressBar:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)

    def say(self, line: str) -> None:
        self.progress.console.print(f"  {line}", soft_wrap=True, markup=False, highlight=False)
        found = PROGRESS_LINE.match(line)
        if found:
            done = int(found.group(1))
            self.progress.update(self.task, completed=done, description=self._left(done))

    def _left(self, done: int) -> str:
        if done == 0:
            return f"about {_minutes(self.estimate_s)} left (estimate)"
        per_run = (time.monotonic() - self.started) / done
        return f"about {_minutes(per_run * (self.runs - done))} left"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"
