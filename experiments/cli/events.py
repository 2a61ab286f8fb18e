"""`rebalance-lab events RUN [--type T] [--member M]`: a run's events in time order, one line each.

Times are seconds since the run's first event, the t = 0 of the charts and of the summary's tables
(experiments/summary/pipeline.py takes the smallest stamp of any event); events are ordered by their
monotonic stamp, which every process of a run shares. Plain Python over RUN_DIR/events/*.jsonl: no
Spark, no summary needed.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from experiments.folders.run_folder import RunFolder
from experiments.scenario.actions import is_membership_phase
from experiments.scenario.labels import fault_label, is_membership_change
from rebalance import events as ev


def register(app: typer.Typer) -> None:
    app.command("events")(events_command)


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


@dataclass(frozen=True)
class Line:
    """One event read back: its time in ns, the file it came from (runner, producer, h000...) and the event."""

    ns: int
    source: str
    event: dict


def event_ns(event: dict) -> int | None:
    """An event's time in ns: its monotonic stamp, else its wall clock (as the summary reads it)."""
    if isinstance(event.get("ts_ns"), int):
        return event["ts_ns"]
    if isinstance(event.get("ts_ms"), int):
        return event["ts_ms"] * 1_000_000
    return None


def read_run_events(run_dir: Path) -> list[Line]:
    """Every readable event of a run, in time order (ties keep file order)."""
    lines = []
    for path in RunFolder(run_dir).event_files():
        for event in ev.read_events(path):
            ns = event_ns(event) if isinstance(event, dict) else None
            if ns is not None and event.get("type"):
                lines.append(Line(ns, path.stem, event))
    lines.sort(key=lambda line: line.ns)
    return lines


def matches_member(event: dict, member: str) -> bool:
    """The member's own events (a legacy id `<group>_<name>` matches its name too), and the faults that hit it."""
    def named(value: object) -> bool:
        return isinstance(value, str) and (value == member or value.endswith(f"_{member}"))

    if named(event.get("member")):
        return True
    if event.get("type") in (ev.FAULT_STARTED, ev.FAULT_STOPPED):
        target = event.get("target") if isinstance(event.get("target"), str) else ""
        hit = [*(event.get("targets") or []), *(event.get("member_ids") or []), *target.split(",")]
        return any(named(value) for value in hit)
    return False


def select(lines: Iterable[Line], types: frozenset[str], member: str | None) -> Iterator[Line]:
    for line in lines:
        if types and line.event["type"] not in types:
            continue
        if member and not matches_member(line.event, member):
            continue
        yield line


def _member_names(lines: Iterable[Line], shown: int = 20) -> str:
    """The members a run's events name (a legacy id `<group>_<name>` by its name), the first `shown` of them."""
    names = sorted({str(line.event["member"]).rsplit("_", 1)[-1] for line in lines
                    if isinstance(line.event.get("member"), str) and line.event["member"]})
    if len(names) <= shown:
        return ", ".join(names) or "none"
    return f"{', '.join(names[:shown])} and {len(names) - shown:,} more ({len(names):,} in all)"


# ---- one line per event

def partitions_text(partitions: Iterable[str] | None) -> str:
    """`t0-0..3 t0-5 t1-2`: consecutive partitions of a topic as a range."""
    by_topic: dict[str, list[int]] = {}
    other = []
    for name in partitions or []:
        topic, _, number = str(name).rpartition("-")
        if topic and number.isdigit():
            by_topic.setdefault(topic, []).append(int(number))
        else:
            other.append(str(name))
    parts = []
    for topic, numbers in sorted(by_topic.items()):
        numbers = sorted(set(numbers))
        start = previous = numbers[0]
        for number in [*numbers[1:], None]:
            if number is not None and number == previous + 1:
                previous = number
                continue
            parts.append(f"{topic}-{start}" if start == previous else f"{topic}-{start}..{previous}")
            if number is not None:
                start = previous = number
    return " ".join(parts + other) or "none"


def _offsets(offsets: object) -> str:
    if not isinstance(offsets, dict) or not offsets:
        return "none"
    return " ".join(f"{tp}={offset}" for tp, offset in sorted(offsets.items(), key=lambda item: _tp_key(item[0])))


def _tp_key(tp: str) -> tuple[str, int]:
    topic, _, number = tp.rpartition("-")
    return (topic, int(number)) if number.isdigit() else (tp, -1)


def _range(event: dict) -> str:
    first, last = event.get("first_offset"), event.get("last_offset")
    where = f"{event.get('topic')}-{event.get('partition')}"
    offsets = f"offset {first}" if first == last else f"offsets {first}..{last}"
    return f"{where} {offsets}"


def _fault(event: dict) -> str:
    label = fault_label(event.get("kind"), event.get("target"), event.get("link"))
    if is_membership_change(event.get("kind")):
        label += " (a membership change)"
    ended = f", ended by {event['healed_by']}" if event.get("type") == ev.FAULT_STOPPED and event.get("healed_by") \
        else ""
    return f"{label} [{event.get('fault_id')}{ended}]"


def _phase(event: dict) -> str:
    name = str(event.get("name"))
    if is_membership_phase(name):
        return f"{name} (a membership change)"
    return name + (f" ({event['status']})" if event.get("status") else "")


def _words(*parts: object) -> str:
    return ", ".join(str(part) for part in parts if part not in (None, "", []))


def _request(event: dict) -> str:
    latency = event.get("latency_ms")
    return _words(" ".join(str(part) for part in (event.get("op"), event.get("path")) if part),
                  event.get("detail"), f"{latency:.1f} ms" if isinstance(latency, (int, float)) else None,
                  f"error {event['error']}" if event.get("error") else None)


def _generation(event: dict) -> str | None:
    """`generation 3`; nothing where there is none (legacy writes -1)."""
    generation = event.get("generation")
    return None if generation in (None, -1) else f"generation {generation}"


def _metrics(event: dict) -> str:
    keys = ("rebalance-total", "failed-rebalance-total", "rebalance-latency-avg")
    return _words(*(f"{key} {event[key]:g}" for key in keys if isinstance(event.get(key), (int, float))))


DETAILS = {
    ev.MEMBER_STARTED: lambda e: _words(f"group {e.get('group')}", e.get("strategy"),
                                        f"topics {','.join(e.get('topics') or [])}"),
    ev.MEMBER_STOPPED: lambda e: str(e.get("reason") or ""),
    ev.REBALANCE_STARTED: lambda e: f"trigger {e.get('trigger')}",
    ev.REBALANCE_COMPLETED: lambda e: _words(
        _generation(e), f"assigned {partitions_text(e.get('assigned'))}",
        f"{e['duration_ms']:.0f} ms" if isinstance(e.get("duration_ms"), (int, float)) else None,
        "leader" if e.get("leader") else None),
    ev.REBALANCE_FAILED: lambda e: _words(e.get("error"), f"after {e.get('attempts')} attempts"),
    ev.REBALANCE_ATTEMPT: lambda e: _words(f"attempt {e.get('attempt')}", e.get("outcome"), e.get("detail")),
    ev.PARTITIONS_REVOKED: lambda e: partitions_text(e.get("partitions")),
    ev.PARTITIONS_ASSIGNED: lambda e: partitions_text(e.get("partitions")),
    ev.PARTITIONS_LOST: lambda e: partitions_text(e.get("partitions")),
    ev.RECORDS_CONSUMED: lambda e: _words(_range(e), _generation(e)),
    ev.RECORDS_PRODUCED: _range,
    ev.RECORDS_PROCESSED: _range,
    ev.RECORD_PRODUCED: lambda e: f"{e.get('topic')}-{e.get('partition')} offset {e.get('offset')}",
    ev.OFFSETS_COMMITTED: lambda e: _words(_offsets(e.get("offsets")), _generation(e)),
    ev.COMMIT_FAILED: lambda e: _words(e.get("error"), _offsets(e.get("offsets"))),
    ev.COORDINATION_REQUEST: _request,
    ev.WATCH_NOTIFICATION: lambda e: _words(e.get("event"), e.get("path")),
    ev.SESSION_STATE: lambda e: str(e.get("state") or ""),
    ev.FAULT_STARTED: _fault,
    ev.FAULT_STOPPED: _fault,
    ev.PHASE: _phase,
    ev.COORDINATOR_EVENT: lambda e: _words(
        e.get("event"), f"{e.get('from_state')} -> {e.get('to_state')}" if e.get("to_state") else e.get("state"),
        f"generation {e['generation']}" if e.get("generation") is not None else None,
        f"{e['members']} members" if e.get("members") is not None else None, e.get("reason")),
    ev.SERVER_COUNTERS: lambda e: _words(e.get("moment"), f"{e.get('server')} served {e.get('served')}",
                                         f"{e.get('nodes')} nodes"),
    ev.BROKER_LIVENESS: lambda e: _words(
        f"broker {e.get('node')} {e.get('state')}",
        f"{e['stalled_ms'] / 1000:.1f} s" if isinstance(e.get("stalled_ms"), (int, float)) else None,
        f"{e.get('outstanding')} outstanding", f"loop lag {e['loop_lag_ms']:.0f} ms"
        if isinstance(e.get("loop_lag_ms"), (int, float)) else None,
        (e.get("stack") or "").split("\n")[0] or None),
    ev.PROCESS_MEMORY: lambda e: (f"resident {e['rss_bytes'] / 2 ** 20:.1f} MB"
                                  if isinstance(e.get("rss_bytes"), (int, float)) else "resident memory ?"),
    ev.METRICS: _metrics,
    ev.PRODUCER_PACE: lambda e: _words(f"sent {e.get('sent')} of {e.get('due')} due",
                                       f"{e['behind_ms'] / 1000:.2f} s behind" if e.get("behind_ms") else None),
    ev.HOST_SAMPLE: lambda e: _words(
        f"cpu pressure {e['cpu_pressure_pct']:.0f}%" if isinstance(e.get("cpu_pressure_pct"), (int, float)) else None,
        f"busy {e['busy_pct']:.0f}%" if isinstance(e.get("busy_pct"), (int, float)) else None,
        f"steal {e['steal_pct']:.1f}%" if e.get("steal_pct") else None, f"load {e.get('load1')}"),
    ev.JOIN_WAVE: lambda e: _words(f"{len(e.get('members') or [])} members due", e.get("fault_id"),
                                   "armed" if e.get("armed") else "started at the step"),
}
_SPACES = re.compile(r"\s+")


def _other_fields(event: dict) -> str:
    """A type without a line of its own: its fields as they are."""
    return " ".join(f"{key}={json.dumps(value, separators=(',', ':'))}" for key, value in event.items()
                    if key not in ev.COMMON_FIELDS)


def describe(line: Line, t0_ns: int) -> str:
    """`   12.345  m001        partitions_assigned   t0-0..2`"""
    event = line.event
    who = event.get("member") or f"({line.source})"
    detail = _SPACES.sub(" ", DETAILS.get(event["type"], _other_fields)(event)).strip()
    return f"{(line.ns - t0_ns) / 1e9:9.3f}  {who:<10}  {event['type']:<21} {detail}".rstrip()


# ---- the command

def _check_run_dir(run_dir: Path) -> None:
    if not run_dir.exists():
        _fail(f"{run_dir}: no such run folder")
    if not RunFolder(run_dir).is_run():
        inside = sorted(child for child in run_dir.iterdir() if RunFolder(child).is_run()) \
            if run_dir.is_dir() else []
        hint = f"; it holds runs: {', '.join(str(child) for child in inside)}" if inside else ""
        _fail(f"{run_dir}: not a run folder (no events/ in it){hint}")


def _types(values: list[str] | None) -> frozenset[str]:
    wanted = {name.strip() for value in values or [] for name in value.split(",") if name.strip()}
    unknown = sorted(wanted - ev.EVENT_TYPES)
    if unknown:
        _fail(f"--type {', '.join(unknown)}: no such event type; the types are {', '.join(sorted(ev.EVENT_TYPES))}")
    return frozenset(wanted)


def events_command(
    run_dir: Annotated[Path, typer.Argument(help="A run folder (the one with events/ in it).", show_default=False)],
    types: Annotated[list[str] | None, typer.Option(
        "--type", help="Only events of this type (repeatable, or comma-separated), e.g. partitions_assigned.")] = None,
    member: Annotated[str | None, typer.Option(
        "--member", help="Only this member's events and the faults that hit it, e.g. m001.")] = None,
) -> None:
    """A run's events sorted by time, one line each: seconds since the run started (as on the charts),
    member (or the file of a process without one, e.g. (runner)), type and its telling fields."""
    wanted = _types(types)
    _check_run_dir(run_dir)
    try:
        lines = read_run_events(run_dir)
    except (OSError, ValueError, json.JSONDecodeError) as error:
        _fail(f"{run_dir}: {error}")
    if not lines:
        _fail(f"{run_dir}: its events/ holds no readable events")
    if member and not any(matches_member(line.event, member) for line in lines):
        _fail(f"{run_dir}: no member named {member!r}; its members are {_member_names(lines)}")
    t0_ns = lines[0].ns
    shown = 0
    try:
        for line in select(lines, wanted, member):
            sys.stdout.write(describe(line, t0_ns) + "\n")
            shown += 1
        sys.stdout.flush()
    except BrokenPipeError:      # `| head`: the reader has seen enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(0) from None
    timeline = next((line.ns for line in lines if line.event["type"] == ev.PHASE
                     and line.event.get("name") == "timeline"), None)
    start = f"; the timeline (the scenario's `at` times) began at t = {(timeline - t0_ns) / 1e9:.3f} s" \
        if timeline is not None else ""
    typer.echo(f"{shown:,} of {len(lines):,} events; t: seconds since the run's first event{start}", err=True)
