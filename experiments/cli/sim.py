"""`rebalance-lab sim SCENARIO --backend B --seeds K`: the scenario in virtual time (experiments.sim), one run
folder a seed, each summarised and reported as a real run is."""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Annotated

import typer

from experiments.cli.run import ScenarioArgument, SetOption, _load
from experiments.folders import RUNS_DIR
from rebalance.command_line import command


def register(app: typer.Typer) -> None:
    app.command("sim")(sim_command)
    app.command("sim-validate")(validate_command)


def sim_command(
    scenario: ScenarioArgument,
    backend: Annotated[str, typer.Option(help="The backend to simulate (classic and kip848 so far).")] = "classic",
    seeds: Annotated[int, typer.Option(min=1, help="How many seeds, from the scenario's own up.")] = 1,
    sets: SetOption = None,
    out: Annotated[Path | None, typer.Option(help="Folder of the runs (default runs/sim-<scenario>-<backend>); "
                                                  "one run folder a seed inside, each new.")] = None,
    master: Annotated[str | None, typer.Option(help="Spread the seeds over Spark (e.g. local[*] or spark://host:7077, "
                                                    "as `summarize` takes it); default: one after the other here.")] = None,
    warm_start: Annotated[bool, typer.Option(help="Begin with the initial members as a stable group their coordinator "
                                                  "loaded, not joining one by one (kip848; docs/simulation.md).")] = False,
    records: Annotated[bool, typer.Option(help="Produce records and have each member poll, handle and commit them as "
                                               "the workload says (classic and kip848; docs/simulation.md, not validated yet).")] = False,
    safety: Annotated[bool, typer.Option(help="Summarise every seed in one Spark pass and keep the seeds that broke a "
                                              "safety check (a record skipped, an offset moved back, a partition "
                                              "without one owner in the end) with the command that replays each, in "
                                              "OUT/violations.json; the clean seeds' folders are removed.")] = False,
    keep_clean: Annotated[bool, typer.Option(help="With --safety: keep the clean seeds' folders too.")] = False,
) -> None:
    """Play a scenario in virtual time: no process, socket or sleep; a seed replays to the same events."""
    from experiments.sim.play import NotSimulated, run_seed, simulate

    loaded = _load(scenario, sets)
    root = out or Path(RUNS_DIR) / f"sim-{loaded.name}-{backend}"
    started = time.monotonic()
    tasks = [(loaded.source, list(sets or []), backend, seed, str(root / f"seed-{seed}"), warm_start, records)
             for seed in range(loaded.seed, loaded.seed + seeds)]
    try:
        # the first seed here: a scenario the simulation cannot play is refused by name before any other starts
        simulate(loaded, backend, root / f"seed-{loaded.seed}", seed=loaded.seed, warm_start=warm_start,
                 records=records)
        if master is None:
            folders = [tasks[0][4], *(run_seed(task) for task in tasks[1:])]
        else:
            folders = [tasks[0][4], *_over_spark(master, tasks[1:])]
    except (NotSimulated, FileExistsError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    if safety:
        _check_safety(root, [task[3] for task in tasks], [Path(folder) for folder in folders], master or "local[*]",
                      replay=command(" ".join([f"sim {scenario} --backend {backend}", *(["--records"] if records else []),
                                               *(["--warm-start"] if warm_start else []),
                                               *(f"--set {shlex.quote(item)}" for item in sets or []),
                                               "--set seed={seed} --out runs/replay-{seed}"])), keep_clean=keep_clean)
        typer.echo(f"{seeds} seed{'s' if seeds != 1 else ''} simulated and checked in "
                   f"{time.monotonic() - started:.1f} s of wall time")
        return
    for task, folder in zip(tasks, folders, strict=True):
        typer.echo(f"seed {task[3]}: {folder}")
    typer.echo(f"{seeds} seed{'s' if seeds != 1 else ''} in {time.monotonic() - started:.1f} s of wall time; "
               f"next: {command(f'report {root}')}")


def _check_safety(root: Path, seeds: list[int], folders: list[Path], master: str, *, replay: str,
                  keep_clean: bool) -> None:
    from experiments.statistics.safety import SAFETY, VIOLATIONS_JSON, keep_violations
    from experiments.summary import summarize

    summaries = summarize(folders, master=master, write=False)
    found = keep_violations(root, seeds, summaries, replay=replay, keep_clean=keep_clean)
    for violation in found:
        broken = "; ".join(f"{check.check}: {check.detail}" for check in violation.broken)
        typer.echo(f"seed {violation.seed}: {broken}\n  replay: {replay.replace('{seed}', str(violation.seed))}")
    typer.echo(f"{len(found)} of {len(seeds)} seeds broke a safety check ({', '.join(SAFETY)}); "
               f"{root / VIOLATIONS_JSON}")


def _over_spark(master: str, tasks: list) -> list[str]:
    """One Spark task a seed: the driver hands out (scenario file, overrides, backend, seed, folder), each worker
    plays its seed into the shared folder."""
    if not tasks:
        return []
    from experiments.sim.play import run_seed
    from experiments.summary.session import start_spark

    spark = start_spark(master)
    return spark.sparkContext.parallelize(tasks, len(tasks)).map(run_seed).collect()


DATA_ROOT = Path(__file__).resolve().parent.parent.parent / "docs" / "results-data"
HERD_DATA = (DATA_ROOT / "herd-defaults", DATA_ROOT / "herd-legacy-grid")
PAGE = DATA_ROOT.parent / "simulation.md"


def validate_command(
    seeds: Annotated[int, typer.Option(min=1, help="Simulated seeds a cell.")] = 30,
    data: Annotated[list[Path] | None, typer.Option(help="A herd campaign's data folder (its changes.csv); "
                                                         "repeatable. Default: herd-defaults and herd-legacy-grid.")] = None,
    write: Annotated[Path | None, typer.Option(help="Put the tables into this page's validation block "
                                                    "(docs/simulation.md).")] = None,
    cells: Annotated[Path | None, typer.Option(help="Instead: a campaign's data folder (its runs.csv); each of its cells "
                                                    "the simulation plays, simulated with records, summarised and set "
                                                    "beside the real runs: seed 002's measures phase by phase, split "
                                                    "brain's anomalies.")] = None,
    master: Annotated[str, typer.Option(help="Spark master for the summary of the simulated runs.")] = "local[*]",
    sets: SetOption = None,
) -> None:
    """The simulation beside the lab's real runs, cell by cell: the herd's requests per join and per leave, or
    (--cells) a campaign's measures: seed 002's phase by phase, split brain's anomalies."""
    from experiments.sim.validate import cells_markdown, herd_cells, write_into

    if cells is not None:
        _validate_cells(cells, seeds=seeds, write=write, master=master, sets=list(sets or []))
        return
    folders = data or list(HERD_DATA)
    missing = [folder / "changes.csv" for folder in folders if not (folder / "changes.csv").is_file()]
    if missing:
        typer.echo(f"error: {', '.join(map(str, missing))}: no such file (a herd campaign's data folder holds one)",
                   err=True)
        raise typer.Exit(2)
    started = time.monotonic()
    tables, cells = [], 0
    for folder in folders:
        found = herd_cells(folder / "changes.csv", seeds=seeds)
        cells += len(found)
        source = folder.resolve().relative_to(PAGE.parent.parent) if folder.resolve().is_relative_to(PAGE.parent.parent) \
            else folder
        tables.append(cells_markdown(found, seeds=seeds, source=str(source)))
    table = "\n".join(tables)
    typer.echo(table)
    typer.echo(f"{cells} cells, {seeds} seeds each, in {time.monotonic() - started:.0f} s of wall time")
    if write is not None:
        write_into(write, table)
        typer.echo(f"written into {write}")


def _validate_cells(folder: Path, *, seeds: int, write: Path | None, master: str, sets: list[str]) -> None:
    """Simulate each cell of the data folder's campaign (at the scenario's own settings: no sweep) `seeds` times with
    records, summarise them in one Spark pass, and set their measures beside the real runs'. A cell the simulation
    cannot play is named with its reason."""
    import shutil
    import tempfile

    import pandas as pd

    from experiments.scenario import load
    from experiments.sim.play import NotSimulated, simulate
    from experiments.sim.validate import write_into
    from experiments.statistics.phase_validation import phase_cells, phase_cells_markdown
    from experiments.summary import summarize

    runs_csv = folder / "runs.csv"
    if not runs_csv.is_file():
        typer.echo(f"error: {runs_csv}: no such file (a campaign's data folder holds one)", err=True)
        raise typer.Exit(2)
    real = pd.read_csv(runs_csv)
    cells = sorted({(row.scenario, row.backend, row.strategy) for row in real.itertuples()
                    if str(row.sweep) in ("-", "nan")})
    scenarios = Path(__file__).resolve().parent.parent / "scenarios"
    started = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="sim-cells-"))
    try:
        simulated: dict[tuple[str, str, str], list[Path]] = {}
        unplayed: dict[tuple[str, str, str], str] = {}
        for name, backend, strategy in cells:
            scenario = load(scenarios / f"{name}.toml", overrides=[f'group.strategy="{strategy}"',
                                                                    f'backends=["{backend}"]', *sets])
            try:
                for seed in range(1, seeds + 1):
                    out = scratch / f"{name}-{backend}-{strategy}-{seed}"
                    simulate(scenario, backend, out, seed=seed, records=True)
                    simulated.setdefault((name, backend, strategy), []).append(out)
            except NotSimulated as refused:
                unplayed[(name, backend, strategy)] = str(refused)
                typer.echo(f"{name} {backend} {strategy}: not simulated ({refused})", err=True)
                continue
            typer.echo(f"{name} {backend} {strategy}: {seeds} seeds simulated", err=True)
        if simulated:
            summarize([run for runs in simulated.values() for run in runs], master=master)
        table = phase_cells_markdown(phase_cells(real, simulated), source=str(folder), seeds=seeds, unplayed=unplayed)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    typer.echo(table)
    typer.echo(f"{len(cells)} cells, {seeds} seeds each, in {time.monotonic() - started:.0f} s of wall time")
    if write is not None:
        write_into(write, table, block=f"validation-{folder.name}")
        typer.echo(f"written into {write}")
