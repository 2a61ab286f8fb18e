"""`rebalance-lab sim SCENARIO --backend B --seeds K`: the scenario in virtual time (experiments.sim), one run
folder a seed, each summarised and reported as a real run is."""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Annotated

import typer

from experiments.cli.run import ScenarioArgument, SetOption, _load, backend_of
from experiments.folders import RUNS_DIR
from rebalance.command_line import command


def register(app: typer.Typer) -> None:
    app.command("sim")(sim_command)
    app.command("sim-validate")(validate_command)


def sim_command(
    scenario: ScenarioArgument,
    backend: Annotated[str, typer.Option(help="The backend to simulate: legacy, classic (alias modern) or kip848.")] = "classic",
    seeds: Annotated[int, typer.Option(min=1, help="How many seeds, from the scenario's own up.")] = 1,
    sets: SetOption = None,
    out: Annotated[Path | None, typer.Option(help="Folder of the runs (default runs/sim-<scenario>-<backend>); "
                                                  "one run folder a seed inside, each new.")] = None,
    master: Annotated[str | None, typer.Option(help="Spread the seeds over Spark (e.g. local[*] or spark://host:7077, "
                                                    "as `summarize` takes it); default: one after the other "
                                                    "here (a --safety sweep: one process a core).")] = None,
    warm_start: Annotated[bool, typer.Option(help="Begin with the initial members as a stable group their coordinator "
                                                  "loaded, not joining one by one (kip848; docs/simulation.md).")] = False,
    records: Annotated[bool, typer.Option(help="Produce records and have each member poll, handle and commit them as "
                                               "the workload says (0.8's not through a broker leading again within "
                                               "the run; validated against the real runs in docs/simulation.md).")] = False,
    safety: Annotated[bool, typer.Option(help="Check every seed for what must never happen (a record skipped, an "
                                              "offset moved back, a partition without one owner in the end), tallied "
                                              "as it plays with no event file; the seeds found broken are written, "
                                              "confirmed by the Spark summary and kept with the command that replays "
                                              "each, in OUT/violations.json.")] = False,
    keep_clean: Annotated[bool, typer.Option(help="With --safety: write and keep every seed's folder, each "
                                                  "summarised in one Spark pass.")] = False,
    shared_zookeeper: Annotated[bool, typer.Option(help="legacy: the ZooKeeper server shared among the requests in "
                                                        "it and each attempt's registrations read as one request, a "
                                                        "coarser model for groups of thousands (docs/simulation.md, "
                                                        "\"Speed\").")] = False,
) -> None:
    """Play a scenario in virtual time: no process, socket or sleep; a seed replays to the same events."""
    from experiments.sim.play import run_seed, simulate
    from experiments.sim.playable import NotSimulated
    from rebalance.backends import profile

    backend = backend_of(scenario, backend, sets)
    loaded = _load(scenario, sets)
    root = out or Path(RUNS_DIR) / f"sim-{loaded.name}-{backend}"
    started = time.monotonic()
    if shared_zookeeper and (safety or not profile(backend).needs_zookeeper):
        typer.echo(f"error: --shared-zookeeper is for plain runs of a backend on ZooKeeper (legacy), not "
                   f"{backend}{' with --safety' if safety else ''}", err=True)
        raise typer.Exit(2)
    if safety and not keep_clean:
        _safety_sweep(scenario, loaded, backend, root, seeds=seeds, sets=list(sets or []), master=master,
                      warm_start=warm_start, records=records)
        typer.echo(f"{seeds} seed{'s' if seeds != 1 else ''} simulated and checked in "
                   f"{time.monotonic() - started:.1f} s of wall time")
        return
    tasks = [(loaded.source, list(sets or []), backend, seed, str(root / f"seed-{seed}"), warm_start, records,
              shared_zookeeper) for seed in range(loaded.seed, loaded.seed + seeds)]
    try:
        # the first seed here: a scenario the simulation cannot play is refused by name before any other starts
        simulate(loaded, backend, root / f"seed-{loaded.seed}", seed=loaded.seed, warm_start=warm_start,
                 records=records, shared_zookeeper=shared_zookeeper)
        if master is None:
            folders = [tasks[0][4], *(run_seed(task) for task in tasks[1:])]
        else:
            folders = [tasks[0][4], *_over_spark(master, tasks[1:])]
    except (NotSimulated, FileExistsError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    if safety:
        _check_safety(root, [task[3] for task in tasks], [Path(folder) for folder in folders], master or "local[*]",
                      replay=_replay(scenario, backend, sets, warm_start=warm_start, records=records),
                      keep_clean=keep_clean)
        typer.echo(f"{seeds} seed{'s' if seeds != 1 else ''} simulated and checked in "
                   f"{time.monotonic() - started:.1f} s of wall time")
        return
    for task, folder in zip(tasks, folders, strict=True):
        typer.echo(f"seed {task[3]}: {folder}")
    typer.echo(f"{seeds} seed{'s' if seeds != 1 else ''} in {time.monotonic() - started:.1f} s of wall time; "
               f"next: {command(f'report {root}')}")


def _replay(scenario: str, backend: str, sets: list[str] | None, *, warm_start: bool, records: bool) -> str:
    """The command that plays one seed again, "{seed}" left to fill in."""
    return command(" ".join([f"sim {scenario} --backend {backend}", *(["--records"] if records else []),
                             *(["--warm-start"] if warm_start else []),
                             *(f"--set {shlex.quote(item)}" for item in sets or []),
                             "--set seed={seed} --out runs/replay-{seed}"]))


def _safety_sweep(scenario: str, loaded, backend: str, root: Path, *, seeds: int, sets: list[str],
                  master: str | None, warm_start: bool, records: bool) -> None:
    """Every seed tallied as it plays (no file, no Spark); the seeds the tally found broken played again with
    their events and confirmed by the Spark summary (experiments.statistics.safety)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from experiments.sim.play import simulate
    from experiments.sim.playable import NotSimulated
    from experiments.statistics.safety import CONFIRMED_AT_MOST, SafetySeed, tally_seed, tally_seeds
    from experiments.statistics.safety_tally import broken

    if root.exists() and any(root.iterdir()):
        typer.echo(f"error: {root} is not empty; give a new folder", err=True)
        raise typer.Exit(2)
    tasks = [SafetySeed(str(loaded.source), tuple(sets), backend, seed, warm_start, records)
             for seed in range(loaded.seed, loaded.seed + seeds)]
    try:   # the first seed here: a scenario the simulation cannot play is refused by name before any other starts
        first = dict([tally_seed(tasks[0])])
    except NotSimulated as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    with Progress(TextColumn("seeds"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  transient=True) as progress:
        bar = progress.add_task("seeds", total=seeds, completed=1)
        rest, interrupted = tally_seeds(tasks[1:], master=master, done=lambda: progress.advance(bar))
    tallied = first | rest
    if interrupted:
        _keep_interrupted(root, tallied, seeds, _replay(scenario, backend, sets, warm_start=warm_start, records=records))
        raise typer.Exit(130)
    every_broken = [seed for seed in sorted(tallied) if broken(tallied[seed])]
    flagged, beyond = every_broken[:CONFIRMED_AT_MOST], every_broken[CONFIRMED_AT_MOST:]
    root.mkdir(parents=True, exist_ok=True)
    folders = [simulate(loaded, backend, root / f"seed-{seed}", seed=seed, warm_start=warm_start,
                        records=records).path for seed in flagged]
    replay = _replay(scenario, backend, sets, warm_start=warm_start, records=records)
    confirmed = _check_safety(root, flagged, folders, master or "local[*]", replay=replay, keep_clean=False,
                              swept=[task.seed for task in tasks],
                              tallied={seed: broken(tallied[seed]) for seed in beyond})
    unconfirmed = sorted(set(flagged) - confirmed)
    if unconfirmed:
        typer.echo(f"warning: the tally found seed{'s' if len(unconfirmed) != 1 else ''} "
                   f"{', '.join(map(str, unconfirmed))} broken where the Spark summary did not (the tally and the "
                   "summary's rules differ: a defect to report)", err=True)


def _keep_interrupted(root: Path, tallied: dict, asked: int, replay: str) -> None:
    """Ctrl-C during a sweep: the seeds tallied until then kept in violations.json, the broken ones as the tally found
    them (none written or confirmed in Spark: the user asked to stop)."""
    from experiments.statistics.safety import SAFETY, VIOLATIONS_JSON, keep_violations
    from experiments.statistics.safety_tally import broken

    root.mkdir(parents=True, exist_ok=True)
    found = {seed: broken(checks) for seed, checks in sorted(tallied.items()) if broken(checks)}
    keep_violations(root, [], [], replay=replay, swept=sorted(tallied), tallied=found, interrupted=True)
    typer.echo(f"interrupted after {len(tallied)} of {asked} seeds: {len(found)} broke a safety check "
               f"({', '.join(SAFETY)}) as the tally found them, none confirmed; {root / VIOLATIONS_JSON}", err=True)


def _check_safety(root: Path, seeds: list[int], folders: list[Path], master: str, *, replay: str,
                  keep_clean: bool, swept: list[int] | None = None, tallied: dict | None = None) -> set[int]:
    """Summarise the seeds' folders in one Spark pass and keep the violations (and `tallied`, broken seeds beyond
    those confirmed, as the tally found them); the seeds confirmed broken."""
    from experiments.statistics.safety import SAFETY, VIOLATIONS_JSON, keep_violations
    from experiments.summary import summarize

    swept = seeds if swept is None else swept
    tallied = tallied or {}
    summaries = summarize(folders, master=master, write=False) if folders else []
    found = keep_violations(root, seeds, summaries, replay=replay, keep_clean=keep_clean, swept=swept,
                            tallied=tallied)
    for violation in found:
        checks = "; ".join(f"{check.check}: {check.detail}" for check in violation.broken)
        typer.echo(f"seed {violation.seed}: {checks}\n  replay: {replay.replace('{seed}', str(violation.seed))}")
    if tallied:
        kinds = sorted({check.check for checks in tallied.values() for check in checks})
        typer.echo(f"and {len(tallied)} more seeds the tally found broken ({', '.join(kinds)}), beyond the "
                   f"{len(seeds)} written and confirmed: {root / VIOLATIONS_JSON} lists each with its replay command")
    typer.echo(f"{len(found) + len(tallied)} of {len(swept)} seeds broke a safety check ({', '.join(SAFETY)}); "
               f"{root / VIOLATIONS_JSON}")
    return {violation.seed for violation in found}


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
    records where the simulation plays them (0.8's not through a broker leading again within the run: there its double
    ownership and time rebalancing only), the seeds spread over one process a
    core, summarise them in one Spark pass, and set their measures beside the real runs'. A cell the simulation cannot
    play is named with its reason."""
    import os
    import shutil
    import tempfile
    from concurrent.futures import ProcessPoolExecutor

    import pandas as pd
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from experiments.cli.step_lines import StepLines
    from experiments.scenario import load, resolve
    from experiments.sim.play import run_seed, simulate
    from experiments.sim.playable import NotSimulated, records_refusal
    from experiments.sim.validate import write_into
    from experiments.statistics.phase_validation import phase_cells, phase_cells_markdown, server_fault_cells
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
        recordless: set[tuple[str, str, str]] = set()
        tasks = []
        for name, backend, strategy in cells:
            overrides = [f'group.strategy="{strategy}"', f'backends=["{backend}"]', *sets]
            source = scenarios / f"{name}.toml"
            folders = [scratch / f"{name}-{backend}-{strategy}-{seed}" for seed in range(1, seeds + 1)]
            try:
                scenario = load(source, overrides=overrides)
                records = records_refusal(scenario, resolve(scenario), backend) is None
                # the first seed here: a cell the simulation cannot play is refused by name before its others start
                simulate(scenario, backend, folders[0], seed=1, records=records)
            except NotSimulated as refused:
                unplayed[(name, backend, strategy)] = str(refused)
                typer.echo(f"{name} {backend} {strategy}: not simulated ({refused})", err=True)
                continue
            simulated[(name, backend, strategy)] = folders
            if not records:
                recordless.add((name, backend, strategy))
            tasks += [(str(source), overrides, backend, seed, str(folder), False, records)
                      for seed, folder in enumerate(folders[1:], start=2)]
        with Progress(TextColumn("seeds"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                      console=Console(stderr=True), transient=True) as progress:
            bar = progress.add_task("seeds", total=len(tasks))
            with ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
                for _ in pool.map(run_seed, tasks):
                    progress.advance(bar)
        typer.echo(f"{len(simulated)} cells simulated, {seeds} seeds each", err=True)
        if simulated:
            with StepLines("summarising the simulated runs") as step:
                summarize([run for runs in simulated.values() for run in runs], master=master, step=step,
                          progress=step.count)
        found = phase_cells(real, simulated, recordless) + server_fault_cells(real, simulated, recordless)
        found.sort(key=lambda cell: (cell.scenario, cell.backend, cell.strategy))   # stable: each cell's rows together
        table = phase_cells_markdown(found, source=str(folder), seeds=seeds, unplayed=unplayed, recordless=recordless)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    typer.echo(table)
    typer.echo(f"{len(cells)} cells, {seeds} seeds each, in {time.monotonic() - started:.0f} s of wall time")
    if write is not None:
        write_into(write, table, block=f"validation-{folder.name}")
        typer.echo(f"written into {write}")
