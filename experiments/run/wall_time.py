"""How long a scenario takes on this machine, wall-clock: from its recorded runs where there are some, else an
estimate from its timeline and the warm-up before it.

A scenario's `duration` is timeline time: the clock starts once the group is stable, after ZooKeeper or the
brokers are up and every member has joined, and the timeline itself waits for a stable group where a step says
so. A completed run's lock.json records when the runner started and ended (`started_ms`, `ended_ms`), which
is what a user waits for.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from experiments.folders import RUNS_DIR
from experiments.folders.run_folder import LOCK_FILE, RunFolder

ROOT = Path(__file__).resolve().parents[2]
RUN_ROOTS = (ROOT / RUNS_DIR,)
LOCK_DEPTH = 4          # runs/NAME/lock.json down to runs/CAMPAIGN/runs/NAME/lock.json and a level more
# When nothing was recorded: set-up (ZooKeeper or the brokers, the producer, the first hosts), then the
# members' warm-up at about this pace a member of the scenario's peak. Runs alone on 2 cores (machine index:
# python 0.51-0.54 s): capacity at 25 members 65 s (45 s timeline), seed002 about 2.7 min (135 s, 100
# members), herd-1000 173-183 s (90 s, 1,001 members).
SETUP_S = 20.0
WARMUP_S_PER_MEMBER = 0.1


@dataclass(frozen=True)
class WallTime:
    seconds: float
    runs: int            # recorded runs the figure is the median of; 0 for an estimate

    @property
    def estimated(self) -> bool:
        return self.runs == 0

    def text(self) -> str:
        figure = _duration(self.seconds)
        return f"~{figure} (estimate)" if self.estimated else f"{figure} (median of {self.runs})"


def recorded_seconds(roots: Iterable[Path] | None = None) -> dict[str, list[float]]:
    """Scenario name -> the wall times of its completed runs under `roots` (default: the checkout's runs/)."""
    found: dict[str, list[float]] = {}
    for root in RUN_ROOTS if roots is None else roots:
        for lock in _locks(root):
            record = RunFolder(lock.parent).glance()
            if record is None or record.status != "completed" or "simulation" in record.versions:
                continue   # a simulated run's times are virtual: they say nothing of this machine
            started, ended = record.started_ms, record.ended_ms
            if not isinstance(started, int) or not isinstance(ended, int):
                continue
            found.setdefault(record.name, []).append((ended - started) / 1000)
    return found


def _locks(root: Path) -> Iterable[Path]:
    if not root.is_dir():
        return
    for depth in range(1, LOCK_DEPTH + 1):
        yield from root.glob("/".join(["*"] * depth) + f"/{LOCK_FILE}")


def estimate_seconds(timeline_s: float, members: int) -> float:
    """The wall time of a run nobody recorded: set-up, the members' warm-up, then the timeline."""
    return SETUP_S + WARMUP_S_PER_MEMBER * members + timeline_s


def expected(name: str, timeline_s: float, members: int, recorded: dict[str, list[float]]) -> WallTime:
    """The median of the scenario's recorded runs, or an estimate when there are none."""
    seconds = recorded.get(name)
    if seconds:
        return WallTime(statistics.median(seconds), len(seconds))
    return WallTime(estimate_seconds(timeline_s, members), 0)


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"
