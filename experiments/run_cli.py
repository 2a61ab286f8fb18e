"""`rebalance-lab run | compare | scenarios`: scenario files on one backend, on both, and the built-in list."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from experiments import runner
from experiments.member_configs import check_member_settings
from experiments.scenario import Scenario, ScenarioError, find_file, load
from rebalance.backends import backend_names, profile

SCENARIO_DIR = Path(__file__).parent / "scenarios"
console = Console(highlight=False)


def register(app: typer.Typer) -> None:
    app.command("run")(run_command)
    app.command("compare")(compare_command)
    app.command("scenarios")(scenarios_command)


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def find_scenario(name: str) -> Path:
    """A path, or the name of a built-in scenario (with or without .toml)."""
    found = find_file(name, SCENARIO_DIR)
    if found is not None:
        return found
    _fail(f"no scenario file {name!r} (and no built-in scenario of that name; see `rebalance-lab scenarios`)")
    raise AssertionError  # unreachable


def _load(name: str, overrides: list[str] | None, backends: tuple[str, ...] | None = None) -> Scenario:
    try:
        scenario = load(find_scenario(name), overrides=overrides or [])
        for backend in backends or scenario.backends:
            if backend in scenario.backends:
                check_member_settings(scenario, profile(backend))
        return scenario
    except ScenarioError as error:
        _report(error)
        raise AssertionError from None  # unreachable


def _report(error: ScenarioError) -> None:
    for line in error.lines():
        typer.echo(f"error: {line}", err=True)
    raise typer.Exit(2)


SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a value before validation, e.g. --set group.members=50 (repeatable)."),
]
OutOption = Annotated[Path | None, typer.Option("--out", help="Run directory (default runs/<scenario>-<time>).")]
ProviderOption = Annotated[str, typer.Option("--zk-provider", help="ZooKeeper provider: auto, docker or local.")]
QuietOption = Annotated[bool, typer.Option("--no-progress", help="No live display.")]


def run_command(
    scenario: Annotated[str, typer.Argument(help="A scenario file, or the name of a built-in one.")],
    backend: Annotated[str, typer.Option(help=f"One of: {', '.join(backend_names())}.")],
    out: OutOption = None,
    overrides: SetOption = None,
    zk_provider: ProviderOption = "auto",
    no_progress: QuietOption = False,
) -> None:
    """Run a scenario on one backend; leaves RUN_DIR/events/ and RUN_DIR/lock.json."""
    if backend not in backend_names():
        _fail(f"--backend {backend!r}: choose one of {', '.join(backend_names())}")
    if zk_provider not in ("auto", "docker", "local"):
        _fail(f"--zk-provider {zk_provider!r}: choose auto, docker or local")
    loaded = _load(scenario, overrides, (backend,))
    if backend not in loaded.backends:
        _fail(f"scenario {loaded.name!r} is for {', '.join(loaded.backends)} only (its `backends` line)")
    run_dir = out or runner.default_run_dir(loaded)
    result = runner.run(loaded, runner.RunOptions(backend=backend, run_dir=run_dir, zk_provider=zk_provider,
                                                  progress=not no_progress))
    console.print(f"run directory: {result.run_dir}")
    if result.status != "completed":
        raise typer.Exit(130 if result.status == "interrupted" else 1)


def compare_command(
    scenario: Annotated[str, typer.Argument(help="A scenario file, or the name of a built-in one.")],
    out: OutOption = None,
    overrides: SetOption = None,
    zk_provider: ProviderOption = "auto",
    no_progress: QuietOption = False,
) -> None:
    """Run a scenario on each of its backends with the identical schedule: RUN_DIR/<backend> for each."""
    if zk_provider not in ("auto", "docker", "local"):
        _fail(f"--zk-provider {zk_provider!r}: choose auto, docker or local")
    loaded = _load(scenario, overrides)
    run_dir = out or runner.default_run_dir(loaded)
    results = runner.compare(loaded, run_dir, zk_provider=zk_provider, progress=not no_progress)
    for result in results:
        console.print(f"{result.run_dir.name}: {result.status}{' (' + result.reason + ')' if result.reason else ''}")
    console.print(f"run directory: {run_dir}")
    if any(result.status == "interrupted" for result in results):
        raise typer.Exit(130)
    if any(result.status != "completed" for result in results):
        raise typer.Exit(1)


def scenarios_command() -> None:
    """List the built-in scenario files."""
    table = Table("name", "backends", "members", "duration", "description")
    for path in sorted(SCENARIO_DIR.glob("*.toml")):
        try:
            scenario = load(path)
        except ScenarioError as error:
            table.add_row(path.stem, "-", "-", "-", f"[red]invalid: {error.problems[0].message}[/red]")
            continue
        table.add_row(path.stem, ", ".join(scenario.backends), str(scenario.group.members),
                      f"{scenario.duration:.0f} s", scenario.description)
    console.print(table)
