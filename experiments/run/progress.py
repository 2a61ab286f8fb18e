"""The runner's live display and warm-up gauge: running counts read by tailing RUN_DIR/events/*.jsonl."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from experiments.run.settling import Settling
from experiments.scenario import Scenario, Schedule
from experiments.scenario.actions import SILENCING_KINDS, is_membership_phase
from experiments.scenario.labels import fault_label, is_membership_change
from rebalance import events as ev


class Run(Protocol):
    """What the display reads of the run it shows."""

    backend: str
    run_dir: Path
    events_dir: Path
    phase: str
    t0_ns: int | None
    history: Any

@dataclass
class _Tail:
    offset: int = 0
    partial: bytes = b""


@dataclass
class Progress:
    """Running counts read by tailing RUN_DIR/events/*.jsonl; also tells the warmup when the group is stable.

    Only what is written after it is made counts: bytes already in the event files belong to an earlier
    run, and a run's counts never include them. A member leaving (a `leave` written as fault events) and
    joins and scaling (phases) are membership changes, counted apart from faults."""

    events_dir: Path
    scenario: Scenario
    schedule: Schedule
    produced: int = 0
    consumed: int = 0
    rebalances: int = 0
    failed_rebalances: int = 0
    faults: int = 0
    membership_changes: int = 0
    members_up: set = field(default_factory=set)
    owned: dict = field(default_factory=dict)
    tails: dict = field(default_factory=dict)
    recent: list = field(default_factory=list)
    settling: Settling = field(default_factory=Settling)   # for timeline entries that wait for a stable group
    _expected_wall: object = field(default=None, repr=False)   # wall_time.WallTime, read once

    def __post_init__(self) -> None:
        for path in sorted(self.events_dir.glob("*.jsonl")):
            with contextlib.suppress(OSError):
                self.tails[path] = _Tail(offset=path.stat().st_size)

    def poll(self) -> None:
        for path in sorted(self.events_dir.glob("*.jsonl")):
            tail = self.tails.setdefault(path, _Tail())
            try:
                with open(path, "rb") as handle:
                    handle.seek(tail.offset)
                    chunk = handle.read()
            except OSError:
                continue
            tail.offset += len(chunk)
            lines = (tail.partial + chunk).split(b"\n")
            tail.partial = lines.pop()
            for raw in lines:
                with contextlib.suppress(ValueError):
                    self.feed(json.loads(raw))

    def feed(self, event: dict) -> None:
        kind, member = event.get("type"), event.get("member", "")
        self.settling.feed(event)
        if kind == ev.RECORDS_CONSUMED:
            self.consumed += int(event.get("count", 0))
        elif kind == ev.RECORD_PRODUCED:
            self.produced += 1
        elif kind == ev.RECORDS_PRODUCED:
            self.produced += int(event.get("count", 0))
        elif kind == ev.REBALANCE_COMPLETED:
            self.rebalances += 1
        elif kind == ev.REBALANCE_FAILED:
            self.failed_rebalances += 1
        elif kind == ev.MEMBER_STARTED:
            self.members_up.add(member)
        elif kind == ev.MEMBER_STOPPED:
            self.members_up.discard(member)
            self.owned.pop(member, None)
        elif kind == ev.PARTITIONS_ASSIGNED:
            self.owned.setdefault(member, set()).update(event.get("partitions", []))
        elif kind in (ev.PARTITIONS_REVOKED, ev.PARTITIONS_LOST):
            self.owned.setdefault(member, set()).difference_update(event.get("partitions", []))
        elif kind == ev.FAULT_STARTED and is_membership_change(event.get("kind")):
            self.membership_changes += 1
        elif kind == ev.FAULT_STARTED:
            self.faults += 1
            if event.get("kind") in SILENCING_KINDS and event.get("emulated"):   # its host writes nothing more for it
                for crashed in event.get("member_ids") or []:
                    self.members_up.discard(crashed)
                    self.owned.pop(crashed, None)
        elif kind == ev.PHASE and is_membership_phase(event.get("name")):
            self.membership_changes += 1
        if kind in (ev.FAULT_STARTED, ev.FAULT_STOPPED, ev.PHASE):
            line = _recent_line(event)
            if line:
                self.recent = [*self.recent[-4:], line]

    def all_partitions(self) -> set[str]:
        return {f"{topic.name}-{index}" for topic in self.scenario.topics
                if topic.name in self.scenario.subscribed_topics for index in range(topic.partitions)}

    def ownership_summary(self) -> dict:
        claims = [partition for partitions in self.owned.values() for partition in partitions]
        return {"members_up": len(self.members_up), "owned": len(set(claims)),
                "double_owned": len(claims) - len(set(claims)), "partitions": len(self.all_partitions())}

    # ---- display

    def render(self, run: Run):
        from rich.table import Table

        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column()
        now_ns = time.monotonic_ns()
        waited_ns = run.late_ns + (now_ns - run.waiting_since_ns if run.waiting_since_ns else 0)
        position = (now_ns - run.t0_ns - waited_ns) / 1e9 if run.t0_ns else 0.0   # timeline time stands still in a wait
        table.add_row("run", f"{self.scenario.name} on {run.backend}  [dim]{run.run_dir}[/dim]")
        table.add_row("wall", f"{_clock(time.time() - run.started_ms / 1000)} since the start, "
                              f"expected {self.expected_wall().text()}")
        table.add_row("phase", f"{run.phase}   {self.timeline_text(run, position, waited_ns)}")
        upcoming = [step for step in self.schedule.steps if not run.t0_ns or step.at > position][:3]
        table.add_row("next", "; ".join(_step_text(step) for step in upcoming) or "-")
        table.add_row("records", f"produced {self.produced}   consumed {self.consumed}")
        table.add_row("group", f"members up {len(self.members_up)}   member rebalances {self.rebalances}"
                               f"   failed {self.failed_rebalances}")
        in_force = [started for started in (run.history.active.values() if run.history else ())
                    if not is_membership_change(started.get("kind"))]
        table.add_row("faults", f"{self.faults} started, {len(in_force)} in force;"
                                f"   membership changes {self.membership_changes}")
        for line in self.recent:
            table.add_row("", f"[dim]{line}[/dim]")
        return table

    def timeline_text(self, run: Run, position: float, waited_ns: int) -> str:
        """Where the timeline is, and what it waits for: a stable group before it starts, or before a step."""
        if not run.t0_ns:
            return (f"waiting for a stable group of {len(self.schedule.initial_members)} members before the "
                    f"timeline starts (at most {self.scenario.group.warmup_timeout:.0f} s)")
        text = f"timeline {position:5.1f} / {self.scenario.duration:.0f} s"
        if run.waiting_since_ns:
            text += f", held for a stable group ({(time.monotonic_ns() - run.waiting_since_ns) / 1e9:.0f} s so far)"
        elif waited_ns:
            text += f" (+{waited_ns / 1e9:.0f} s waiting for stable groups)"
        return text

    def expected_wall(self):
        if self._expected_wall is None:
            from experiments.run import wall_time
            from experiments.run.capacity import peak_members

            self._expected_wall = wall_time.expected(self.scenario.name, self.scenario.duration,
                                                     peak_members(self.schedule), wall_time.recorded_seconds())
        return self._expected_wall

    async def show(self, run: Run, *, live: bool) -> None:
        from rich.console import Console
        from rich.live import Live

        console = Console(stderr=True)
        if not (live and console.is_terminal):
            while True:          # keep counting for the warmup and the final line
                self.poll()
                await asyncio.sleep(0.5)
        with Live(self.render(run), console=console, refresh_per_second=4, transient=False) as display:
            while True:
                self.poll()
                display.update(self.render(run))
                await asyncio.sleep(0.5)

    def final(self, run: Run, status: str, reason: str) -> None:
        self.poll()
        from rich.console import Console

        Console(stderr=True).print(
            f"[bold]{self.scenario.name}[/bold] on {run.backend}: {status}{': ' + reason if reason else ''}; "
            f"produced {self.produced}, consumed {self.consumed}, member rebalances {self.rebalances}, "
            f"faults {self.faults}, membership changes {self.membership_changes}; events in {run.events_dir}")


def _step_text(step) -> str:
    """`15s scale 50 members (h010-0 .. h019-4)`, `0s phase steady-50`, `95s restart h000-0,h000-1`."""
    what = step.action if step.op == "start" else f"{step.op} {step.action}"
    if step.action == "phase" and step.params.get("name"):
        return f"{step.at:.0f}s phase {step.params['name']}"
    targets = step.targets
    named = ",".join(targets) if len(targets) <= 4 else f"{len(targets)} members ({targets[0]} .. {targets[-1]})"
    return f"{step.at:.0f}s {what} {named}".rstrip()


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(max(0, int(seconds)), 60)
    return f"{minutes}:{seconds:02d}"


def _recent_line(event: dict) -> str | None:
    """A phase or fault event as one line of the live display: `fault started: m001 cut off (coord)`,
    `membership change: m004 leaves`, `membership change: join-1`, `phase: heal`. None for the closing
    of a leave, which is bookkeeping (the member stays gone)."""
    kind = event.get("type")
    if kind == ev.PHASE:
        word = "membership change" if is_membership_phase(event.get("name")) else "phase"
        return f"{word}: {event.get('name')}"
    label = fault_label(event.get("kind"), event.get("target"), event.get("link"))
    if is_membership_change(event.get("kind")):
        return f"membership change: {label}" if kind == ev.FAULT_STARTED else None
    return f"{kind.replace('_', ' ')}: {label}"
