"""`rebalance-lab summarize RUN_DIR...` and `rebalance-lab report RUN_DIR...`.

A campaign folder (it has manifest.json) stands for its completed runs; for it, `summarize` also writes
the cross-run statistics and `report` the campaign report with the spread of every figure."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from experiments.campaign import completed_run_dirs, is_campaign_dir
from experiments.cli.step_lines import StepLines
from experiments.folders.run_folder import RunFolder, runs_below
from experiments.scenario.model import LATENCY_LIMIT_MS

LATENCY_LIMIT_HELP = ("A record handled later than this counts among the records over the limit (seed 002 calls "
                      "them lost; the lost-records check counts only records never handled).")


def expand_run_dirs(paths: list[Path]) -> list[Path]:
    """Each path is a run directory (it has events/), or a folder of runs at any depth (a comparison, a demo)."""
    runs: list[Path] = []
    for path in paths:
        if not path.is_dir():
            raise typer.BadParameter(f"{path}: no such directory")
        if RunFolder(path).is_run():
            runs.append(path)
            continue
        if is_campaign_dir(path):
            runs.extend(completed_run_dirs(path))
            continue
        children = [run.path for run in runs_below(path)]
        if not children:
            raise typer.BadParameter(f"{path}: not a run directory (no events/) and holds no runs")
        runs.extend(children)
    return runs


def default_out(arguments: list[Path], runs: list[Path]) -> Path:
    """Where `report` writes without --out: one run's own folder; the folder given when it is a single
    folder of runs (a comparison, a demo); else a folder of its own named for the runs, beside them
    (`experiments.folders.report_folder.report_dir`). Never a parent that other reports share."""
    from experiments.folders.report_folder import report_dir

    if len(arguments) == 1 and arguments[0].is_dir() and not RunFolder(arguments[0]).is_run():
        return arguments[0]
    return report_dir(runs)


def _fail(message: str) -> None:
    Console(stderr=True).print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
    raise typer.Exit(2)


def _summarize(run_dirs: list[Path], master: str, latency_limit_ms: int, convergence_bound_s: float | None = None,
               *, again: bool) -> list:
    """The summary stage for the runs (experiments.stages), its steps printed as it goes."""
    from experiments.stages import Stages
    from experiments.summary.check_queries import CheckConfig

    checks = CheckConfig(latency_limit_ms=latency_limit_ms, convergence_bound_s=convergence_bound_s)
    with StepLines(f"summarising {len(run_dirs)} run{'s' if len(run_dirs) != 1 else ''}") as step:
        return Stages(master=master, checks=checks, step=step, progress=step.count).summarise(run_dirs, again=again)


def print_verdict_table(console: Console, summaries) -> None:
    """The checks of every summarised run in words (experiments.summary.verdict_words), one column per run."""
    from experiments.summary.verdict_words import print_verdicts, read_result

    columns = [(f"{summary.record.name} {summary.record.backend}/{summary.record.strategy}",
                [read_result(check) for check in summary.checks]) for summary in summaries]
    print_verdicts(console, "Checks", columns)


def register(app: typer.Typer) -> None:
    @app.command()
    def summarize(
        run_dirs: Annotated[list[Path], typer.Argument(help="Run directories (or folders of runs).")],
        master: Annotated[str, typer.Option(help="Spark master URL, e.g. local[2] or spark://host:7077.")] = "local[*]",
        latency_limit_ms: Annotated[int, typer.Option(help=LATENCY_LIMIT_HELP)] = LATENCY_LIMIT_MS,
        convergence_bound_s: Annotated[float | None, typer.Option(help="Default: 2 x session timeout + 5 s.")] = None,
    ) -> None:
        """Check runs for anomalies with Spark; write RUN_DIR/summary/ (Parquet + Markdown)."""
        try:
            runs = expand_run_dirs(run_dirs)
            summaries = _summarize(runs, master, latency_limit_ms, convergence_bound_s, again=True)
        except (typer.BadParameter, FileNotFoundError, ValueError) as error:
            _fail(str(error))
        console = Console()
        print_verdict_table(console, summaries)
        for summary in summaries:
            console.print(f"summary: {summary.folder.summary_markdown}", soft_wrap=True)
        for folder in filter(is_campaign_dir, run_dirs):
            from experiments.stages import Stages

            console.print(f"statistics: {Stages(master=master).campaign_statistics(folder)}", soft_wrap=True)

    @app.command()
    def report(
        run_dirs: Annotated[list[Path], typer.Argument(help="Run directories (or folders of runs), side by side.")],
        out: Annotated[Path | None, typer.Option(help="Where to write. Default: one run's own folder; the folder "
                                                     "given, when it is one folder of runs; for several, a folder "
                                                     "of their own beside them, named for them "
                                                     "(e.g. runs/report-herd-5+herd-10).")] = None,
        master: Annotated[str, typer.Option(help="Spark master for runs not yet summarised.")] = "local[*]",
        resummarize: Annotated[bool, typer.Option(help="Summarise again even if RUN_DIR/summary exists.")] = False,
        latency_limit_ms: Annotated[int, typer.Option(help=LATENCY_LIMIT_HELP + " Applies to runs summarised now.")] = LATENCY_LIMIT_MS,
    ) -> None:
        """Write report.html, report.md and PNG charts for one or several runs."""
        from experiments.stages import Stages

        try:
            runs = expand_run_dirs(run_dirs)
            summaries = _summarize(runs, master, latency_limit_ms, again=resummarize)
            if summaries:
                print_verdict_table(Console(), summaries)
            stages = Stages(master=master)
            if len(run_dirs) == 1 and is_campaign_dir(run_dirs[0]):
                result = stages.campaign_report(run_dirs[0])
            else:
                result = stages.runs_report(runs, out or default_out(run_dirs, runs))
        except (typer.BadParameter, FileNotFoundError, ValueError) as error:
            _fail(str(error))
        console = Console(soft_wrap=True)
        console.print(f"report: {result.html}")
        console.print(f"        {result.markdown}")
        for image in result.images:
            console.print(f"        {image}")
