"""Benchmark: the Spark summary of one large synthetic run (seed 002's churn shape, scaled up).

    .venv/bin/python benchmarks/bench_summary.py [--events 10000000] [--master local[2]] [--dir runs/bench-summary]

Generates the log once (kept in --dir and reused while its size and format match), then times
`summarize_run` end to end (read, checks, aggregates, writing) and prints the figures.

--events sizes the simulated run as if every produced record were one event (the log form of
older producers), so figures stay comparable; the producer writes its records in batches
(`records_produced`, one per partition per tick), so the log itself holds far fewer lines.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from experiments.summary import start_spark, summarize_run
from experiments.synthetic import Change, SyntheticRun, write_run

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


LOG_FORMAT = "records_produced"    # a log written in another form is generated again


def ensure_log(run_dir: Path, events: int) -> int:
    marker = run_dir / "bench.json"
    if marker.exists():
        known = json.loads(marker.read_text())
        if known.get("requested") == events and known.get("format") == LOG_FORMAT:
            return known["events"]
    shutil.rmtree(run_dir, ignore_errors=True)
    started = time.perf_counter()
    write_run(run_dir, config_for(events))
    lines = sum(sum(1 for _ in open(path, "rb")) for path in (run_dir / "events").glob("*.jsonl"))
    print(f"generated {lines:,} events in {time.perf_counter() - started:.1f} s -> {run_dir}")
    marker.write_text(json.dumps({"requested": events, "events": lines, "format": LOG_FORMAT}))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--dir", type=Path, default=Path("runs/bench-summary"))
    args = parser.parse_args()
    events = ensure_log(args.dir, args.events)
    size_mb = sum(p.stat().st_size for p in (args.dir / "events").glob("*.jsonl")) / 1e6

    started = time.perf_counter()
    spark = start_spark(args.master)
    session_s = time.perf_counter() - started
    steps: list[tuple[str, float]] = []
    begun = time.perf_counter()
    summary = summarize_run(spark, args.dir, step=lambda name: steps.append((name, time.perf_counter())))
    total = time.perf_counter() - begun
    spark.stop()

    print(f"run sized as {args.events:,} per-record events; log: {events:,} events ({size_mb:,.0f} MB of JSON), "
          f"{summary.facts['produced_records']:,} produced records, master {args.master}")
    print(f"Spark session start: {session_s:.1f} s")
    marks = steps + [("end", begun + total)]
    for (name, at), (_, following) in zip(marks, marks[1:], strict=False):
        print(f"  {name:<16} {following - at:6.1f} s")
    print(f"summary: {total:.1f} s ({args.events / total:,.0f} record-equivalent events/s); target <= 60 s")
    for check in summary.checks:
        print(f"  {check.check:<28} {check.verdict.value:<8} {check.detail}")


if __name__ == "__main__":
    main()
