"""A herd sweep inside one run: the group grows through several sizes, and at each one join and one leave are
measured. The timeline marks each size with a `herd-N` phase once the group has grown to N and is stable
(experiments.scenario.actions.herd_mark); the changes from the mark to the next phase that is not a join's
(the next scaling step, the next mark, the teardown) are the herd's at N. The growth between marks (members
started in bulk) is not measured.

`at_sizes` gives such a run as one view per size, each a RunData of that group size holding only that size's
changes, so that the herd's readers (points, table, cost model, plot) take it as they take a run per size.
A run without marks is its own single view.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace

import pandas as pd

from experiments.scenario.actions import herd_mark_size, is_join_phase


def size_windows(phases: pd.DataFrame | None) -> list[tuple[int, float, float]]:
    """(N, start, end) per `herd-N` mark of a run's phase table, in time order."""
    if phases is None or phases.empty or "phase" not in phases:
        return []
    rows = list(phases.sort_values("start_s", kind="stable").itertuples())
    windows = []
    for index, row in enumerate(rows):
        size = herd_mark_size(row.phase)
        if size is None:
            continue
        end = next((float(later.start_s) for later in rows[index + 1:] if not is_join_phase(later.phase)), math.inf)
        windows.append((size, float(row.start_s), end))
    return windows


def at_sizes(run) -> list:
    """A RunData per measured size of a sweep run (its `members` that size, its herd that size's changes);
    `[run]` for a run without herd marks."""
    windows = size_windows(run.phases)
    if not windows:
        return [run]
    herd = run.herd
    views = []
    for size, start, end in windows:
        mine = herd[(herd["t"] >= start) & (herd["t"] < end)] if not herd.empty else herd
        views.append(replace(run, record=replace(run.record, members=size), herd=mine))
    return views


def by_size(runs: Iterable) -> list:
    """Every run as its views, one per measured group size."""
    return [view for run in runs for view in at_sizes(run)]


def sizes_of(run) -> list[int]:
    """The group sizes a run measured the herd at: its marks' sizes, else its own size (none when unknown)."""
    return sorted({view.group_size for view in at_sizes(run) if view.group_size is not None})


def size_text(run) -> str:
    """`N = 8`, or for a sweep `N = 4 to 32`."""
    sizes = sizes_of(run)
    if len(sizes) > 1:
        return f"N = {sizes[0]} to {sizes[-1]}"
    return f"N = {sizes[0]}" if sizes else "N = ?"
