"""Herd cost without a barrier: synthetic KIP-848 groups of 8 and 16 members, one joining and one leaving.

The synthetic group moves one partition per change (2 partitions per member, sticky targets): a join
changes the newcomer and one member that gives it a partition, a leave one member that takes the
leaver's. The herd table must count those members' requests, not the group's size, and leave the
steady heartbeats out although every member keeps sending them."""

from __future__ import annotations

import pytest

from experiments.folders.run_folder import RunFolder
from experiments.summary.read_back import herd_points, load_run
from rebalance import heartbeat_kinds
from rebalance.events import read_events
from tests.fixtures.spark import KIP848_JOIN_S, KIP848_LEAVE_S

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

JOINER = ("FindCoordinator", heartbeat_kinds.JOIN, heartbeat_kinds.ASSIGNMENT, "OffsetFetch", heartbeat_kinds.ACK)   # 5
DONOR = (heartbeat_kinds.ASSIGNMENT, heartbeat_kinds.ACK)                          # told to give one up, says it did
TAKER = (heartbeat_kinds.ASSIGNMENT, "OffsetFetch", heartbeat_kinds.ACK)           # gets one once it is free


def _change(summary, kind):
    herd = summary.tables["herd"]
    return herd[(herd["kind"] == kind) & (herd["live_before"] > 0) & (herd["live_after"] > 0)].iloc[0]


def _moved(run_dir, start, end):
    """Members that revoked or were assigned partitions in [start, end): the ones a change affected."""
    return {e["member"] for e in read_events(RunFolder(run_dir).events) if e["type"] in ("partitions_revoked",
            "partitions_assigned") and start <= (e["ts_ns"] - 5_000_000_000_000) / 1e9 < end}


@pytest.mark.parametrize("n", [8, 16])
def test_a_join_costs_the_members_whose_assignment_changes_not_n(synthetic_runs, n):
    summary = synthetic_runs[f"kip848-{n}"]
    join = _change(summary, "join")
    assert (join["t"], join["live_before"], join["live_after"]) == (KIP848_JOIN_S, n, n + 1)
    affected = _moved(summary.folder.path, KIP848_JOIN_S, KIP848_LEAVE_S)
    assert len(affected) == 2                                     # the newcomer and one donor, whatever n
    assert join["requests"] == len(JOINER) + len(DONOR) == 7
    assert join["requests"] < n + 1                               # a barrier would cost every member
    assert join["server_requests"] == join["requests"]            # the broker counts the same requests
    assert join["stop_the_world_s"] == 0.0                        # nobody stopped: partitions were always owned
    assert join["last_assignment_s"] == pytest.approx(0.301, abs=0.01)     # the newcomer's rebalance_completed


@pytest.mark.parametrize("n", [8, 16])
def test_a_leave_costs_its_own_heartbeat_and_the_member_that_takes_over(synthetic_runs, n):
    leave = _change(synthetic_runs[f"kip848-{n}"], "leave")
    assert leave["t"] == pytest.approx(KIP848_LEAVE_S + 0.0005)   # at the leave heartbeat, before member_stopped
    assert leave["requests"] == 1 + len(TAKER) == leave["server_requests"]
    assert leave["stop_the_world_s"] == 0.0


def test_steady_heartbeats_are_sent_but_not_counted(synthetic_runs):
    summary = synthetic_runs["kip848-16"]
    beats = [e for e in read_events(RunFolder(summary.folder.path).events)
             if e.get("op") == heartbeat_kinds.API and KIP848_JOIN_S <= (e["ts_ns"] - 5_000_000_000_000) / 1e9 < KIP848_LEAVE_S]
    steady = [e for e in beats if e["detail"] == heartbeat_kinds.STEADY]
    assert len(steady) >= 16 * 3                                  # every member, about once a second
    changing = len(beats) - len(steady)                           # join, assignment and ack, by two members
    assert _change(summary, "join")["requests"] == changing + 2   # + FindCoordinator and OffsetFetch


def test_the_herd_curve_of_kip848_is_flat(synthetic_runs):
    points = herd_points([load_run(synthetic_runs[f"kip848-{n}"].folder.path) for n in (8, 16)])
    assert list(points["backend"]) == ["kip848", "kip848"]
    assert points.set_index("N")["requests_per_change"].nunique() == 1     # the same cost at 8 and 16


def test_the_server_witness_agrees_for_kip848(synthetic_runs):
    verdicts = {c.check: c for c in synthetic_runs["kip848-16"].checks}
    assert verdicts["server-witness"].verdict.value == "true"
    assert all(verdicts[name].verdict.value == "true" for name in ("double-ownership", "lost-records", "duplicates"))
