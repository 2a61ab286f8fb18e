"""`rebalance-lab doctor`: can this machine run the lab, and how much of it?

Without options: the machine index (how fast it is now), then what a run needs: Java, ZooKeeper (jars or a
Docker image), free ports, disk space, PySpark; and the capacity measured earlier, if any. With `--capacity`,
the capacity itself: the `capacity` scenario at growing group sizes on each backend (a few minutes a
backend), kept in .lab/capacity.json, which `run` and `campaign` then hold every scenario against.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from rebalance.backends import backend_names, canonical_name
from rebalance.command_line import command

console = Console(highlight=False)
MIN_FREE_BYTES = 2 * 1024 ** 3     # a campaign's runs take tens of megabytes each; Spark spills to /tmp too


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor_command)


def doctor_command(
    capacity: Annotated[bool, typer.Option("--capacity", help="Measure what this machine carries (minutes): the "
                                                                "capacity scenario at growing sizes, per backend.")] = False,
    backend: Annotated[list[str] | None, typer.Option(help="Backends to measure (repeatable; default all).")] = None,
    sizes: Annotated[str, typer.Option(help="Group sizes to try, in order, comma-separated.")] = "50,100,200,400",
    out: Annotated[Path, typer.Option(help="Where the probe's runs go.")] = Path("runs"),
) -> None:
    """Check what a run needs and print the machine index; with --capacity, measure what this machine carries."""
    from experiments.run import capacity as capacity_store
    from experiments.run.machine import measure

    try:
        ladder = tuple(int(size) for size in sizes.split(","))
        if not ladder or min(ladder) < 2:
            raise ValueError
    except ValueError:
        typer.echo(f"error: --sizes {sizes!r}: expected group sizes of 2 or more, e.g. 50,100,200", err=True)
        raise typer.Exit(2) from None
    chosen = [canonical_name(name) for name in backend or backend_names()]
    unknown = [name for name in chosen if name not in backend_names()]
    if unknown:
        typer.echo(f"error: --backend {unknown[0]!r}: choose from {', '.join(backend_names())}", err=True)
        raise typer.Exit(2)
    console.print("measuring the machine index (about 15 s) ...")
    index = measure()
    console.print(index.line())
    table = Table("need", "state", "detail", title="what a run needs")
    failed = False
    for name, ok, detail in _needs(out):
        table.add_row(name, "[green]ok[/green]" if ok else "[bold red]missing[/bold red]", detail)
        failed |= not ok
    console.print(table)
    if capacity:
        if failed:
            typer.echo("error: a run needs what is missing above; ./lab setup installs it", err=True)
            raise typer.Exit(1)
        _measure_capacity(chosen, ladder, out, index)
    _print_capacity(capacity_store.read())
    if failed:
        raise typer.Exit(1)


def _needs(out: Path) -> list[tuple[str, bool, str]]:
    found = []
    java = shutil.which("java")
    version = ""
    if java:
        answer = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
        version = (answer.stderr or answer.stdout).splitlines()[0] if (answer.stderr or answer.stdout) else ""
    found.append(("Java", bool(java), version or "not on PATH (apt-get install openjdk-17-jre-headless)"))
    found.append(_zookeeper())
    found.append(_ports())
    target = out if out.exists() else Path(".")
    free = shutil.disk_usage(target).free
    found.append(("disk", free >= MIN_FREE_BYTES, f"{free / 1024 ** 3:.1f} GiB free under {target.resolve()} "
                                                  f"(a campaign wants {MIN_FREE_BYTES / 1024 ** 3:.0f} GiB)"))
    try:
        import pyspark
        found.append(("PySpark", True, f"{pyspark.__version__} (the summary)"))
    except ImportError:
        found.append(("PySpark", False, "not installed (./lab setup)"))
    return found


def _zookeeper() -> tuple[str, bool, str]:
    from zkensemble import ZkEnsembleError, choose_provider, docker_provider, local_provider

    try:
        provider = choose_provider("auto")
    except ZkEnsembleError as error:
        return "ZooKeeper", False, str(error)
    ways = [name for name, available in (("docker image", docker_provider.available()),
                                          ("local jars", local_provider.available())) if available]
    return "ZooKeeper", True, f"runs as {provider.value} ({', '.join(ways)} available)"


def _ports() -> tuple[str, bool, str]:
    """Runs take free ports from the kernel; the labs' hand-typed commands use 2181 and 9092."""
    taken = []
    for port in (2181, 9092):
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                taken.append(port)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    detail = f"free ports from the kernel (e.g. {free})" + (
        f"; {', '.join(map(str, taken))} taken: the labs' commands name them (a run does not)" if taken else "")
    return "ports", True, detail


def _measure_capacity(backends: list[str], sizes: tuple[int, ...], out: Path, index) -> None:
    from experiments.folders.run_folder import RunFolder
    from experiments.run import capacity as capacity_store
    from experiments.run import runner
    from experiments.run.conditions import Conditions
    from experiments.run.provenance import git_commit
    from experiments.scenario import load

    folder = out / f"capacity-{time.strftime('%Y%m%d-%H%M%S')}"
    console.print(f"capacity probe: {', '.join(backends)} at {', '.join(map(str, sizes))} members "
                  f"(each run about 1.5-3 min; a backend's sweep stops at its first size not ok); runs in {folder}")

    def run_one(backend: str, size: int) -> dict:
        scenario = load(capacity_store.SCENARIO, overrides=[f"group.members={size // 2}", f"timeline.grow.to={size}",
                                                            f'backends=["{backend}"]'])
        started = time.monotonic()
        run_dir = folder / f"{backend}-{size}"
        result = runner.run(scenario, runner.RunOptions(backend=backend, run_dir=run_dir, progress=False))
        wall = time.monotonic() - started
        if result.status != "completed":
            return {"grade": "invalid", "reason": f"the run {result.status}: {result.reason}", "wall_s": wall,
                    "run": str(run_dir)}
        import json
        conditions = Conditions.from_json(json.loads(RunFolder(run_dir).conditions.read_text()))
        return {"grade": conditions.grade.value, "reason": conditions.reason(), "wall_s": round(wall, 1),
                "figures": conditions.figures, "run": str(run_dir)}

    results = capacity_store.measure(backends, sizes, run_one, say=console.print)
    rate = load(capacity_store.SCENARIO).producer.rate
    capacity_store.store(results, rate=rate, machine=index.to_json(), machine_line=index.line(), commit=git_commit())


def _print_capacity(stored: dict | None) -> None:
    if not stored:
        console.print(f"capacity: not measured on this machine ({command('doctor --capacity')}, a few minutes a "
                      "backend); runs are not held against it until it is")
        return
    table = Table("backend", "carried", "first size not ok", "why", title=f"capacity ({stored.get('machine_line')}; "
                  f"{stored.get('rate')} records/s, a group doubling in one wave)")
    for backend, entry in sorted(stored.get("backends", {}).items()):
        table.add_row(backend, str(entry.get("carried") or "-"), str(entry.get("failed_at") or "-"),
                      entry.get("reason") or "")
    console.print(table)
