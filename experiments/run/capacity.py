"""What this machine carries, measured once and kept, and each scenario held against it before it starts.

`measure` runs the `capacity` scenario (seed 002's load on a group that doubles in one join wave) at growing
group sizes, one backend after another, and stops a backend's sweep at the first size whose run conditions are
not ok (experiments.run.conditions). The largest size that was ok is that backend's capacity, kept in
.lab/capacity.json with the machine index it was measured under.

`check` compares a scenario's largest group (its peak of members running at once) with the capacity of the
backend it is about to run on: above it, the run's numbers may measure the machine more than the protocol, and
`run` and `campaign` say so and stop unless told `--force`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from experiments.scenario import Scenario, Schedule, resolve

ROOT = Path(__file__).resolve().parents[2]
# The checkout's own measure; LAB_CAPACITY_FILE names another (the test suite points it at none).
CAPACITY_FILE = Path(os.environ.get("LAB_CAPACITY_FILE") or ROOT / ".lab" / "capacity.json")
SIZES = (50, 100, 200, 400)
SCENARIO = ROOT / "experiments" / "scenarios" / "capacity.toml"


def peak_members(schedule: Schedule) -> int:
    """The most members running at once over the schedule (restarts change nobody's count)."""
    running = set(schedule.initial_members)
    peak = len(running)
    for step in schedule.steps:
        if step.op != "start":
            continue
        if step.action in ("join", "scale") and not running & set(step.targets):
            running |= set(step.targets)
        elif step.action in ("leave", "crash", "scale"):
            running -= set(step.targets)
        peak = max(peak, len(running))
    return peak


@dataclass(frozen=True, kw_only=True)
class Measured:
    backend: str
    carried: int | None          # the largest size whose conditions were ok (None: not even the first)
    failed_at: int | None        # the first size that was not ok (None: every size tried was)
    reason: str
    runs: list[dict]


def read(path: Path = CAPACITY_FILE) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def check(scenario: Scenario, backend: str, *, path: Path = CAPACITY_FILE) -> str | None:
    """Why this scenario may be more than this machine carries on `backend`, or None."""
    stored = read(path)
    entry = (stored or {}).get("backends", {}).get(backend)
    if not entry:
        return None
    peak = peak_members(resolve(scenario))
    carried = entry.get("carried")
    if carried is not None and peak <= carried:
        return None
    when = time.strftime("%Y-%m-%d", time.localtime(stored.get("measured_ms", 0) / 1000))
    what = f"carried {carried} members" if carried is not None else f"did not carry even {entry.get('failed_at')}"
    why = f" ({entry['reason']})" if entry.get("reason") else ""
    return (f"{scenario.name} peaks at {peak} members on {backend}; this machine {what} of the capacity probe's "
            f"group at {stored.get('rate', '?')} records/s{why} when measured on {when} "
            f"({stored.get('machine_line', 'machine index not recorded')}): a run this size may measure the machine, "
            "not the protocol")


def measure(backends: list[str], sizes: tuple[int, ...], run_one: Callable[[str, int], dict],
            say: Callable[[str], None]) -> list[Measured]:
    """Each backend's sweep; `run_one(backend, size)` runs the probe and returns its conditions and wall time."""
    results = []
    for backend in backends:
        runs, carried, failed_at, reason = [], None, None, ""
        for size in sizes:
            say(f"{backend}: {size // 2} -> {size} members ...")
            outcome = run_one(backend, size)
            runs.append({"members": size, **outcome})
            say(f"{backend} at {size}: {outcome['grade']} ({outcome['wall_s']:.0f} s) - {outcome['reason']}")
            if outcome["grade"] == "ok":
                carried = size
                continue
            failed_at, reason = size, outcome["reason"]
            break
        results.append(Measured(backend=backend, carried=carried, failed_at=failed_at, reason=reason, runs=runs))
    return results


def store(results: list[Measured], *, rate: float, machine: dict, machine_line: str, commit: str | None,
          path: Path = CAPACITY_FILE) -> None:
    """Merge into the stored capacities (a backend measured again replaces its entry)."""
    stored = read(path) or {"backends": {}}
    stored.update(measured_ms=int(time.time() * 1000), rate=rate, machine=machine, machine_line=machine_line,
                  commit=commit)
    for result in results:
        stored["backends"][result.backend] = {"carried": result.carried, "failed_at": result.failed_at,
                                              "reason": result.reason, "runs": result.runs,
                                              "measured_ms": stored["measured_ms"]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(stored, indent=1) + "\n")
