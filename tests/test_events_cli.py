"""`rebalance-lab events RUN`: a run's events sorted, one line each, timed as the charts are (no Spark).

- times are seconds since the run's first event, in order across the files of every process;
- --type and --member narrow it (a member's faults included; a legacy id `<group>_<name>` found by its name);
- a missing run folder, a folder of runs, and an unknown type are clear errors (the types listed);
- every declared event type has a line of its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from experiments.cli.app import app
from experiments.cli.events import DETAILS, partitions_text
from experiments.folders.run_folder import RunFolder
from experiments.synthetic.simulation import SyntheticRun, write_run
from rebalance import events as ev
from rebalance.events import EventRecorder

T0_NS = 5_000_000_000_000


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    """A simulated legacy run: a link fault at 3 s, two joining at 6 s and leaving at 10 s, a crash at 13 s."""
    return write_run(tmp_path_factory.mktemp("runs") / "run", SyntheticRun(backend="legacy", duration_s=16.0))


def events(*args: str):
    result = CliRunner().invoke(app, ["events", *args])
    return result, [line for line in result.stdout.splitlines() if line.strip()]


def seconds(line: str) -> float:
    return float(line.split()[0])


def test_every_event_in_time_order_from_zero(synthetic):
    result, lines = events(str(synthetic))
    assert result.exit_code == 0, result.output
    total = sum(1 for _ in ev.read_events(RunFolder(synthetic).events))
    assert len(lines) == total
    times = [seconds(line) for line in lines]
    assert times[0] == 0.0 and times == sorted(times)
    assert f"{total:,} of {total:,} events" in result.stderr


def test_an_unknown_member_is_refused_with_the_runs_member_names(synthetic):
    result, lines = events(str(synthetic), "--member", "h000-1")
    assert result.exit_code == 2 and not lines
    assert "no member named 'h000-1'; its members are " in result.stderr and "m000" in result.stderr


def test_a_type_and_a_member_narrow_it(synthetic):
    result, lines = events(str(synthetic), "--type", "partitions_assigned,fault_started", "--member", "m000")
    assert result.exit_code == 0, result.output
    kinds = {line.split()[2] for line in lines}
    assert kinds == {"partitions_assigned", "fault_started"}
    assert all(line.split()[1] in ("m000", "(runner)") for line in lines)
    fault = next(line for line in lines if "fault_started" in line)
    assert seconds(fault) == pytest.approx(3.0, abs=0.01) and "m000 delayed (data)" in fault


def write_events(run_dir: Path, *events: tuple[str, int, str, str, dict]) -> Path:
    """Events at chosen monotonic times: (file, ns after T0_NS, member, type, fields)."""
    for source, offset_ns, member, kind, fields in events:
        with EventRecorder(RunFolder(run_dir).events / f"{source}.jsonl", run_id="r", backend="legacy",
                           clock=lambda offset=offset_ns: (T0_NS + offset, 1_700_000_000_000 + offset // 10**6)) as out:
            out.emit(kind, member, **fields)
    return run_dir


def test_lines_read_like_the_chart(tmp_path):
    run = write_events(
        tmp_path / "run",
        ("h000", 2_500_000_000, "split_m001", ev.PARTITIONS_ASSIGNED, {"partitions": ["t0-0", "t0-1", "t0-2", "t0-5"]}),
        ("runner", 0, "", ev.PHASE, {"name": "setup"}),
        ("runner", 1_000_000_000, "", ev.PHASE, {"name": "timeline"}),
        ("runner", 4_000_000_000, "", ev.FAULT_STARTED, {"fault_id": "f001", "kind": "partition", "target": "m001",
                                                          "targets": ["m001"], "member_ids": ["split_m001"],
                                                          "link": "coord"}),
        ("runner", 5_000_000_000, "", ev.FAULT_STARTED, {"fault_id": "f002", "kind": "leave", "target": "m002",
                                                          "targets": ["m002"], "link": None}),
        ("h000", 6_250_000_000, "split_m001", ev.COMMIT_FAILED, {"offsets": {"t0-1": 9, "t0-0": 7},
                                                                  "error": "ILLEGAL_GENERATION"}),
    )
    result, lines = events(str(run))
    assert lines == [
        "    0.000  (runner)    phase                 setup",
        "    1.000  (runner)    phase                 timeline",
        "    2.500  split_m001  partitions_assigned   t0-0..2 t0-5",
        "    4.000  (runner)    fault_started         m001 cut off (coord) [f001]",
        "    5.000  (runner)    fault_started         m002 leaves (a membership change) [f002]",
        "    6.250  split_m001  commit_failed         ILLEGAL_GENERATION, t0-0=7 t0-1=9",
    ]
    assert "the timeline (the scenario's `at` times) began at t = 1.000 s" in result.stderr
    _, mine = events(str(run), "--member", "m001")
    assert [line.split()[2] for line in mine] == ["partitions_assigned", "fault_started", "commit_failed"]


def test_a_missing_run_folder_is_named(tmp_path):
    result, _ = events(str(tmp_path / "nope"))
    assert result.exit_code == 2 and f"{tmp_path / 'nope'}: no such run folder" in result.output


def test_a_folder_of_runs_names_them(tmp_path, synthetic):
    compare = tmp_path / "compare"
    RunFolder(compare / "legacy").events.mkdir(parents=True)
    result, _ = events(str(compare))
    assert result.exit_code == 2
    assert "not a run folder (no events/ in it); it holds runs:" in result.output and "legacy" in result.output


def test_an_unknown_type_lists_the_known_ones(synthetic):
    result, _ = events(str(synthetic), "--type", "partition_assigned")
    assert result.exit_code == 2
    assert "--type partition_assigned: no such event type" in result.output
    assert all(kind in result.output for kind in ev.EVENT_TYPES)


def test_every_declared_type_has_its_line():
    assert set(DETAILS) == set(ev.EVENT_TYPES)
    for kind, detail in DETAILS.items():
        assert isinstance(detail({"type": kind}), str), kind     # missing fields do not break a line


def test_partitions_are_written_as_ranges():
    assert partitions_text(["t0-3", "t0-1", "t0-2", "t1-0", "t0-7"]) == "t0-1..3 t0-7 t1-0"
    assert partitions_text([]) == "none"


def test_a_torn_last_line_is_skipped(tmp_path):
    run = write_events(tmp_path / "run", ("runner", 0, "", ev.PHASE, {"name": "setup"}))
    with open(RunFolder(run).events / "runner.jsonl", "a") as handle:
        handle.write(json.dumps({"type": "phase", "name": "warmup"})[:12])
    result, lines = events(str(run))
    assert result.exit_code == 0 and len(lines) == 1
