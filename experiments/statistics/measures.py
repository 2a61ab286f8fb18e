"""Every measure a campaign records, classified once: a count the fault schedule alone fixes, or one that
timing can move.

Runs made beside another (`--parallel` > 1) share two cores, which stretches every duration. A count the
schedule fixes (requests and notifications per change, offset regressions) does not move with that; a count
that grows with how long something lasts does: duplicates (records handled while two members own a
partition, so they grow with how long that lasts), records over the latency limit, fenced commits (whether
the zombie commits before it is fenced), records handled without ownership, and the FindCoordinator lookups
made while no coordinator answers. Only the first kind is compared across runs made beside another; the
second kind from such runs is shown, not compared, and no claim on it is decided.

A metric is named `<measure>` or `<phase or change>: <measure>` (`join: requests per change`,
`scale-to-100: records lost`); the part after the last ": " is looked up here. A measure this table does
not name counts as one timing can move (never compared beside another run by mistake).
"""

from __future__ import annotations

SCHEDULE = "fixed by the schedule"
TIMING = "moved by timing"

MEASURES: dict[str, str] = {
    # herd.parquet, per kind of change (the per-run mean over the run's changes of that kind)
    "requests per change": SCHEDULE,
    "notifications per change": SCHEDULE,
    "stable after (s)": TIMING,             # the last assignment before the next change (pages: its name)
    "settled after (s)": TIMING,            # every partition owned once, every member owning some
    "stop-the-world (s)": TIMING,
    "partition-seconds unowned": TIMING,
    # phases.parquet, per phase and over the whole timeline
    "records lost": TIMING,                 # records handled past the latency limit
    "max latency (ms)": TIMING,
    "rebalancing (ms)": TIMING,
    "double-ownership (s)": TIMING,
    # verdicts.parquet, the whole run
    "duplicates": TIMING,
    "offset regressions": SCHEDULE,
    "fenced commits": TIMING,
    "consumed without ownership": TIMING,
    # coordinator_gaps.parquet
    "coordinator gap (s)": TIMING,
    "FindCoordinator requests without a coordinator": TIMING,
}


def measure_of(metric: str) -> str:
    """The measure a metric name carries: the part after its phase or change prefix."""
    return metric.rsplit(": ", 1)[-1]


def kind_of(metric: str) -> str:
    """SCHEDULE or TIMING; TIMING for a measure the table does not name."""
    return MEASURES.get(measure_of(metric), TIMING)


def moved_by_timing(metric: str) -> bool:
    return kind_of(metric) == TIMING
