"""`rebalance-lab campaign FILE --out DIR` and `rebalance-lab campaigns`: repeated runs with their spread."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from experiments.folders.campaign_folder import CampaignFolder
from experiments.scenario import ScenarioError
from rebalance.command_line import command


def register(app: typer.Typer) -> None:
    app.command("campaign")(campaign_command)
    app.command("campaigns")(campaigns_command)
    app.command("results")(results_command)
    app.command("results-data")(results_data_command)
    app.command("results-withdraw")(results_withdraw_command)
    app.command("power")(power_command)
    app.command("looks")(looks_command)
    app.command("claims-change")(claims_change_command)


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def campaign_command(
    file: Annotated[str, typer.Argument(help="A campaign file, or the name of a built-in one (see `campaigns`).")],
    out: Annotated[Path | None, typer.Option("--out", help="Campaign folder (default runs/<campaign>-<time>); "
                                                           "a folder of the same campaign file is resumed, any "
                                                           "other non-empty folder refused.")] = None,
    parallel: Annotated[int, typer.Option(help="Runs at once (each with its own ZooKeeper and brokers); "
                                               "above 1 on 2 cores, timings stretch.")] = 1,
    zk_provider: Annotated[str, typer.Option("--zk-provider", help="auto, docker or local.")] = "auto",
    master: Annotated[str, typer.Option(help="Spark master for the summary, e.g. local[2] or spark://h:7077.")] = "local[*]",
    summarize: Annotated[bool, typer.Option(help="Summarise and report when the runs are done.")] = True,
    check: Annotated[bool, typer.Option("--check", help="Validate the campaign and print its plan; run nothing.")] = False,
    allow_mixed_commits: Annotated[bool, typer.Option(
        "--allow-mixed-commits", help="Resume a folder whose runs another commit made (the pages say so).")] = False,
    data: Annotated[Path | None, typer.Option(
        "--data", help="A results-data folder (docs/results-data/NAME) that carries the campaign across parts: "
                       "its runs are left out, and this part's runs are added to it when it stops.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Run cells larger than this machine's measured capacity "
                                                        f"({command('doctor --capacity')}).")] = False,
) -> None:
    """Run every cell of a campaign `repetitions` times (interleaved, recorded seeds), then summarise all runs
    in one Spark pass and write statistics (n, median, min-max, interval of the median) and a report."""
    from experiments.campaign import CampaignMismatch, execute, find_campaign, is_campaign_dir, load_campaign

    if parallel < 1:
        _fail(f"--parallel {parallel}: at least 1")
    if zk_provider not in ("auto", "docker", "local"):
        _fail(f"--zk-provider {zk_provider!r}: choose auto, docker or local")
    try:
        campaign = load_campaign(find_campaign(file))
    except ScenarioError as error:
        for line in error.lines():
            typer.echo(f"error: {line}", err=True)
        raise typer.Exit(2) from None
    if check:
        _print_plan(campaign)
        return
    _hold_against_capacity(campaign, force=force)
    recorded: frozenset[str] = frozenset()
    if data is not None:
        from experiments.report.results_data import other_code, recorded_runs
        from experiments.run.provenance import git_commit
        try:
            recorded = recorded_runs(data, campaign.text)
        except ValueError as error:
            _fail(f"--data {error}")
        if (others := other_code(data, git_commit())) and not allow_mixed_commits:
            _fail(f"--data {data} holds runs of commit {', '.join(c[:12] for c in others)}, whose code differs from "
                  "this checkout's: run this part on that commit, or pass --allow-mixed-commits (the page says so)")
    folder = out or Path("runs") / f"{campaign.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        outcome = execute(campaign, folder, parallel=parallel, zk_provider=zk_provider,
                          say=lambda line: typer.echo(line, err=True), allow_mixed_commits=allow_mixed_commits,
                          recorded=recorded)
    except CampaignMismatch as error:   # refused before any run started
        resumable = "" if is_campaign_dir(folder) else " (--out resumes only a folder a campaign made)"
        _fail(f"{error}{resumable}")
    counts = outcome.counts
    if data is not None and counts.get("completed"):
        _add_to_data(folder, data, master, allow_mixed_commits)
    typer.echo(f"campaign folder: {folder} ({counts.get('completed', 0)} completed, "
               f"{counts.get('failed', 0)} failed, {counts.get('interrupted', 0)} interrupted)")
    if outcome.interrupted:
        also = f" --data {data}" if data is not None else ""
        typer.echo(f"stopped; run the same command again to resume: {command(f'campaign {file} --out {folder}')}"
                   f"{also}", err=True)
        raise typer.Exit(130)
    if summarize and counts.get("completed"):
        report = summarize_campaign(folder, master)
        typer.echo(f"statistics: {CampaignFolder(folder).statistics_markdown}")
        typer.echo(f"report: {report.html}")
    if counts.get("failed"):
        raise typer.Exit(1)


def _hold_against_capacity(campaign, *, force: bool) -> None:
    """Every cell's scenario against this machine's measured capacity, before any run starts."""
    from experiments.run.capacity import check
    from experiments.scenario import load

    warnings = {}
    for cell in campaign.cells:
        scenario = load(cell.scenario_path, overrides=cell.overrides(campaign.seed))
        if (warning := check(scenario, cell.backend)) is not None:
            warnings.setdefault(warning, []).append(cell.key)
    for warning, cells in warnings.items():
        where = f" (cells {', '.join(cells)})"
        if not force:
            _fail(f"{warning}{where}. Run it anyway with --force, or measure again: {command('doctor --capacity')}")
        typer.echo(f"warning: {warning}{where} (--force: running anyway)", err=True)


def _add_to_data(folder: Path, data: Path, master: str, allow_mixed_commits: bool) -> None:
    """Summarise this part's runs and add them to the data folder, even when the campaign was stopped:
    what the part recorded is kept."""
    from experiments.campaign import completed_run_dirs
    from experiments.report.results_data import merge

    _stages(master).summarise(completed_run_dirs(folder))
    try:
        held, added = merge(folder, data, allow_mixed_commits=allow_mixed_commits)
    except ValueError as error:
        _fail(f"--data {error}; this part's runs stay in {folder}")
    typer.echo(f"{data}: {added} runs added, {held.info['runs_completed']} of {held.info['runs_planned']} "
               "runs recorded", err=True)


def summarize_campaign(folder: Path, master: str = "local[*]"):
    """Summarise every completed run not yet summarised (one Spark session), then statistics and report."""
    return _stages(master).campaign_report(folder)


def _stages(master: str):
    from experiments.stages import Stages

    return Stages(master=master, step=lambda text: typer.echo(f"after the runs: {text}", err=True))


def _print_plan(campaign) -> None:
    most = max(cell.repetitions for cell in campaign.cells)
    table = Table("cell", "scenario", "backend", "strategy", "sweep", "runs", title=f"campaign {campaign.name}: "
                  f"{len(campaign.cells)} cells, {len(campaign.plan())} runs (seeds {campaign.seed}.."
                  f"{campaign.seed + most - 1})")
    for cell in campaign.cells:
        table.add_row(cell.key, cell.scenario, cell.backend, cell.strategy,
                      ", ".join(f"{k}={v}" for k, v in cell.sweep) or "-", str(cell.repetitions))
    Console(width=200).print(table)


def campaigns_command() -> None:
    """List the built-in campaign files."""
    from experiments.campaign import builtin_names, find_campaign, load_campaign

    table = Table("name", "cells", "repetitions", "runs", "description")
    for name in builtin_names():
        try:
            campaign = load_campaign(find_campaign(name))
        except ScenarioError as error:
            table.add_row(name, "-", "-", "-", f"invalid: {error.problems[0].message}")
            continue
        counts = sorted({cell.repetitions for cell in campaign.cells})
        table.add_row(name, str(len(campaign.cells)), "-".join(map(str, sorted({counts[0], counts[-1]}))),
                      str(len(campaign.plan())), campaign.description)
    Console(width=200).print(table)


def results_command(
    folders: Annotated[list[Path], typer.Argument(
        help="Data folders (docs/results-data/NAME, written by `results-data`) or campaign folders, pooled run "
             "by run.")],
    out: Annotated[Path | None, typer.Option("--out", help="Write here instead of standard output.")] = None,
    master: Annotated[str, typer.Option(help="Spark master for runs not yet summarised.")] = "local[*]",
    notes: Annotated[Path | None, typer.Option(
        "--notes", help="A Markdown file of readings placed after the header (docs/results-readings.md).")] = None,
    figures: Annotated[Path | None, typer.Option(
        "--figures", help="Also draw each campaign's figures (herd, utilisation, strip plots) into DIR/<campaign>/.")] = None,
    looks: Annotated[Path | None, typer.Option(
        "--looks", help="The ledger of every look at a declared claim (docs/results-data/looks.csv).")] = None,
) -> None:
    """The results page (Markdown, every figure as median \\[min-max], n) from data folders or campaign
    folders; the same data gives the same bytes."""
    from experiments.campaign import is_campaign_dir
    from experiments.report.results_data import is_data_dir
    from experiments.report.results_doc import results_markdown

    for folder in folders:
        if not is_data_dir(folder) and not is_campaign_dir(folder):
            _fail(f"{folder}: neither a data folder (runs.csv, campaign.json) nor a campaign folder (manifest.json)")
    for folder in folders:
        if not is_data_dir(folder) and not CampaignFolder(folder).is_summarised():
            summarize_campaign(folder, master)
    if notes is not None and not notes.is_file():
        _fail(f"{notes}: no such notes file")
    if looks is not None and not looks.is_file():
        _fail(f"{looks}: no such ledger of looks")
    text = results_markdown(folders, notes, looks)
    if figures is not None:
        _draw_results_figures(folders, figures)
    if out:
        out.write_text(text)
        typer.echo(f"wrote {out}", err=True)
    else:
        typer.echo(text, nl=False)


def _draw_results_figures(folders: list[Path], figures: Path) -> None:
    from experiments.report.campaign_report import draw_figures
    from experiments.report.results_data import read

    for folder in folders:
        data = read(folder)
        drawn = draw_figures(data.runs, figures / data.name)
        typer.echo(f"drew {len(drawn)} figure(s) in {figures / data.name}", err=True)


def results_data_command(
    folder: Annotated[Path, typer.Argument(help="A campaign folder whose runs are summarised.")],
    out: Annotated[Path, typer.Option("--out", help="The data folder to write (docs/results-data/NAME).")],
    master: Annotated[str, typer.Option(help="Spark master for runs not yet summarised.")] = "local[*]",
) -> None:
    """Export a campaign's per-run measures (runs.csv), its provenance (campaign.json) and its file
    (campaign.toml): the results page is made again from these alone."""
    from experiments.campaign import is_campaign_dir
    from experiments.report.results_data import export

    if not is_campaign_dir(folder):
        _fail(f"{folder}: not a campaign folder (no manifest.json)")
    if not CampaignFolder(folder).is_summarised():
        summarize_campaign(folder, master)
    data = export(folder, out)
    typer.echo(f"wrote {out}: {data.runs['run'].nunique()} runs, {len(data.runs)} measures", err=True)


def results_withdraw_command(
    data: Annotated[Path, typer.Argument(help="A data folder (docs/results-data/NAME).")],
    backend: Annotated[str, typer.Option("--backend", help="The backend whose runs are withdrawn.")],
    reason: Annotated[str, typer.Option("--reason", help="Why, as the results page will say it.")],
) -> None:
    """Withdraw one backend's runs from a data folder (its code changed what they measure): the campaign's next
    part with `--data` makes them again, and the page names how many runs of which commits were withdrawn, and
    why."""
    from experiments.report.results_data import is_data_dir, withdraw

    if not is_data_dir(data):
        _fail(f"{data}: not a data folder (runs.csv, campaign.json)")
    if not reason.strip():
        _fail("--reason is empty: the page must say why the runs were withdrawn")
    try:
        held, gone = withdraw(data, backend, reason.strip())
    except ValueError as error:
        _fail(str(error))
    typer.echo(f"{data}: {gone} runs of {backend} withdrawn, {held.info['runs_completed']} of "
               f"{held.info['runs_planned']} runs recorded; make them again with "
               f"{command(f'campaign {held.name} --out DIR --data {data}')}", err=True)


def looks_command(
    folders: Annotated[list[Path], typer.Argument(help="The data folders of the results page, as its command names them.")],
    looks: Annotated[Path, typer.Option("--looks", help="The ledger to add to (docs/results-data/looks.csv).")],
    date: Annotated[str, typer.Option("--date", help="The date of the looks, YYYY-MM-DD.")],
) -> None:
    """Add to the ledger of looks a row for each claim of the page whose current look (its runs, by the
    claims' current test) it lacks, with the p and verdict the page gives it."""
    from experiments.report.results_doc import append_looks

    added = append_looks(folders, looks, date)
    for look in added:
        typer.echo(f"{look.campaign}: {look.claim}: {look.verdict} (p = {look.p:.2g}, {look.n})")
    typer.echo(f"added {len(added)} look(s) to {looks}", err=True)


def claims_change_command(
    before: Annotated[list[Path], typer.Option(
        "--before", help="The data folders of the earlier page (repeat the option for each).")],
    after: Annotated[list[Path], typer.Option(
        "--after", help="The data folders of the new page (repeat the option for each).")],
    looks: Annotated[Path | None, typer.Option(
        "--looks", help="The ledger of looks both pages count (docs/results-data/looks.csv).")] = None,
) -> None:
    """Each declared claim before and after new data: verdict, p and Holm's p as each page gives them, and the
    weakest pair's two cells as median \\[min-max], n (Markdown)."""
    from experiments.report.claims_change import claims_change_markdown
    from experiments.report.results_data import is_data_dir

    for folder in (*before, *after):
        if not is_data_dir(folder):
            _fail(f"{folder}: not a data folder (runs.csv, campaign.json)")
    if looks is not None and not looks.is_file():
        _fail(f"{looks}: no such ledger of looks")
    typer.echo(claims_change_markdown(before, after, looks), nl=False)


def power_command(
    file: Annotated[str, typer.Argument(help="A campaign file, or the name of a built-in one.")],
) -> None:
    """The runs a cell needs to detect each shift the campaign file declares (`\\[\\[detect]]`) 80% of the time,
    by simulation with the lab's own test."""
    from experiments.campaign import find_campaign, load_campaign
    from experiments.campaign.model import declared_detections
    from experiments.statistics.power import power_line

    try:
        campaign = load_campaign(find_campaign(file))
        detections = declared_detections(campaign.text)
    except ScenarioError as error:
        _fail("\n".join(error.lines()))
    except ValueError as error:
        _fail(f"{file}: {error}")
    if not detections:
        typer.echo(f"{campaign.name} declares no shift to detect ([[detect]] metric, shift, sd)")
        return
    for detect in detections:
        runs = [cell.repetitions for cell in campaign.cells if detect.scenario in (None, cell.scenario)]
        typer.echo(power_line(detect, len(campaign.claims), min(runs) if runs else None))
