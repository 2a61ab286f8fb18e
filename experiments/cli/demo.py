"""`rebalance-lab demo`: the lab in about three minutes.

The demo is a campaign, experiments/campaigns/demo.toml, run by the campaign executor
(experiments.campaign.execute) like any other: the herd swept through N = 4, 8, 16 and 32 inside one run per
backend (demo-herd-sweep, P fixed at 64: the largest size's 2N) and one split-brain scenario
(demo-split-brain), each on every backend its file names, under the identical schedule on each (a function
of the scenario file and the campaign's seed); `--backends` narrows that. The six runs go three at a time
(`--parallel`), each in a runner process of its own with its own ZooKeeper, broker, ports and chroot: the
three sweeps first (the longest), then the three split brains, so each scenario runs on every backend under
about the same load. On two cores they share the CPU, which stretches timings (stable-after, latencies) but
not what the herd table counts (requests and notifications per change) nor what the checks count. The same
`--out` again resumes: completed runs are kept.

Then one Spark pass summarises every run, one report is written into the campaign folder, and the command
ends with the herd table, its fitted cost model, the split-brain verdicts and the report's path.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from experiments.folders.campaign_folder import CampaignFolder
from rebalance.backends import backend_names

DEMO_CAMPAIGN = "demo"
SPLIT_BRAIN_SCENARIO = "demo-split-brain"


def register(app: typer.Typer) -> None:
    app.command()(demo)


def demo_campaign(backends: tuple[str, ...] | None = None):
    """The demo's campaign, its cells narrowed to `backends` when given."""
    from experiments.campaign import find_campaign, load_campaign

    campaign = load_campaign(find_campaign(DEMO_CAMPAIGN))
    if backends is None:
        return campaign
    return replace(campaign, cells=tuple(cell for cell in campaign.cells if cell.backend in backends))


def demo(
    out: Annotated[Path | None, typer.Option(help="The campaign folder for the runs and the report (default "
                                                  "runs/demo-<time>); a demo's folder again resumes it.")] = None,
    parallel: Annotated[int, typer.Option(help="Runs at a time (each has its own ZooKeeper and broker): three, "
                                               "each scenario on every backend at once.")] = 3,
    zk_provider: Annotated[str, typer.Option("--zk-provider", help="ZooKeeper provider: auto, docker or local.")] = "auto",
    master: Annotated[str, typer.Option(help="Spark master for the summary.")] = "local[*]",
    publish: Annotated[Path | None, typer.Option(help="Also copy the herd plot and the tables there (e.g. docs/demo).")] = None,
    backends: Annotated[str | None, typer.Option(help="Backends, comma-separated (default: those each scenario names; "
                                                      "every registered one where it names none).")] = None,
    no_progress: Annotated[bool, typer.Option("--no-progress", hidden=True, help="Accepted for older scripts.")] = False,
) -> None:
    """Herd sweep + split brain on each scenario's backends (the `demo` campaign), one Spark summary, the report."""
    from experiments.campaign import CampaignMismatch, completed_run_dirs, execute
    from experiments.campaign.manifest import FAILED
    from experiments.scenario import ScenarioError

    console = Console(highlight=False)
    if zk_provider not in ("auto", "docker", "local"):
        _fail(f"--zk-provider {zk_provider!r}: choose auto, docker or local")
    if parallel < 1:
        _fail(f"--parallel {parallel}: at least 1")
    chosen = tuple(name.strip() for name in backends.split(",") if name.strip()) if backends else None
    unknown = sorted(set(chosen or ()) - set(backend_names()))
    if unknown:
        _fail(f"--backends: unknown {', '.join(unknown)}; choose from {', '.join(backend_names())}")
    try:
        campaign = demo_campaign(chosen)
    except ScenarioError as error:
        _fail("; ".join(error.lines()))
    if not campaign.cells:
        _fail(f"--backends {backends}: no scenario of the demo runs there")

    started = time.monotonic()
    root = out or Path("runs") / f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    lines = ", ".join(dict.fromkeys(f"{cell.backend} ({cell.strategy})" for cell in campaign.cells
                                    if cell.scenario != SPLIT_BRAIN_SCENARIO))
    console.print(f"Rebalance Lab demo: split brain, and the herd swept through N = 4, 8, 16, 32 inside one run "
                  f"on each of {lines}, each under the identical schedule: {len(campaign.plan())} runs, {parallel} "
                  f"at a time into {root}", soft_wrap=True)
    if parallel > 1:
        console.print("(Parallel runs share the CPU: timings stretch; request and anomaly counts do not.)",
                      soft_wrap=True)
    spark = threading.Thread(target=_start_spark, args=(master,), daemon=True)
    spark.start()   # the JVM starts while the runs mostly wait on their timelines
    try:
        outcome = execute(campaign, root, parallel=parallel, zk_provider=zk_provider,
                          say=lambda line: console.print(f"  {line}", soft_wrap=True, markup=False))
    except CampaignMismatch as error:
        _fail(str(error))
    if outcome.interrupted:
        console.print(f"interrupted; what was recorded is in {root} (the same command with --out {root} "
                      "resumes it)", soft_wrap=True)
        raise typer.Exit(130)
    failed = [entry for entry in outcome.manifest.runs.values() if entry.status == FAILED]
    if failed:
        _fail("; ".join(f"{entry.run} failed ({entry.reason}); see {CampaignFolder(root).log(entry.run)}"
                        for entry in failed))
    runs_done = time.monotonic()

    console.print("summary: one Spark pass over every run ...", soft_wrap=True)
    spark.join()
    run_dirs = completed_run_dirs(root)
    report = _summarize_and_report(run_dirs, root, master)
    console.print(f"runs {runs_done - started:.0f} s, summary and report {time.monotonic() - runs_done:.0f} s",
                  soft_wrap=True)

    from experiments.report.run_tables import swept_runs
    from experiments.report.scenario_runs import reading_of
    from experiments.summary.read_back import herd_points, load_run
    from experiments.summary.verdict_words import print_verdicts

    runs = [load_run(run_dir) for run_dir in run_dirs]
    swept = swept_runs(runs)
    _print_herd(console, swept)
    split = {run.backend: {check: reading for check in run.verdicts.get("check", [])
                           if (reading := reading_of(run, check)) is not None}
             for run in sorted(runs, key=lambda run: run.backend) if run.name == SPLIT_BRAIN_SCENARIO}
    print_verdicts(console, "Split brain: one member crashed, another's coordination link cut past its session",
                   [(backend, list(readings.values())) for backend, readings in split.items()])
    if publish is not None:
        from experiments.report.demo_page import publish_demo

        for path in publish_demo(publish, report=report, points=herd_points(swept), split=split):
            console.print(f"published: {path}", soft_wrap=True)
    console.print(f"\nreport: {report.html}", soft_wrap=True)
    console.print(f"        {report.markdown}", soft_wrap=True)
    console.print(f"demo took {time.monotonic() - started:.0f} s", soft_wrap=True)


def _summarize_and_report(run_dirs: list[Path], root: Path, master: str):
    """Summarise the runs not yet summarised (a resumed demo keeps the rest), then one report of them all, the
    summary's steps printed as it goes (its longest wait otherwise passes in silence)."""
    from experiments.cli.step_lines import REPORT_STEPS, SUMMARY_STEPS, StepLines
    from experiments.stages import Stages

    with StepLines(f"summary and report of {len(run_dirs)} runs", {**SUMMARY_STEPS, **REPORT_STEPS}) as step:
        return Stages(master=master, step=step, progress=step.count).runs_report(run_dirs, root)


def _start_spark(master: str) -> None:
    """The summary's session, made early: `summarize` then finds it running (getOrCreate)."""
    from experiments.summary.session import start_spark

    with contextlib.suppress(Exception):   # the summary starts its own and reports the error then
        start_spark(master)


def _print_herd(console: Console, runs) -> None:
    """Per backend and N: what the join and the leave cost the group; then the fitted cost model, one line
    per backend. A table on a terminal; fixed-width plain lines in a pipe or a log (nothing cut or wrapped)."""
    from experiments.summary.herd_model import change_rows, fit_models

    title = ("Herd effect: cost of one member joining and one leaving a stable group of N (each backend's sizes "
             "in one run: n = 1)")
    rows = change_rows(runs)
    if rows.empty:
        console.print("herd: no membership change measured", soft_wrap=True)
        return
    header = ("backend", "strategy", "N", "P", "requests / join", "requests / leave", "members moved (join)",
              "last assignment after join (s)")
    cells = []
    for (backend, strategy, n, p), cell in rows.groupby(["backend", "strategy", "N", "P"], sort=True):
        joins, leaves = cell[cell["kind"] == "join"], cell[cell["kind"] == "leave"]
        cells.append((str(backend), str(strategy), str(n), str(p), _median_of(joins["requests"], "{:.0f}", joins),
                      _median_of(leaves["requests"], "{:.0f}", leaves), _median_of(joins["M"], "{:.0f}"),
                      _median_of(joins["last_assignment_s"], "{:.1f}")))
    if console.is_terminal:
        table = Table(title=title)
        for column in header:
            table.add_column(column, justify="left" if column in ("backend", "strategy") else "right")
        for row in cells:
            table.add_row(*row)
        console.print(table)
    else:
        widths = [max(len(row[i]) for row in (header, *cells)) for i in range(len(header))]
        lines = [title, "-" * len(title)]
        for row in (header, *cells):
            lines.append("  ".join(cell.ljust(width) if i < 2 else cell.rjust(width)
                                   for i, (cell, width) in enumerate(zip(row, widths, strict=True))))
        console.print("\n".join(lines), markup=False, highlight=False, soft_wrap=True)
    if rows["overlapped"].any():
        console.print("*: the change overlapped another (the next began before it was stable); the model leaves "
                      "it out.", soft_wrap=True, markup=False)
    console.print("Fitted cost of a join, one per backend and strategy (least squares over the sizes above; "
                  "N members, P partitions, M members whose assignment changed):", soft_wrap=True)
    for model in fit_models(rows, kinds=("join",)):
        console.print(f"  {model.sentence()}", soft_wrap=True, markup=False)


def _median_of(values, form: str, changes=None) -> str:
    """The median of what was measured, starred when one of `changes` overlapped another."""
    measured = values.dropna()
    if not len(measured):
        return "-"
    starred = changes is not None and bool(changes["overlapped"].any())
    return form.format(measured.median()) + ("*" if starred else "")


def _fail(message: str) -> None:
    Console(stderr=True).print(f"[red]error:[/red] {message}", soft_wrap=True)
    raise typer.Exit(2)
