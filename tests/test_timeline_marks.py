"""Faults and membership changes, as the charts, the runner's counts and the live display name them.

- a member leaving (written as fault events) and a join (a phase) are membership changes: drawn as teal
  dashed lines, not as a shaded fault window, and not counted as faults;
- a link fault is named for what it does to the member's link (`m001 cut off (coord)`), never
  "partition m001" on a chart whose rows are Kafka partitions.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from experiments.folders.run_folder import RunFolder
from experiments.report import plots
from experiments.run.progress import Progress, _recent_line
from experiments.scenario import load, resolve
from experiments.scenario.actions import MEMBERSHIP_KINDS, is_membership_phase, phase_name
from experiments.scenario.labels import fault_label, is_membership_change
from rebalance import events as ev

SCENARIO = """\
name = "tiny"
seed = 1
duration = 8

[cluster]
zookeeper_nodes = 1
brokers = 1

[[topics]]
name = "t0"
partitions = 4

[group]
members = 2
"""


def run_with(faults: list[dict], phases: list[tuple[str, float]]) -> SimpleNamespace:
    """What `_draw_timeline` reads of a summarised run."""
    return SimpleNamespace(
        faults=pd.DataFrame(faults, columns=["fault_id", "kind", "target", "link", "start", "end"]),
        phases=pd.DataFrame([{"phase": name, "start_s": start} for name, start in phases]))


HERD = run_with(
    faults=[{"fault_id": "f002", "kind": "leave", "target": "m004", "link": None, "start": 17.0, "end": 30.0}],
    phases=[("setup", 0.0), ("timeline", 10.0), ("join-1", 12.0), ("heal", 30.0)])
SPLIT = run_with(
    faults=[{"fault_id": "f001", "kind": "partition", "target": "m001", "link": "coord", "start": 12.0, "end": 24.0},
            {"fault_id": "f002", "kind": "crash", "target": "m002", "link": None, "start": 15.0, "end": 15.01}],
    phases=[("setup", 0.0), ("timeline", 10.0), ("heal", 30.0)])


def drawn(run) -> tuple[list, list]:
    fig, ax = plt.subplots()
    try:
        labels = plots._draw_timeline(ax, run, 40.0)
        shaded = [patch for patch in ax.patches]
        return labels, shaded
    finally:
        plt.close(fig)


def test_a_leave_and_a_join_are_drawn_as_membership_changes_not_fault_windows():
    labels, shaded = drawn(HERD)
    assert shaded == []                                    # no pink window
    membership = [(x, text) for x, text, color in labels if color == plots.MEMBERSHIP_COLOR]
    assert membership == [(12.0, "join-1"), (17.0, "m004 leaves")]
    assert not [text for _, text, color in labels if color == plots.INSTANT_COLOR]


def test_a_fault_is_still_a_window_and_a_cut_is_named_as_a_cut():
    labels, shaded = drawn(SPLIT)
    assert len(shaded) == 1                                # the cut; the crash is a marker
    faults = {text for _, text, color in labels if color == plots.INSTANT_COLOR}
    assert faults == {"m001 cut off (coord)", "crash m002"}
    assert not any("partition" in text for _, text, _ in labels)


def test_the_legend_names_membership_changes_only_where_there_are_some():
    assert "member joins or leaves" in [name for _, name in plots._timeline_handles(HERD)]
    assert "member joins or leaves" not in [name for _, name in plots._timeline_handles(SPLIT)]


@pytest.mark.parametrize(("kind", "target", "link", "label"), [
    ("partition", "m001", "coord", "m001 cut off (coord)"),
    ("partition", "m001", "both", "m001 cut off (coord and data)"),
    ("latency", "m002", "data", "m002 delayed (data)"),
    ("reset", "m003", "coord", "m003 connections reset (coord)"),
    ("leave", "m004", None, "m004 leaves"),
    ("crash", "m001", None, "crash m001"),
    ("zk_kill", "zk-0", None, "zk_kill zk-0"),
])
def test_fault_labels(kind, target, link, label):
    assert fault_label(kind, target, link) == label


def test_joins_scaling_and_leaves_are_the_membership_changes():
    assert MEMBERSHIP_KINDS == ("leave",)
    assert is_membership_change("leave") and not is_membership_change("crash")
    assert is_membership_phase(phase_name("join", ("m005", "m006"), {}))
    assert is_membership_phase(phase_name("scale", (), {"to": 100}))
    assert not any(map(is_membership_phase, ("heal", "timeline", "join-the-dots", "")))


def _event(event_type: str, /, **fields) -> dict:
    return {"type": event_type, "member": "", **fields}


def test_the_runner_counts_a_leave_and_a_join_as_membership_changes_not_faults(tmp_path):
    loaded = load(_scenario_file(tmp_path))
    progress = Progress(RunFolder(tmp_path).events, loaded, resolve(loaded))
    for event in (_event(ev.PHASE, name="timeline"), _event(ev.PHASE, name="join-1", fault_id="f001"),
                  _event(ev.FAULT_STARTED, kind="leave", target="m004", fault_id="f002"),
                  _event(ev.FAULT_STARTED, kind="partition", target="m001", link="coord", fault_id="f003"),
                  _event(ev.FAULT_STOPPED, kind="partition", target="m001", link="coord", fault_id="f003"),
                  _event(ev.FAULT_STOPPED, kind="leave", target="m004", fault_id="f002")):
        progress.feed(event)
    assert (progress.faults, progress.membership_changes) == (1, 2)
    assert progress.recent == ["phase: timeline", "membership change: join-1", "membership change: m004 leaves",
                               "fault started: m001 cut off (coord)", "fault stopped: m001 cut off (coord)"]


def test_the_final_line_says_faults_and_membership_changes_apart(tmp_path, capsys):
    loaded = load(_scenario_file(tmp_path))
    progress = Progress(RunFolder(tmp_path).events, loaded, resolve(loaded))
    progress.feed(_event(ev.FAULT_STARTED, kind="leave", target="m004"))
    progress.final(SimpleNamespace(backend="classic", events_dir=RunFolder(tmp_path).events), "completed", "")
    assert "faults 0, membership changes 1" in " ".join(capsys.readouterr().err.split())
    assert _recent_line(_event(ev.FAULT_STOPPED, kind="leave", target="m004")) is None


def _scenario_file(folder: Path) -> Path:
    path = folder / "tiny.toml"
    path.write_text(SCENARIO)
    return path
