"""The runner end to end, on real ZooKeeper, real brokers and real member processes.

- one scenario (a member crash and a coord-link black hole) on both backends: the fault events match
  in target and in time, within TOLERANCE_S of each other and of the schedule;
- the black-holed coordinator link stops the classic member's heartbeats; on legacy the black-holed
  member loses its ZooKeeper connection;
- an invalid scenario is rejected before anything starts;
- an interrupted run (SIGINT to the runner) leaves nothing running and keeps its events.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from experiments.cli.app import app
from experiments.faults.process import processes_with_marker
from experiments.folders.comparison_folder import ComparisonFolder
from experiments.folders.run_folder import RunFolder
from experiments.run import comparison
from experiments.scenario import load
from rebalance.events import read_events

TOLERANCE_S = 0.5   # how far a fault may land from its scheduled time, and from the other backend's

SCENARIO = """\
name = "crash-and-coord-partition"
seed = 3
duration = 24
settle = 4

[cluster]
zookeeper_nodes = 1
brokers = 1

[[topics]]
name = "t0"
partitions = 6

[producer]
rate = 20

[group]
members = 3
session_timeout_ms = 6000

[group.classic]
"heartbeat.interval.ms" = 1000

[[timeline]]
at = 4
action = "crash"
member = 1

[[timeline]]
at = 8
action = "link"
member = 0
link = "coord"
fault = "partition"
duration = 10
"""


def fault_timeline(run_dir: Path) -> tuple[int, list[dict]]:
    events = list(read_events(RunFolder(run_dir).events / "runner.jsonl"))
    [start] = [event["ts_ns"] for event in events if event["type"] == "phase" and event["name"] == "timeline"]
    faults = [event for event in events if event["type"] in ("fault_started", "fault_stopped")]
    return start, faults


def offset(event: dict, start: int) -> float:
    return (event["ts_ns"] - start) / 1e9


@pytest.mark.zk
@pytest.mark.broker
@pytest.mark.slow
def test_same_faults_at_the_same_times_on_both_backends(tmp_path):
    path = tmp_path / "scenario.toml"
    path.write_text(SCENARIO)
    results = comparison.compare(load(path), tmp_path / "run", progress=False, backends=("legacy", "classic"))
    assert [(result.run_dir.name, result.status) for result in results] == [
        ("legacy", "completed"), ("classic", "completed")], [result.reason for result in results]

    timelines = {}
    for backend in ("legacy", "classic"):
        start, faults = fault_timeline(tmp_path / "run" / backend)
        timelines[backend] = (start, faults)
        assert [(event["type"], event["fault_id"], event["kind"], event["target"], event["link"])
                for event in faults] == [
            ("fault_started", "f001", "crash", "m001", None),
            ("fault_started", "f002", "partition", "m000", "coord"),
            ("fault_stopped", "f002", "partition", "m000", "coord"),
            ("fault_stopped", "f001", "crash", "m001", None),       # closed by the final heal
        ]
        assert faults[0]["member_ids"] == ["lab-group_m001" if backend == "legacy" else "m001"]
        for event, scheduled in zip(faults[:3], (4, 8, 18), strict=True):
            assert abs(offset(event, start) - scheduled) < TOLERANCE_S, (backend, event)
        crash_stop, link_stop = faults[3], faults[2]
        assert crash_stop["observed_ts_ns"] is not None, "the crashed process was seen to die"
        assert link_stop["observed_ts_ns"] is not None, "the black hole held some of the member's traffic"
        lock = json.loads(RunFolder(tmp_path / "run" / backend).lock.read_text())
        assert lock["status"] == "completed" and lock["seed"] == 3
        samples = [event for event in read_events(RunFolder(tmp_path / "run" / backend).events / "runner.jsonl")
                   if event["type"] == "server_counters"]
        moments = [event["moment"] for event in samples]
        for moment in ("phase warmup", "quiet start", "quiet end", "phase timeline", "before f001", "after f001",
                       "phase heal", "phase settle", "phase teardown"):
            assert moment in moments, (backend, moments)
        assert {event["server"] for event in samples} == {"zookeeper" if backend == "legacy" else "brokers"}
        served = [event["served"] for event in samples]
        assert served == sorted(served) and served[-1] > served[0], (backend, served)   # the group's work, seen
        assert lock["schedule"] == json.loads(ComparisonFolder(tmp_path / "run").record_file.read_text())["schedule"]

    (legacy_start, legacy), (classic_start, classic) = timelines["legacy"], timelines["classic"]
    for one, other in zip(legacy[:3], classic[:3], strict=True):
        assert abs(offset(one, legacy_start) - offset(other, classic_start)) < TOLERANCE_S

    # Modern: the black-holed coordinator link stops m000's heartbeats for the window.
    events = list(read_events(RunFolder(tmp_path / "run" / "classic").events))
    beats = [offset(event, classic_start) for event in events
             if event["type"] == "coordination_request" and event.get("op") == "Heartbeat"
             and event["member"] == "m000" and event.get("error") != "NETWORK_EXCEPTION"]   # answered ones
    assert any(t < 8 for t in beats), beats
    assert not [t for t in beats if 9 < t < 18], f"heartbeats passed the black hole: {beats}"

    # Legacy: the black-holed member loses its ZooKeeper connection during the window.
    events = list(read_events(RunFolder(tmp_path / "run" / "legacy").events))
    suspended = [offset(event, legacy_start) for event in events
                 if event["type"] == "session_state" and event["member"].endswith("m000")
                 and event.get("state") == "SUSPENDED"]
    assert [t for t in suspended if 8 < t < 18], suspended


def test_an_invalid_scenario_is_rejected_before_anything_starts(tmp_path):
    bad = SCENARIO.replace('fault = "partition"', 'fault = "blackhole"').replace("member = 1", "member = 5")
    path = tmp_path / "bad.toml"
    path.write_text(bad)
    out = tmp_path / "never"
    result = CliRunner().invoke(app, ["run", str(path), "--backend", "legacy", "--out", str(out)])
    assert result.exit_code == 2
    lines = bad.splitlines()
    member_line = lines.index("member = 5") + 1
    fault_line = lines.index('fault = "blackhole"') + 1
    assert f"bad.toml:{member_line}: timeline[0].member: member 5 is out of range" in result.output
    assert f"bad.toml:{fault_line}: timeline[1].fault" in result.output
    assert not out.exists(), "nothing was started"


def test_a_backend_the_scenario_is_not_for_is_refused(tmp_path):
    path = tmp_path / "classic-only.toml"
    path.write_text(SCENARIO.replace("seed = 3", 'seed = 3\nbackends = ["classic"]'))
    result = CliRunner().invoke(app, ["run", str(path), "--backend", "legacy", "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "classic only" in result.output


def start_run_until_timeline(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """A classic run (with ZooKeeper, so its cleanup is exercised too) in a child process, once its
    timeline has started."""
    path = tmp_path / "scenario.toml"
    path.write_text(SCENARIO.replace("duration = 24", "duration = 120").replace(
        "at = 8\naction", "at = 60\naction"))
    run_dir = (tmp_path / "run").resolve()
    process = subprocess.Popen([sys.executable, "-m", "experiments.cli.app", "run", str(path), "--backend", "classic",
                                "--out", str(run_dir), "--no-progress"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 180
    runner_events = RunFolder(run_dir).events / "runner.jsonl"
    while not (runner_events.exists() and any(
            event.get("name") == "timeline" for event in read_events(runner_events))):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"the run never reached its timeline: {process.stdout.read().decode()}")
        time.sleep(0.2)
    return process, run_dir


def assert_nothing_left(run_dir: Path) -> dict:
    assert processes_with_marker(str(run_dir)) == [], "a child of the run survived it"
    lock = json.loads(RunFolder(run_dir).lock.read_text())
    if lock["cluster"]["zookeeper_provider"] == "docker":
        ensemble = lock["cluster"]["zookeeper_ensemble"]
        left = subprocess.run(["docker", "ps", "-aq", "--filter", f"name=lab-{ensemble}-"],
                              capture_output=True, text=True).stdout.split()
        assert left == [], "a ZooKeeper container survived the run"
    return lock


@pytest.mark.zk
@pytest.mark.broker
@pytest.mark.slow
def test_an_interrupted_run_leaves_nothing_running(tmp_path):
    process, run_dir = start_run_until_timeline(tmp_path)
    try:
        assert len(processes_with_marker(str(run_dir))) >= 4, "members, producer and broker were running"
        os.kill(process.pid, signal.SIGINT)
        output, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, output.decode()
    lock = assert_nothing_left(run_dir)
    assert lock["status"] == "interrupted"
    member_files = sorted(p.name for p in RunFolder(run_dir).events.glob("h*.jsonl"))
    assert member_files == ["h000.jsonl", "h001.jsonl", "h002.jsonl"]
    assert any(event["type"] == "member_stopped" for event in read_events(RunFolder(run_dir).events / "h000.jsonl")), \
        "members were stopped cleanly and their events kept"


@pytest.mark.zk
@pytest.mark.broker
@pytest.mark.slow
def test_a_killed_runner_leaves_nothing_running(tmp_path):
    """SIGKILL gives the runner no chance to clean up: members die with it (parent-death signal),
    brokers watch its pid, and ZooKeeper's reaper removes the ensemble."""
    process, run_dir = start_run_until_timeline(tmp_path)
    process.kill()
    process.communicate(timeout=30)
    deadline = time.monotonic() + 60
    while True:
        try:
            assert_nothing_left(run_dir)
            break
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    recorded = [event["type"] for path in RunFolder(run_dir).events.glob("h*.jsonl") for event in read_events(path)]
    assert "member_started" in recorded and "partitions_assigned" in recorded, \
        "what the members recorded before the kill is kept"


@pytest.mark.zk
@pytest.mark.broker
@pytest.mark.slow
def test_a_part_dying_by_itself_ends_the_run_cleanly(tmp_path):
    process, run_dir = start_run_until_timeline(tmp_path)
    try:
        members = [pid for pid in processes_with_marker(str(run_dir))
                   if b"experiments.run.member_cli" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]
        os.kill(members[0], signal.SIGKILL)     # not in the schedule: the run cannot go on as declared
        output, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1, output.decode()
    lock = assert_nothing_left(run_dir)
    assert lock["status"] == "failed" and "exited by itself" in lock["reason"]


def test_every_action_has_one_handler():
    from experiments.faults import registry
    from experiments.scenario import Action

    expanded = {"rolling_restart"}   # resolve() turns it into single restarts
    assert sorted(action.value for action in Action if action.value not in expanded) == registry.names()
    with pytest.raises(ValueError, match="already has a handler"):
        registry.register(registry.handler_for("crash"))


def test_backend_profiles_answer_what_the_runner_asks():
    from rebalance.backends import Server, backend_names, profile
    from rebalance.member import MemberConfig

    assert backend_names() == ("classic", "kip848", "legacy")
    legacy, classic = profile("legacy"), profile("classic")
    assert legacy.member_id("lab-group", "m001") == "lab-group_m001" and classic.member_id("lab-group", "m001") == "m001"
    assert legacy.strategies == ("range", "roundrobin") and "cooperative-sticky" in classic.strategies
    assert (legacy.needs_zookeeper, legacy.coordinator_in_brokers, legacy.connects_to) == (True, False, Server.ZOOKEEPER)
    assert (classic.needs_zookeeper, classic.coordinator_in_brokers, classic.connects_to) == (False, True, Server.BROKERS)
    config = MemberConfig(group="g", topics=("t",), zk_connect="127.0.0.1:1", extra={"rebalance.max.retry": 3})
    with pytest.raises(ValueError, match="unknown 0.8 consumer setting"):
        legacy.check(config)
    with pytest.raises(ValueError, match="unknown backend 'kip849'"):
        profile("kip849")
