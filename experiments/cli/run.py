"""`rebalance-lab run | compare | scenarios`: scenario files on one backend, on each of theirs, and the built-in list."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from experiments.run import comparison, runner
from experiments.run.member_configs import check_member_settings
from experiments.scenario import Scenario, ScenarioError, find_file, load
from rebalance.backends import backend_names, canonical_name, profile
from rebalance.command_line import command

SCENARIO_DIR = Path(__file__).resolve().parent.parent / "scenarios"
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
    import difflib

    names = sorted(path.stem for path in SCENARIO_DIR.glob("*.toml"))
    close = difflib.get_close_matches(Path(name).stem, names, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    _fail(f"no scenario file {name!r} (and no built-in scenario of that name; {hint}see `{command('scenarios')}`)")
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


def _listed_backends(name: str, overrides: list[str]) -> list[str] | None:
    """The backends a scenario file (or a `--set backends=...`) lists, by their own names; None when it lists
    none (every backend) or cannot be read (loading it then says what is wrong)."""
    for override in reversed(overrides):
        key, _, value = override.partition("=")
        if key.strip() == "backends":
            try:
                listed = tomllib.loads(f"v = {value}")["v"]
            except tomllib.TOMLDecodeError:
                return None
            break
    else:
        try:
            listed = tomllib.loads(find_scenario(name).read_text(encoding="utf-8")).get("backends")
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, ScenarioError):
            return None
    if not isinstance(listed, list) or not all(isinstance(item, str) for item in listed):
        return None
    return [canonical_name(item) for item in listed]


def backend_of(scenario: str, backend: str, overrides: list[str] | None) -> str:
    """`--backend` by its own name (the run, its events and its folder carry it), refused by name when unknown
    or when the scenario lists other backends only."""
    if canonical_name(backend) not in backend_names():
        _fail(f"--backend {backend!r}: choose one of {', '.join(backend_names())}")
    backend = canonical_name(backend)
    listed = _listed_backends(scenario, overrides or [])
    if listed is not None and backend not in listed:
        _fail(f"scenario {scenario!r} is for {', '.join(listed)} only (its `backends` line)")
    return backend


def _report(error: ScenarioError) -> None:
    for line in error.lines():
        typer.echo(f"error: {line}", err=True)
    raise typer.Exit(2)


ScenarioArgument = Annotated[str, typer.Argument(help="A scenario file, or the name of a built-in one.")]
SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a value before validation, e.g. --set group.members=50 (repeatable)."),
]
OutOption = Annotated[Path | None, typer.Option("--out", help="Run directory (default runs/<scenario>-<time>); "
                                                            "it must be new or empty, unless --force.")]
ForceOption = Annotated[bool, typer.Option("--force", help="Delete what an earlier run left in --out first, and run "
                                                           "a scenario larger than this machine's measured capacity.")]
ProviderOption = Annotated[str, typer.Option("--zk-provider", help="ZooKeeper provider: auto, docker or local.")]
QuietOption = Annotated[bool, typer.Option("--no-progress", help="No live display.")]


def _check_provider(zk_provider: str) -> None:
    if zk_provider not in ("auto", "docker", "local"):
        _fail(f"--zk-provider {zk_provider!r}: choose auto, docker or local")


def run_command(
    scenario: ScenarioArgument,
    backend: Annotated[str, typer.Option(help=f"One of: {', '.join(backend_names())} "
                                              "(`modern` is accepted as an alias of `classic`).")],
    out: OutOption = None,
    overrides: SetOption = None,
    zk_provider: ProviderOption = "auto",
    no_progress: QuietOption = False,
    force: ForceOption = False,
) -> None:
    """Run a scenario on one backend; leaves RUN_DIR/events/ and RUN_DIR/lock.json."""
    backend = backend_of(scenario, backend, overrides)
    _check_provider(zk_provider)
    # Run on this backend alone, so the group is checked against it only: a strategy 0.8 never had may
    # still run on the coordinator protocols of a scenario that lists legacy too.
    loaded = _load(scenario, [*(overrides or []), f'backends=["{backend}"]'], (backend,))
    hold_against_capacity(loaded, (backend,), force=force)
    run_dir = out or runner.default_run_dir(loaded)
    claim_out_folder(run_dir, force=force)
    result = runner.run(loaded, runner.RunOptions(backend=backend, run_dir=run_dir, zk_provider=zk_provider,
                                                  progress=not no_progress))
    console.print(f"run directory: {result.run_dir}")
    if result.status == "completed":
        console.print(f"next: {command(f'summarize {result.run_dir}')}")
    if result.status != "completed":
        raise typer.Exit(130 if result.status == "interrupted" else 1)


def compare_command(
    scenario: ScenarioArgument,
    out: OutOption = None,
    overrides: SetOption = None,
    zk_provider: ProviderOption = "auto",
    no_progress: QuietOption = False,
    force: ForceOption = False,
    backends: Annotated[str | None, typer.Option(
        "--backends", help="A grid: these backends, comma-separated (default: the scenario's).")] = None,
    strategies: Annotated[str | None, typer.Option(
        "--strategies", help="A grid: these strategies on each backend that has them, comma-separated "
                             "(\"default\": each backend's own).")] = None,
    repeat: Annotated[int | None, typer.Option(
        "--repeat", help="A grid: runs a cell (each with the next seed), for median \\[min-max] and n.")] = None,
    master: Annotated[str, typer.Option(help="A grid: Spark master for its summary.")] = "local[*]",
) -> None:
    """Run a scenario on each of its backends with the identical schedule: RUN_DIR/<backend> for each.

    With --backends, --strategies or --repeat, a grid instead: every backend x strategy cell `--repeat` times
    (a campaign made on the spot, resumable with the same --out), then one per-phase table, median \\[min-max]
    and n a cell, printed and written to OUT/compare.md."""
    _check_provider(zk_provider)
    if backends is not None or strategies is not None or repeat is not None:
        from experiments.cli.compare_grid import compare_grid

        compare_grid(scenario, find_scenario(scenario), _load(scenario, overrides), overrides or [],
                     backends=backends, strategies=strategies, repeat=repeat or 1, out=out,
                     zk_provider=zk_provider, progress=not no_progress, force=force, master=master)
        return
    loaded = _load(scenario, overrides)
    hold_against_capacity(loaded, loaded.backends, force=force)
    run_dir = out or runner.default_run_dir(loaded)
    claim_out_folder(run_dir, force=force)
    results = comparison.compare(loaded, run_dir, zk_provider=zk_provider, progress=not no_progress)
    for result in results:
        console.print(f"{result.run_dir.name}: {result.status}{' (' + result.reason + ')' if result.reason else ''}")
    console.print(f"run directory: {run_dir}")
    if any(result.status == "completed" for result in results):
        console.print(f"next: {command(f'summarize {run_dir}')}")
    if any(result.status == "interrupted" for result in results):
        raise typer.Exit(130)
    if any(result.status != "completed" for result in results):
        raise typer.Exit(1)


def hold_against_capacity(scenario: Scenario, backends, *, force: bool) -> None:
    """Stop before a scenario larger than this machine carried on a backend (`doctor --capacity`), unless
    `force`; with it, say so and go on."""
    from experiments.run.capacity import check

    for backend in backends:
        warning = check(scenario, canonical_name(backend))
        if warning is None:
            continue
        if not force:
            _fail(f"{warning}. Run it anyway with --force, or measure again: {command('doctor --capacity')}")
        typer.echo(f"warning: {warning} (--force: running anyway)", err=True)


def claim_out_folder(folder: Path, *, force: bool) -> None:
    """The run folder's rules (experiments.run.claim), with a campaign's folder named as such."""
    from experiments.folders.campaign_folder import CampaignFolder
    from experiments.run.claim import FolderRefused, claim

    if CampaignFolder(folder).is_campaign():
        _fail(f"--out {folder} is a campaign folder; resume it with `{command(f'campaign FILE --out {folder}')}`, "
              "or choose another --out")
    try:
        deleted = claim(folder, force=force)
    except FolderRefused as refused:
        _fail(str(refused))
    if deleted:
        typer.echo(f"--force: deleted {folder} ({deleted})", err=True)


def scenarios_command() -> None:
    """List the built-in scenario files, each with its timeline's length and the wall time it takes here."""
    from experiments.run import wall_time

    recorded = wall_time.recorded_seconds()
    rows = [_scenario_row(path, recorded) for path in sorted(SCENARIO_DIR.glob("*.toml"))]
    headers = ("name", "timeline", "wall time here", "members", "utilisation", "backends")
    widths = [max(len(row[index]) for row in (headers, *rows)) for index in range(len(headers))]
    for row in (headers, *rows):
        # a name is typed as shown: its column is as wide as the longest, whatever the terminal's width
        typer.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)).rstrip())
        if row is not headers:
            typer.echo(_indented(row[len(headers)]))
    typer.echo("timeline: the scenario's own clock, which starts once the group is stable; wall time here: "
               "the median of this checkout's recorded runs (runs/), or an estimate from the timeline and the "
               "warm-up before it")


def _indented(description: str) -> str:
    """A scenario's description under its row: wrapped to a terminal's width, one line when piped."""
    import textwrap

    if not console.is_terminal:
        return f"    {description}"
    return textwrap.fill(description, width=max(40, console.width), initial_indent="    ", subsequent_indent="    ")


def _scenario_row(path: Path, recorded: dict[str, list[float]]) -> tuple[str, ...]:
    from experiments.run import wall_time
    from experiments.run.capacity import peak_members
    from experiments.scenario import resolve

    try:
        scenario = load(path)
    except ScenarioError as error:
        return (path.stem, "-", "-", "-", "-", "-", f"invalid: {error.problems[0].message}")
    utilisation = scenario.load().utilisation
    try:
        peak = peak_members(resolve(scenario))
    except ScenarioError:
        peak = scenario.group.members
    wall = wall_time.expected(scenario.name, scenario.duration, peak, recorded)
    return (path.stem, f"{scenario.duration:.0f} s", wall.text(), str(scenario.group.members),
            "-" if utilisation is None else f"{utilisation:.2f}", ",".join(scenario.backends), scenario.description)
