"""`rebalance-lab fuzz wire|scenario|hostile`: the lab's own inputs under a fuzzer.

    fuzz wire --seconds N        coverage-guided (libFuzzer through atheris): request frames through the
                                 broker's dispatch, seeded with recorded real-client frames
    fuzz scenario --seconds N    the same for scenario files through the loader, seeded with the shipped ones
    fuzz hostile --bootstrap HOST:PORT --seconds N
                                 well-formed requests with hostile values against a running broker, the
                                 coordinator's invariants checked after every batch

Each exits 1 when something failed: for wire and scenario the failing input is a file in the run's
`failures/` folder (`--replay FILE` runs it again); for hostile the broken checks are printed and
written to the report.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from experiments.fuzz import libfuzzer
from rebalance.command_line import command

fuzz_app = typer.Typer(help="Fuzz the broker's requests, the scenario loader, or a running broker's coordinator.",
                       no_args_is_help=True)

Seconds = Annotated[int, typer.Option("--seconds", min=1, help="How long to fuzz.")]
Runs = Annotated[int | None, typer.Option("--runs", min=1, help="Stop after this many inputs (whichever comes first).")]
Out = Annotated[Path | None, typer.Option("--out", help="Run folder (default runs/fuzz/TARGET-TIME).")]
Replay = Annotated[list[Path] | None, typer.Option("--replay", help="Run these inputs once each, nothing else.")]


def register(app: typer.Typer) -> None:
    app.add_typer(fuzz_app, name="fuzz")


@fuzz_app.command("wire")
def wire_command(seconds: Seconds = 60, runs: Runs = None, out: Out = None, replay: Replay = None) -> None:
    """Request frames (size-prefixed, several per input) through the broker's dispatch and the coordinator."""
    _run_target("wire", seconds, runs, out, replay)


@fuzz_app.command("scenario")
def scenario_command(seconds: Seconds = 60, runs: Runs = None, out: Out = None, replay: Replay = None) -> None:
    """Scenario files through the loader: a checked scenario or a ScenarioError, nothing else."""
    _run_target("scenario", seconds, runs, out, replay)


def _run_target(target: str, seconds: int, runs: int | None, out: Path | None, replay: list[Path] | None) -> None:
    folder = out or libfuzzer.default_out(target)
    typer.echo(f"fuzz {target}: {folder}")
    result = libfuzzer.run(target, folder, seconds=None if replay else seconds, runs=runs, replay=replay)
    rate = result.runs / result.seconds if result.seconds else 0.0
    typer.echo(f"{result.runs:,} inputs in {result.seconds:.0f} s ({rate:,.0f}/s); log {result.log}")
    if result.ok:
        typer.echo("no failure")
        return
    for path in result.failures:
        typer.echo(f"FAILED: {path} (replay: {command(f'fuzz {target} --replay {path}')})")
    if not result.failures:
        typer.echo(f"FAILED: libFuzzer exited {result.exit_code}; see the log")
    raise typer.Exit(1)


@fuzz_app.command("hostile")
def hostile_command(
    bootstrap: Annotated[str, typer.Option("--bootstrap", help="HOST:PORT of the broker to test.")],
    seconds: Seconds = 60,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Requests between two checks.")] = 12,
    answer_limit: Annotated[float, typer.Option("--answer-limit", help="Seconds an answer may take.")] = 1.0,
    pid: Annotated[int | None, typer.Option("--pid", help="The broker's process, for its memory (found from the "
                                                          "port when it runs here).")] = None,
    report: Annotated[Path | None, typer.Option("--report", help="Write the figures and violations as JSON.")] = None,
) -> None:
    """Well-formed group requests with values no client sends, and the coordinator's invariants after each batch."""
    from experiments.fuzz.hostile import HostileReport, HostileRun
    from modern.client.connection import ConnectionFailed

    try:
        run = HostileRun(bootstrap, batch_size=batch_size, answer_limit_s=answer_limit, broker_pid=pid)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--bootstrap") from None

    def progress(so_far: HostileReport, elapsed: float) -> None:
        memory = f"; broker RSS {so_far.rss_mb[-1]:.0f} MB" if so_far.rss_mb else ""
        typer.echo(f"fuzz hostile: {elapsed / 60:.0f} of {seconds / 60:.0f} min, {sum(so_far.requests.values()):,} "
                   f"requests in {so_far.batches:,} batches, slowest answer {so_far.slowest_answer_s:.3f} s, "
                   f"{len(so_far.violations)} violations{memory}", err=True)

    try:
        outcome = run.run(seconds, on_progress=progress)
    except ConnectionFailed as error:
        if run.report.batches == 0:   # nothing tested: a usage error, not a finding
            typer.echo(f"fuzz hostile: no broker answers at {bootstrap} ({error}); start one first, e.g. "
                       + command(f"broker --port {run.port}"), err=True)
            raise typer.Exit(2) from None
        typer.echo(f"FAILED: the broker stopped answering after {run.report.batches:,} batches ({error})", err=True)
        raise typer.Exit(1) from None
    summary = outcome.summary()
    if report is not None:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    typer.echo(f"{summary['requests']:,} hostile requests in {summary['batches']:,} batches, {summary['seconds']} s; "
               f"slowest answer {summary['slowest_answer_s']} s; broker RSS {summary['rss_mb_first']} -> "
               f"{summary['rss_mb_max']} MB (first -> largest)")
    if outcome.ok:
        typer.echo("every invariant held")
        return
    for violation in outcome.violations[:20]:
        typer.echo(f"VIOLATED {violation['check']} (batch {violation['batch']}): {violation['detail']}")
    typer.echo(f"{len(outcome.violations)} violations: {summary['violations']}")
    raise typer.Exit(1)
