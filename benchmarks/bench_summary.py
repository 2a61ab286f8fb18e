"""Benchmark: the Spark summary, of one large synthetic run or of many small ones.

    .venv/bin/python benchmarks/bench_summary.py [--events 10000000] [--master local[2]] [--dir runs/bench-summary]
    .venv/bin/python benchmarks/bench_summary.py --runs 6 --shape demo [--repeat 3] [--master local[2]]
    .venv/bin/python benchmarks/bench_summary.py --runs 100 --shape herd [--repeat 3]
    .venv/bin/python benchmarks/bench_summary.py --runs 6 --shape demo --compare [--repeat 3]
    .venv/bin/python benchmarks/bench_summary.py --runs 6 --shape demo --floor [--grouped] [--repeat 3]
    .venv/bin/python benchmarks/bench_summary.py --of runs/demo-YYYYMMDD-HHMMSS --floor [--repeat 3]

One large run (the default): generates the log once (kept in --dir and reused while its size and format
match), then times `summarize_run` end to end (read, checks, aggregates, writing) and prints the figures.
--events sizes the simulated run as if every produced record were one event (the log form of older
producers), so figures stay comparable; the producer writes its records in batches (`records_produced`,
one per partition per tick), so the log itself holds far fewer lines.

Many runs (--runs K): writes K synthetic runs of one shape (demo: the size of one run of `./lab demo`,
about 1.7 MB of events, half of them legacy, every third with anomalies planted; herd: a small group
growing and shrinking) and times `summarize(run_dirs)` including the Spark session's start, once per
repetition, each in a fresh process, then prints every figure with the median, min and max. With --compare
each repetition also times the same pass with Spark's own settings and no class archive (the session's
small-input tuning off), the two alternating, and prints the ratio of the medians. With --floor each repetition
also times Spark's floor for the same input, side by side: a session started as the summary starts it, one read
of the same event files with the event schema, one count; and prints the summary's median over the floor's.
--grouped (with --floor) times a third figure beside them: the same session and read, then one
`groupBy(run).applyInPandas` that only counts each run's events, what any summary written as one pandas
function a run would pay before its first check (docs/analysis.md).
--of DIR times the runs a folder already holds instead (a demo's, a campaign's `runs/`), written by the lab.
Each timing of the summary also gives its steps' seconds (Spark's start, reading, records, ... writing).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from experiments.folders.run_folder import RunFolder
from experiments.synthetic.anomalies import Anomaly
from experiments.synthetic.simulation import Change, SyntheticRun, write_run

# Record-equivalent events per simulated second with the settings below: produced records plus one
# records_consumed batch and one commit per member per tick (about 50-100 members, tick 0.1 s).
EVENTS_PER_SECOND = 10_000 + 950


def config_for(events: int) -> SyntheticRun:
    duration = max(events / EVENTS_PER_SECOND, 40.0)
    at = lambda fraction: round(duration * fraction, 1)  # noqa: E731
    timeline = (
        Change(at_s=0.0, action="phase", name="50 members"),
        Change(at_s=at(0.25), action="phase", name="scale to 100"),
        Change(at_s=at(0.25), action="join", count=50),
        Change(at_s=at(0.5), action="phase", name="scale to 50"),
        Change(at_s=at(0.5), action="leave", count=50),
        Change(at_s=at(0.75), action="phase", name="restart 10"),
        Change(at_s=at(0.75), action="crash", count=10),
        Change(at_s=at(0.75) + 6.0, action="join", count=10),
    )
    return SyntheticRun(name="bench-summary", partitions=50, members=50, rate=10_000.0, tick_s=0.1,
                        duration_s=duration, session_timeout_ms=6000, timeline=timeline)


HERD_TIMELINE = (
    Change(at_s=0.0, action="phase", name="grow"),
    Change(at_s=2.0, action="join", count=1),
    Change(at_s=4.0, action="join", count=1),
    Change(at_s=6.0, action="phase", name="shrink"),
    Change(at_s=6.0, action="leave", count=1),
    Change(at_s=8.0, action="leave", count=1),
)


def shape(kind: str, index: int) -> SyntheticRun:
    """The index-th run of a shape: backends alternate, so one pass sees both."""
    backend = ("legacy", "classic")[index % 2]
    if kind == "demo":
        planted = frozenset(Anomaly) if index % 3 == 2 else frozenset()
        return SyntheticRun(name=f"demo-{index:03d}", backend=backend, anomalies=planted, seed=index)
    return SyntheticRun(name=f"herd-{index:03d}", backend=backend, members=6, partitions=12, duration_s=10.0,
                        rate=50.0, tick_s=0.1, timeline=HERD_TIMELINE, seed=index)


def ensure_runs(root: Path, kind: str, count: int) -> list[Path]:
    marker = root / "bench.json"
    wanted = {"shape": kind, "runs": count}
    runs = [root / f"run-{index:03d}" for index in range(count)]
    if marker.exists() and json.loads(marker.read_text()) == wanted:
        return runs
    shutil.rmtree(root, ignore_errors=True)
    for index, run_dir in enumerate(runs):
        write_run(run_dir, shape(kind, index))
    marker.write_text(json.dumps(wanted))
    return runs


def time_once(runs_root: Path, master: str, tuned: bool = True) -> None:
    """One timing, in this process: summarize every run under runs_root, Spark's start included."""
    from experiments.folders.run_folder import RunFolder
    from experiments.summary import summarize

    run_dirs = sorted(path for path in runs_root.iterdir() if RunFolder(path).is_run())
    marks: list[tuple[str, float]] = []
    started = time.perf_counter()
    summaries = summarize(run_dirs, master=master, tuned=tuned,
                          step=lambda name: marks.append((name, time.perf_counter())))
    elapsed = time.perf_counter() - started
    ends = [at for _, at in marks[1:]] + [started + elapsed]
    steps = {name: round(end - at, 2) for (name, at), end in zip(marks, ends, strict=True)}
    print(json.dumps({"seconds": elapsed, "runs": len(summaries), "steps": steps}))


def floor_once(runs_root: Path, master: str, grouped: bool = False) -> None:
    """Spark's floor for these runs, in this process: the summary's session, one read, one count. `grouped`: the
    count made per run by one pandas function a run (`applyInPandas`) instead."""
    import pandas as pd
    from pyspark.sql import functions as F

    from experiments.folders.run_folder import RunFolder
    from experiments.summary.event_tables import EVENT_SCHEMA
    from experiments.summary.session import SMALL_INPUT_BYTES, input_bytes, start_spark

    run_dirs = sorted(path for path in runs_root.iterdir() if RunFolder(path).is_run())
    started = time.perf_counter()
    spark = start_spark(master, small_input=input_bytes(run_dirs) < SMALL_INPUT_BYTES)
    files = [str(path) for run_dir in run_dirs for path in RunFolder(run_dir).event_files()]
    frame = spark.read.schema(EVENT_SCHEMA).json(files)
    if grouped:
        def count(events: pd.DataFrame) -> pd.DataFrame:
            return pd.DataFrame({"run": [events["run"].iloc[0]], "rows": [len(events)]})
        by_run = frame.withColumn("run", F.regexp_extract(F.input_file_name(), r"([^/]+)/events/[^/]+$", 1))
        rows = sum(row.rows for row in by_run.groupBy("run").applyInPandas(count, "run string, rows long").collect())
    else:
        rows = frame.count()
    print(json.dumps({"seconds": time.perf_counter() - started, "rows": rows}))


def many_runs(args: argparse.Namespace) -> None:
    if args.of:
        root, runs = args.of, sorted(path for path in args.of.iterdir() if RunFolder(path).is_run())
        if not runs:
            raise SystemExit(f"{args.of}: holds no run folders")
        args.runs, args.shape = len(runs), f"of {args.of}:"
    else:
        root = args.dir if args.dir != DEFAULT_DIR else Path(f"runs/bench-summary-{args.shape}-{args.runs}")
        runs = ensure_runs(root, args.shape, args.runs)
    size_mb = sum(p.stat().st_size for run in runs for p in RunFolder(run).event_files()) / 1e6
    kinds = ("tuned", "defaults") if args.compare else ("tuned", "floor") if args.floor else ("tuned",)
    if args.floor and args.grouped:
        kinds += ("grouped",)
    figures: dict[str, list[float]] = {kind: [] for kind in kinds}
    for _ in range(args.repeat):
        for kind in kinds:
            once = {"floor": "--floor-once", "grouped": "--grouped-once"}.get(kind, "--time-once")
            command = [sys.executable, __file__, once, str(root), "--master", args.master]
            out = subprocess.run(command + (["--defaults"] if kind == "defaults" else []),
                                 check=True, capture_output=True, text=True).stdout
            timing = json.loads(out.strip().splitlines()[-1])
            figures[kind].append(timing["seconds"])
            steps = ", ".join(f"{name} {seconds:.1f}" for name, seconds in timing.get("steps", {}).items())
            print(f"  {kind:<8} {figures[kind][-1]:.1f} s" + (f" ({steps})" if steps else ""), flush=True)
    for kind, found in figures.items():
        label = {"tuned": " (the summary)" if args.floor else " (small-input tuning)" if args.compare else "",
                 "defaults": " (Spark's defaults)", "floor": " (Spark's floor: session, one read, one count)",
                 "grouped": " (session, one read, one count a run in pandas)"}[kind]
        print(f"{args.runs} {args.shape} runs ({size_mb:.1f} MB of events), master {args.master}{label}, Spark start "
              f"included: median {statistics.median(found):.1f} s, min {min(found):.1f} s, max {max(found):.1f} s, "
              f"n = {len(found)}")
    if args.floor:
        print(f"summary / floor: {statistics.median(figures['tuned']) / statistics.median(figures['floor']):.2f}x "
              "(ratio of the medians, measured side by side)")
    if "grouped" in figures:
        print(f"grouped / floor: {statistics.median(figures['grouped']) / statistics.median(figures['floor']):.2f}x "
              "(ratio of the medians, measured side by side)")
    if args.compare:
        print(f"defaults / tuned: {statistics.median(figures['defaults']) / statistics.median(figures['tuned']):.2f}x "
              "(ratio of the medians)")


def one_large_run(args: argparse.Namespace) -> None:
    from experiments.summary import start_spark, summarize_run
    from experiments.summary.session import SMALL_INPUT_BYTES, input_bytes

    events = ensure_log(args.dir, args.events)
    size_mb = sum(p.stat().st_size for p in RunFolder(args.dir).event_files()) / 1e6

    started = time.perf_counter()
    spark = start_spark(args.master, small_input=input_bytes([args.dir]) < SMALL_INPUT_BYTES)
    session_s = time.perf_counter() - started
    steps: list[tuple[str, float]] = []
    begun = time.perf_counter()
    summary = summarize_run(spark, args.dir, step=lambda name: steps.append((name, time.perf_counter())))
    total = time.perf_counter() - begun
    spark.stop()

    print(f"run sized as {args.events:,} per-record events; log: {events:,} events ({size_mb:,.0f} MB of JSON), "
          f"{summary.facts.produced_records:,} produced records, master {args.master}")
    print(f"Spark session start: {session_s:.1f} s")
    marks = steps + [("end", begun + total)]
    for (name, at), (_, following) in zip(marks, marks[1:], strict=False):
        print(f"  {name:<16} {following - at:6.1f} s")
    print(f"summary: {total:.1f} s ({args.events / total:,.0f} record-equivalent events/s); target <= 60 s")
    for check in summary.checks:
        print(f"  {check.check:<28} {check.verdict.value:<8} {check.detail}")


LOG_FORMAT = "records_produced"    # a log written in another form is generated again
DEFAULT_DIR = Path("runs/bench-summary")


def ensure_log(run_dir: Path, events: int) -> int:
    marker = run_dir / "bench.json"
    if marker.exists():
        known = json.loads(marker.read_text())
        if known.get("requested") == events and known.get("format") == LOG_FORMAT:
            return known["events"]
    shutil.rmtree(run_dir, ignore_errors=True)
    started = time.perf_counter()
    write_run(run_dir, config_for(events))
    lines = sum(sum(1 for _ in open(path, "rb")) for path in RunFolder(run_dir).event_files())
    print(f"generated {lines:,} events in {time.perf_counter() - started:.1f} s -> {run_dir}")
    marker.write_text(json.dumps({"requested": events, "events": lines, "format": LOG_FORMAT}))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--runs", type=int, help="time the summary of this many small runs instead")
    parser.add_argument("--shape", choices=["demo", "herd"], default="demo")
    parser.add_argument("--of", type=Path, help="time the summary of the runs this folder holds (a demo's)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--compare", action="store_true", help="also time Spark's defaults, side by side")
    parser.add_argument("--floor", action="store_true", help="also time Spark's floor for the same input, side by side")
    parser.add_argument("--grouped", action="store_true",
                        help="with --floor: also time one pandas count a run after the floor's read, side by side")
    parser.add_argument("--time-once", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--floor-once", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--grouped-once", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--defaults", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.time_once:
        time_once(args.time_once, args.master, tuned=not args.defaults)
    elif args.floor_once or args.grouped_once:
        floor_once(args.floor_once or args.grouped_once, args.master, grouped=bool(args.grouped_once))
    elif args.runs or args.of:
        many_runs(args)
    else:
        one_large_run(args)


if __name__ == "__main__":
    from experiments.run.machine import print_index

    print_index()   # every figure below is this machine's, as fast as this line says
    main()
