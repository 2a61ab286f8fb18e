"""`rebalance-lab sim SCENARIO --backend B --seeds K`: the scenario in virtual time (experiments.sim), one run
folder a seed, each summarised and reported as a real run is."""

from __future__ import annotations

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
                                               "the workload says (classic; docs/simulation.md, not validated yet).")] = False,
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
    for task, folder in zip(tasks, folders, strict=True):
        typer.echo(f"seed {task[3]}: {folder}")
    typer.echo(f"{seeds} seed{'s' if seeds != 1 else ''} in {time.monotonic() - started:.1f} s of wall time; "
               f"next: {command(f'report {root}')}")


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
) -> None:
    """The simulation beside the lab's real herd runs, cell by cell (requests per join and per leave)."""
    from experiments.sim.validate import cells_markdown, herd_cells, write_into

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
