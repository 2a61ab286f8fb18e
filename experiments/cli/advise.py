"""`rebalance-lab advise SCENARIO`: every strategy of every simulated generation, ranked for the group the scenario
describes, from many seeds in virtual time (experiments.statistics.advice)."""

from __future__ import annotations

import sys
import time
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from experiments.cli.run import ScenarioArgument, SetOption, _load
from experiments.scenario.model import LATENCY_LIMIT_MS
from experiments.statistics.inference import MIN_RUNS, Q
from rebalance.command_line import command

# Wide enough for the ranking's eight columns when the output is a file or a pipe (rich's own default there is 80).
console = Console(highlight=False, width=None if sys.stdout.isatty() else 200)


def register(app: typer.Typer) -> None:
    app.command("advise")(advise_command)


def advise_command(
    scenario: ScenarioArgument,
    seeds: Annotated[int, typer.Option(min=1, help="Simulated seeds a cell (at least 5 for the tests).")] = 30,
    sets: SetOption = None,
    members: Annotated[int | None, typer.Option(min=1, help="The group's members at the start (group.members).")] = None,
    partitions: Annotated[int | None, typer.Option(min=1, help="The producer topic's partitions.")] = None,
    rate: Annotated[float | None, typer.Option(min=0, help="Records a second the producer sends (producer.rate).")] = None,
    service_ms: Annotated[float | None, typer.Option(min=0, help="The median time to handle one record, ms.")] = None,
    service_p99_ms: Annotated[float | None, typer.Option(min=0, help="Its 99th percentile, ms (lognormal).")] = None,
    latency_limit_ms: Annotated[int, typer.Option(min=1, help="A record handled later than this after it was "
                                                              "produced counts as lost.")] = LATENCY_LIMIT_MS,
    workers: Annotated[int | None, typer.Option(min=1, help="Processes playing seeds (default: one a core).")] = None,
    within: Annotated[float | None, typer.Option(min=0, help="A budget of wall time, in seconds: no new seed starts "
                                                             "once it is spent and every cell has the tests' "
                                                             f"{MIN_RUNS}; the cells keep the seeds they all "
                                                             "finished.")] = None,
) -> None:
    """Which assignment strategy and which generation for this group? Each cell played for SEEDS seeds in virtual
    time, ranked by records over the latency limit, worst latency and time rebalancing, the differences tested as
    the results page tests them, with the mechanism behind the top answer and the command that confirms it."""
    from experiments.sim.playable import NotSimulated
    from experiments.statistics import advice
    from experiments.statistics.campaign_stats import comparisons

    overrides = list(sets or [])
    base = _load(scenario, overrides)
    overrides += _described(base, members=members, partitions=partitions, rate=rate, service_ms=service_ms,
                            service_p99_ms=service_p99_ms)
    loaded = _load(scenario, overrides)
    cells, left_out = advice.cells_of(loaded)
    if not cells:
        typer.echo(f"error: scenario {loaded.name}: none of its backends ({', '.join(loaded.backends)}) is simulated "
                   f"with records", err=True)
        raise typer.Exit(2)
    budget = "" if within is None else f" (or as many as {within:g} s of wall time allow, at least {MIN_RUNS})"
    console.print(f"advise {loaded.name}: {len(cells)} cells x {seeds} seeds{budget} in virtual time, latency limit "
                  f"{latency_limit_ms / 1000:g} s", soft_wrap=True)
    started = time.monotonic()
    with Progress(TextColumn("seeds"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), console=console,
                  transient=True) as progress:
        task = progress.add_task("seeds", total=len(cells) * seeds)
        try:
            runs = advice.play(loaded, cells, seeds=seeds, overrides=overrides, latency_limit_ms=latency_limit_ms,
                               workers=workers, done=lambda: progress.advance(task), within_s=within)
        except NotSimulated as refused:
            typer.echo(f"error: {refused}", err=True)
            raise typer.Exit(2) from None
    wall = time.monotonic() - started
    interrupted = bool(runs.attrs.get("interrupted"))
    if interrupted and runs.empty:
        typer.echo(f"interrupted after {wall:.1f} s, before every cell had finished a seed: nothing to rank", err=True)
        raise typer.Exit(130)
    ranked = advice.rank(runs, cells)
    compared = comparisons(runs)   # every pair of cells, tested and corrected as the results page does
    marks = advice.validation_marks(loaded.name)
    _print_ranking(ranked, marks)
    _print_phases(runs, ranked)
    played = min(item.seeds for item in ranked)
    _print_differences(ranked, compared, played)
    top = ranked[0]
    console.print(f"\n[bold]Why {top.cell.label}[/bold] ({advice.protocol_of(top.cell)}):", soft_wrap=True)
    for sentence in advice.mechanism(top.cell, loaded):
        console.print(f"- {sentence}", soft_wrap=True)
    confirm = advice.confirm_command(scenario, [item.cell for item in ranked[:2]], overrides)
    console.print(f"\nConfirm the top two with real runs: {command(confirm)}", soft_wrap=True)
    for note in left_out:
        console.print(f"left out: {note}", soft_wrap=True)
    if interrupted:
        console.print(f"Interrupted at {_seeds(played)} a cell of the {seeds} asked: ranked on the seeds every cell "
                      f"finished.", soft_wrap=True)
    elif played < seeds:
        short = f"; the {MIN_RUNS} the tests take went past it" if runs.attrs.get("past_budget") else ""
        console.print(f"The budget of {within:g} s was spent at {_seeds(played)} a cell of the {seeds} asked{short}: "
                      f"the spreads are of {_seeds(played)}, and the tests have less room.", soft_wrap=True)
    console.print(f"{len(cells) * played} seeds in {wall:.1f} s of wall time. Simulated figures: docs/simulation.md "
                  f"says where the simulation matches the lab's real runs and where it does not.", soft_wrap=True)
    if interrupted:
        raise typer.Exit(130)


def _described(scenario, *, members, partitions, rate, service_ms, service_p99_ms) -> list[str]:
    """The group as the options describe it, as --set overrides of the scenario."""
    found = []
    if members is not None:
        found.append(f"group.members={members}")
    if partitions is not None:
        found.append(f"topics.{scenario.producer_topic}.partitions={partitions}")
    if rate is not None:
        found.append(f"producer.rate={rate}")
    if service_ms is not None or service_p99_ms is not None:
        found.append('workload.service="lognormal"' if service_p99_ms is not None else 'workload.service="fixed"')
    if service_ms is not None:
        found.append(f"workload.service_ms={service_ms}")
    if service_p99_ms is not None:
        found.append(f"workload.service_p99_ms={service_p99_ms}")
    return found


def _seeds(count: int) -> str:
    return f"{count} seed{'' if count == 1 else 's'}"


def _figure(value: float) -> str:
    return "-" if value != value else f"{value:,.0f}"


def _print_ranking(ranked, marks) -> None:
    from experiments.statistics import advice

    table = Table(title="Ranked over the timeline: median \\[min-max] over the seeds", title_justify="left")
    for column in ("rank", "cell", "protocol", "records lost", "worst latency (ms)", "rebalancing (ms)", "n",
                   "validated (docs/simulation.md)"):
        table.add_column(column)
    for index, item in enumerate(ranked, start=1):
        figures = [f"{_figure(item.medians[m])} [{_figure(item.spreads[m][0])}-{_figure(item.spreads[m][1])}]"
                   for m in advice.RANKED_BY]
        inside, total = marks.get((item.cell.backend, item.cell.strategy), (None, None))
        mark = "not validated" if total is None else f"{inside} of {total} measures inside"
        table.add_row(str(index), item.cell.label, advice.protocol_of(item.cell), *figures, str(item.seeds), mark)
    console.print(table)


def _print_phases(runs, ranked) -> None:
    from experiments.statistics import advice

    phases = advice.scenario_phases(runs)
    if not phases:
        console.print("Per phase: the scenario names no phase of its own; the ranking above is its timeline's.",
                      soft_wrap=True)
        return
    table = Table(title="Per phase: records lost / worst latency (ms) / rebalancing (ms), medians",
                  title_justify="left")
    table.add_column("cell")
    for phase in phases:
        table.add_column(phase)
    for item in ranked:
        rows = runs[(runs["backend"] == item.cell.backend) & (runs["strategy"] == item.cell.strategy)]
        cells = []
        for phase in phases:
            medians = [rows.loc[rows["metric"] == f"{phase}: {measure}", "value"].median()
                       for measure in advice.PHASE_LABELS]
            cells.append(" / ".join(_figure(value) for value in medians))
        table.add_row(item.cell.label, *cells)
    console.print(table)


def _print_differences(ranked, compared, seeds: int) -> None:
    from experiments.statistics import advice

    if seeds < MIN_RUNS:
        console.print(f"No difference tested: {_seeds(seeds)} a cell, fewer than {MIN_RUNS}.", soft_wrap=True)
        return
    top = ranked[0].cell
    console.print(f"\nThe top cell against each other (exact two-sided Mann-Whitney test, false discovery rate {Q:g} "
                  f"over the page's {len(compared)} comparisons):", soft_wrap=True)
    for item in ranked[1:]:
        words = []
        for metric in advice.RANKED_BY:
            row = advice.pair(compared, top, item.cell, metric)
            if row is None:
                continue
            verdict = "a difference" if row["difference"] else "no difference shown"
            words.append(f"{metric.removeprefix('whole run: ')}: {verdict} (p = {row['p']:.2g})")
        console.print(f"- {item.cell.label}: " + "; ".join(words), soft_wrap=True)
