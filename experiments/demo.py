"""`rebalance-lab demo`: the lab in a few minutes.

Runs a small herd sweep and one split-brain scenario on both rebalancers with identical
schedules, summarises every run with Spark, writes one report, and ends with the
report's path and the verdicts that tell the two rebalancers apart.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

HERD_SCENARIO = "demo-herd"
SPLIT_BRAIN_SCENARIO = "demo-split-brain"

# The checks a newcomer should read first, in the order the story goes.
HEADLINE_CHECKS = ("double-ownership", "duplicates", "offset-regressions", "fenced-commits", "lost-records",
                   "convergence")


def register(app: typer.Typer) -> None:
    app.command()(demo)


def demo(
    out: Annotated[Path | None, typer.Option(help="Where to put the runs and the report (default runs/demo-<time>).")] = None,
    sizes: Annotated[str, typer.Option(help="Group sizes of the herd sweep, comma-separated.")] = "3,6",
    zk_provider: Annotated[str, typer.Option("--zk-provider", help="ZooKeeper provider: auto, docker or local.")] = "auto",
    master: Annotated[str, typer.Option(help="Spark master for the summary.")] = "local[*]",
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No live display during the runs.")] = False,
) -> None:
    """A few-minute comparison of both rebalancers: herd sweep + split brain, then the report."""
    from experiments import runner
    from experiments.report import write_report
    from experiments.report_cli import _summarize
    from experiments.run_cli import _load

    console = Console()
    try:
        group_sizes = sorted({int(size) for size in sizes.split(",") if size.strip()})
    except ValueError:
        _fail(f"--sizes {sizes!r}: expected comma-separated whole numbers, e.g. 3,6")
    if not group_sizes or min(group_sizes) < 2:
        _fail(f"--sizes {sizes!r}: every group needs at least 2 members")
    if zk_provider not in ("auto", "docker", "local"):
        _fail(f"--zk-provider {zk_provider!r}: choose auto, docker or local")

    root = out or Path("runs") / f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    plan = [(f"herd-{n}", _load(HERD_SCENARIO, [f"group.members={n}"])) for n in group_sizes]
    plan.append(("split-brain", _load(SPLIT_BRAIN_SCENARIO, None)))
    console.print(f"[bold]Rebalance Lab demo[/bold]: {len(plan)} scenarios x 2 rebalancers into {root}")

    run_dirs: list[Path] = []
    for index, (label, scenario) in enumerate(plan, 1):
        console.rule(f"[{index}/{len(plan)}] {label}: {scenario.description}")
        results = runner.compare(scenario, root / label, zk_provider=zk_provider, progress=not no_progress)
        for result in results:
            if result.status == "interrupted":
                console.print(f"interrupted; what was recorded is in {root}")
                raise typer.Exit(130)
            if result.status != "completed":
                _fail(f"{label} on {result.run_dir.name}: {result.status} ({result.reason}); see {result.run_dir}/logs")
            run_dirs.append(result.run_dir)

    console.rule("summary (Spark)")
    summaries = _summarize(run_dirs, master, 3000, None)
    report = write_report(run_dirs, root)

    console.print(_herd_table(summaries))
    console.print(_split_brain_table([s for s in summaries if s.info.name == SPLIT_BRAIN_SCENARIO]))
    console.print(f"\nreport: [bold]{report.html}[/bold]", soft_wrap=True)
    console.print(f"        {report.markdown}", soft_wrap=True)


def _herd_table(summaries) -> Table:
    """Per join or leave: what one membership change cost the group, by backend and N."""
    table = Table(title="Herd effect: cost of one membership change")
    for column in ("backend", "N", "changes", "requests / change", "notifications / change", "stable after (s)"):
        table.add_column(column, justify="right" if column != "backend" else "left")
    rows = []
    for summary in summaries:
        if summary.info.name != HERD_SCENARIO:
            continue
        herd = summary.tables.get("herd")
        size = summary.info.members
        if herd is None or herd.empty or not size:
            continue
        changes = herd[(herd["live_before"] >= size) & (herd["live_after"] > 0)]
        if changes.empty:
            continue
        rows.append((summary.info.backend, size, len(changes), changes["requests"].mean(),
                     changes["notifications"].mean(), changes["stable_s"].mean()))
    for backend, size, count, requests, notes, stable in sorted(rows):
        table.add_row(backend, str(size), str(count), f"{requests:.0f}", f"{notes:.0f}", f"{stable:.2f}")
    return table


def _split_brain_table(summaries) -> Table:
    table = Table(title="Split brain: one member's coordination link cut past its session timeout")
    table.add_column("check")
    for summary in summaries:
        table.add_column(summary.info.backend)
    for name in HEADLINE_CHECKS:
        cells = []
        for summary in summaries:
            check = next((c for c in summary.checks if c.check == name), None)
            if check is None:
                cells.append("-")
                continue
            style = {"true": "green", "false": "bold red"}.get(check.verdict.value, "yellow")
            cells.append(f"[{style}]{check.verdict.value}[/{style}] [dim]{check.detail}[/dim]")
        table.add_row(name, *cells)
    return table


def _fail(message: str) -> None:
    Console(stderr=True).print(f"[red]error:[/red] {message}", soft_wrap=True)
    raise typer.Exit(2)
