"""`rebalance-lab demo`: the lab in under four minutes.

Runs a herd sweep (N = 4, 8, 16 and 32 by default, two partitions per member) and one split-brain scenario, each on the backends its
scenario file names (demo-herd names none, so it runs on every registered backend; demo-split-brain
names legacy and modern) with the identical fault schedule on each (the schedule is a function of the
scenario file and its seed); `--backends` narrows or widens that. It summarises every run in one Spark pass, writes one report, and ends with the herd table, its
fitted cost model, the split-brain verdicts and the report's path.

Runs go two at a time (`--parallel`), each in a runner process of its own with its own ZooKeeper,
broker, ports and chroot: on two cores the pair shares the CPU, which stretches timings (stable-after,
latencies) but not what the herd table counts (requests and notifications per change) nor what the
checks count. The backends of one scenario are started one after the other at the head of the queue, so
they run under about the same load.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from experiments.scenario.model import on_backend
from rebalance.backends import backend_names

HERD_SCENARIO = "demo-herd"
SPLIT_BRAIN_SCENARIO = "demo-split-brain"


def register(app: typer.Typer) -> None:
    app.command()(demo)


@dataclass(frozen=True, kw_only=True)
class DemoRun:
    """One scenario on one backend, as a runner process."""

    label: str                  # the scenario's folder under the demo's, e.g. herd-8
    scenario: str
    backend: str
    overrides: tuple[str, ...]
    run_dir: Path

    def argv(self, zk_provider: str) -> list[str]:
        from experiments.cli.run import find_scenario

        argv = [sys.executable, "-m", "experiments.cli.app", "run", str(find_scenario(self.scenario)),
                "--backend", self.backend, "--out", str(self.run_dir), "--no-progress", "--zk-provider", zk_provider]
        for override in self.overrides:
            argv += ["--set", override]
        return argv


def plan_runs(root: Path, sizes: list[int], backends: tuple[str, ...] | None = None) -> list[DemoRun]:
    """Longest first, the backends of a scenario next to each other (so they start together). Each scenario
    runs on the backends its file names (every registered one when it names none), or on `backends`."""
    def on(scenario: str) -> tuple[str, ...]:
        return backends or scenario_backends(scenario)

    runs = [DemoRun(label="split-brain", scenario=SPLIT_BRAIN_SCENARIO, backend=backend, overrides=(),
                    run_dir=root / "split-brain" / backend) for backend in on(SPLIT_BRAIN_SCENARIO)]
    for size in sorted(sizes, reverse=True):
        runs += [DemoRun(label=f"herd-{size}", scenario=HERD_SCENARIO, backend=backend,
                         overrides=(f"group.members={size}",), run_dir=root / f"herd-{size}" / backend)
                 for backend in on(HERD_SCENARIO)]
    return runs


def scenario_backends(name: str) -> tuple[str, ...]:
    from experiments.cli.run import find_scenario
    from experiments.scenario import load

    return load(find_scenario(name)).backends


def demo(
    out: Annotated[Path | None, typer.Option(help="Where to put the runs and the report (default runs/demo-<time>).")] = None,
    sizes: Annotated[str, typer.Option(help="Group sizes of the herd sweep, comma-separated (four or more "
                                            "give a fitted cost model).")] = "4,8,16,32",
    parallel: Annotated[int, typer.Option(help="Runs at a time (each has its own ZooKeeper and broker).")] = 2,
    zk_provider: Annotated[str, typer.Option("--zk-provider", help="ZooKeeper provider: auto, docker or local.")] = "auto",
    master: Annotated[str, typer.Option(help="Spark master for the summary.")] = "local[*]",
    publish: Annotated[Path | None, typer.Option(help="Also copy the herd plot and the tables there (e.g. docs/demo).")] = None,
    backends: Annotated[str | None, typer.Option(help="Backends, comma-separated (default: those each scenario names; "
                                                      "every registered one where it names none).")] = None,
    no_progress: Annotated[bool, typer.Option("--no-progress", hidden=True, help="Accepted for older scripts.")] = False,
) -> None:
    """Herd sweep + split brain on each scenario's backends, one Spark summary, the report."""
    from experiments.cli.report import _summarize
    from experiments.cli.run import _load
    from experiments.report.run_report import write_report

    console = Console(highlight=False)
    try:
        group_sizes = sorted({int(size) for size in sizes.split(",") if size.strip()})
    except ValueError:
        _fail(f"--sizes {sizes!r}: expected comma-separated whole numbers, e.g. 8,16,32")
    if not group_sizes or min(group_sizes) < 2:
        _fail(f"--sizes {sizes!r}: every group needs at least 2 members")
    if zk_provider not in ("auto", "docker", "local"):
        _fail(f"--zk-provider {zk_provider!r}: choose auto, docker or local")
    if parallel < 1:
        _fail(f"--parallel {parallel}: at least 1")

    started = time.monotonic()
    root = out or Path("runs") / f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    chosen = tuple(name.strip() for name in backends.split(",") if name.strip()) if backends else None
    unknown = sorted(set(chosen or ()) - set(backend_names()))
    if unknown:
        _fail(f"--backends: unknown {', '.join(unknown)}; choose from {', '.join(backend_names())}")
    runs = plan_runs(root, group_sizes, chosen)
    strategies: dict[str, str] = {}   # the herd's strategy on each backend ("default": each generation's own)
    for run in runs:   # every scenario checked before anything starts
        loaded = _load(run.scenario, list(run.overrides), (run.backend,))
        if run.scenario == HERD_SCENARIO:
            strategies[run.backend] = on_backend(loaded, run.backend).group.strategy
    lines = ", ".join(f"{backend} ({strategy})" for backend, strategy in strategies.items())
    console.print(f"Rebalance Lab demo: split brain, and the herd at N = {', '.join(map(str, group_sizes))} on "
                  f"{lines}, each under the identical fault schedule: {len(runs)} runs, {parallel} at a "
                  f"time into {root}", soft_wrap=True)
    if parallel > 1:
        console.print("(Parallel runs share the CPU: timings stretch; request and anomaly counts do not.)",
                      soft_wrap=True)
    spark = threading.Thread(target=_start_spark, args=(master,), daemon=True)
    spark.start()   # the JVM starts while the runs mostly wait on their timelines
    failed = _execute(runs, parallel, zk_provider, root, console)
    if failed:
        _fail(failed)
    runs_done = time.monotonic()

    console.print("summary: one Spark pass over every run ...", soft_wrap=True)
    spark.join()
    run_dirs = [run.run_dir for run in runs]
    summaries = _summarize(run_dirs, master, 3000, None)
    report = write_report(run_dirs, root)
    console.print(f"runs {runs_done - started:.0f} s, summary and report {time.monotonic() - runs_done:.0f} s",
                  soft_wrap=True)

    from experiments.report.run_report import swept_runs
    from experiments.summary.rundata import herd_points, load_run
    from experiments.summary.verdicts import print_verdicts, read_result

    swept = swept_runs([load_run(run_dir) for run_dir in run_dirs])
    points = herd_points(swept)
    _print_herd(console, swept)
    split = sorted((s for s in summaries if s.info.name == SPLIT_BRAIN_SCENARIO), key=lambda s: s.info.backend)
    print_verdicts(console, "Split brain: one member crashed, another's coordination link cut past its session",
                   [(s.info.backend, [read_result(check) for check in s.checks]) for s in split])
    if publish is not None:
        from experiments.report.demo_page import publish_demo

        for path in publish_demo(publish, report=report, points=points, split=split):
            console.print(f"published: {path}", soft_wrap=True)
    console.print(f"\nreport: {report.html}", soft_wrap=True)
    console.print(f"        {report.markdown}", soft_wrap=True)
    console.print(f"demo took {time.monotonic() - started:.0f} s", soft_wrap=True)


def _start_spark(master: str) -> None:
    """The summary's session, made early: `summarize` then finds it running (getOrCreate)."""
    from experiments.summary.session import start_spark

    with contextlib.suppress(Exception):   # the summary starts its own and reports the error then
        start_spark(master)


def _execute(runs: list[DemoRun], parallel: int, zk_provider: str, root: Path, console: Console) -> str:
    """Every run, `parallel` at a time; '' when all completed, else what went wrong. Ctrl-C stops them all."""
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()
    children: dict[str, subprocess.Popen] = {}
    stopping = threading.Event()
    problems: list[str] = []

    def run_one(run: DemoRun) -> None:
        if stopping.is_set():
            return
        name = f"{run.label}/{run.backend}"
        if run.run_dir.exists():
            shutil.rmtree(run.run_dir)
        began = time.monotonic()
        log = logs / f"{run.label}-{run.backend}.log"
        from experiments.faults.process import _die_with_parent

        with open(log, "wb") as output:
            child = subprocess.Popen(run.argv(zk_provider), stdin=subprocess.DEVNULL, stdout=output,
                                     stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
            with lock:
                children[name] = child
            code = child.wait()
        with lock:
            children.pop(name, None)
            if code != 0 and not stopping.is_set():
                problems.append(f"{name} ended with exit code {code}; see {log}")
            status = "completed" if code == 0 else "stopped" if stopping.is_set() else "FAILED"
            console.print(f"  {name}: {status} in {time.monotonic() - began:.0f} s", soft_wrap=True)

    def stop(*_: object) -> None:
        stopping.set()
        with lock:
            for child in children.values():
                with contextlib.suppress(ProcessLookupError):
                    child.send_signal(signal.SIGTERM)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            for future in [pool.submit(run_one, run) for run in runs]:
                future.result()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stopping.is_set():
        console.print(f"interrupted; what was recorded is in {root}", soft_wrap=True)
        raise typer.Exit(130)
    return "; ".join(problems)


def _print_herd(console: Console, runs) -> None:
    """Per backend and N: what the join and the leave cost the group; then the fitted cost model, one line
    per backend. A table on a terminal; fixed-width plain lines in a pipe or a log (nothing cut or wrapped)."""
    from experiments.summary.herd_model import change_rows, fit_models

    title = "Herd effect: cost of one member joining and one leaving a stable group of N (one run each: n = 1)"
    rows = change_rows(runs)
    if rows.empty:
        console.print("herd: no membership change measured", soft_wrap=True)
        return
    header = ("backend", "strategy", "N", "P", "requests / join", "requests / leave", "members moved (join)",
              "stable after join (s)")
    cells = []
    for (backend, strategy, n, p), cell in rows.groupby(["backend", "strategy", "N", "P"], sort=True):
        joins, leaves = cell[cell["kind"] == "join"], cell[cell["kind"] == "leave"]
        cells.append((str(backend), str(strategy), str(n), str(p), _median_of(joins["requests"], "{:.0f}", joins),
                      _median_of(leaves["requests"], "{:.0f}", leaves), _median_of(joins["M"], "{:.0f}"),
                      _median_of(joins["stable_s"], "{:.1f}")))
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
