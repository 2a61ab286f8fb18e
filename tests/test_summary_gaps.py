"""`coordinator_gap_s`: each member's time without a coordinator after the coordinator's broker is killed
or its coordination link cut, from a small hand-written run summarised by Spark."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from experiments.folders.run_folder import RunFolder
from experiments.summary.coordinator_gaps import COLUMNS, gap_table, group_gap_s
from tests.fixtures.run_record import write_record
from tests.fixtures.spark import summarised_with_the_suite

pytestmark = pytest.mark.timeout(900)


def line(t_s: float, **fields) -> str:
    return json.dumps({"run_id": "r", "backend": "classic", "ts_ns": int(t_s * 1e9), "ts_ms": int(t_s * 1e3),
                       "process": fields.get("member") or "runner", **fields}) + "\n"


def request(t_s: float, member: str, op: str, error: str | None = None) -> str:
    return line(t_s, member=member, type="coordination_request", op=op, group="g", latency_ms=1.0, error=error)


def write_gap_run(root) -> None:
    """Members a, b and d speak the classic protocol; c stopped before the kill; z talks to ZooKeeper only.
    The coordinator's broker is killed at 3.0 s and seen dead at 3.05 s; a's coordination link is cut at
    6.5 s (and b's data link slowed, which is no cut)."""
    events = RunFolder(root).events
    events.mkdir(parents=True)
    write_record(root, topics={"t": 1}, members=5)
    (events / "members.jsonl").write_text("".join([
        *(line(0.5, member=m, type="member_started") for m in "abcdz"),
        *(request(t, m, "Heartbeat") for t in (1.0, 2.0) for m in "abcd"),
        request(0.9, "a", "FindCoordinator"),                          # before the fault: not in the gap
        line(1.0, member="z", type="coordination_request", op="get", path="/consumers/g/ids", latency_ms=1.0),
        line(2.5, member="c", type="member_stopped", reason="crash"),
        request(3.02, "d", "Heartbeat"),                               # answered before the broker was seen dead
        request(3.5, "a", "Heartbeat", "NETWORK_EXCEPTION"),
        request(3.6, "a", "FindCoordinator"),
        request(3.7, "a", "Heartbeat", "NOT_COORDINATOR"),
        request(4.0, "a", "FindCoordinator"),
        request(4.2, "a", "OffsetCommit", "COORDINATOR_LOAD_IN_PROGRESS"),
        request(4.5, "a", "Heartbeat"),                               # a: 1.45 s, two lookups
        request(3.3, "b", "Heartbeat", "NETWORK_EXCEPTION"),
        request(3.4, "b", "FindCoordinator"),
        request(5.0, "b", "JoinGroup", "REBALANCE_IN_PROGRESS"),       # b: 1.95 s (the coordinator answered)
        request(3.9, "d", "Heartbeat"),                               # d: 0.85 s
        line(4.0, member="z", type="coordination_request", op="get", path="/consumers/g/ids", latency_ms=1.0),
        request(6.0, "b", "Heartbeat"),
        request(7.0, "a", "Heartbeat", "NETWORK_EXCEPTION"),
        request(7.2, "b", "Heartbeat"),
        request(7.6, "a", "Heartbeat"),                               # a after its cut: 1.1 s
        *(line(8.0, member=m, type="member_stopped", reason="close") for m in "abdz"),
    ]))
    (events / "runner.jsonl").write_text("".join([
        line(3.0, member="", type="fault_started", fault_id="f1", kind="coordinator_kill", action="coordinator_kill",
             target="coordinator", member_ids=[]),
        line(6.0, member="", type="fault_stopped", fault_id="f1", kind="coordinator_kill",
             action="coordinator_kill", target="coordinator", member_ids=[], observed_ts_ns=int(3.05e9),
             healed_ts_ns=int(6.0e9)),
        line(6.5, member="", type="fault_started", fault_id="f2", kind="partition", action="link", target="a",
             member_ids=["a"], link="coord"),
        line(6.5, member="", type="fault_started", fault_id="f3", kind="latency", action="link", target="b",
             member_ids=["b"], link="coord"),
        line(7.5, member="", type="fault_stopped", fault_id="f2", kind="partition", action="link", target="a",
             member_ids=["a"], link="coord"),
        line(7.5, member="", type="fault_stopped", fault_id="f3", kind="latency", action="link", target="b",
             member_ids=["b"], link="coord"),
    ]))


summarised_with_the_suite("coordinator-gaps", write_gap_run)


@pytest.mark.spark
def test_each_member_s_time_without_a_coordinator_and_the_group_maximum(synthetic_runs):
    summary = synthetic_runs["coordinator-gaps"]
    folder = RunFolder(summary.folder.path)
    gaps = summary.tables["coordinator_gaps"]
    assert list(gaps.columns) == COLUMNS
    rows = [(r.fault_id, r.member, round(r.gap_s, 3), r.first_answer, r.find_coordinator_requests)
            for r in gaps.itertuples()]
    assert rows == [("f1", "a", 1.45, "Heartbeat", 2), ("f1", "b", 1.95, "JoinGroup", 1),
                    ("f1", "d", 0.85, "Heartbeat", 0), ("f2", "a", 1.1, "Heartbeat", 0)]
    assert summary.facts.coordinator_gap_s == pytest.approx(1.95)
    written = pd.read_parquet(folder.summary_table("coordinator_gaps"))
    assert written["gap_s"].max() == pytest.approx(1.95)
    assert json.loads(folder.summary_record.read_text())["facts"]["coordinator_gap_s"] == \
        pytest.approx(1.95)


def test_a_run_without_such_faults_has_an_empty_table_and_no_figure():
    table = gap_table(pd.DataFrame())
    assert list(table.columns) == COLUMNS and table.empty
    assert group_gap_s(table) is None
    unanswered = gap_table(pd.DataFrame([{"fault_id": "f1", "kind": "coordinator_kill", "link": None, "member": "a",
                                          "fault_t": 3.0, "answered_t": None, "first_answer": None,
                                          "find_coordinator_requests": 4}]))
    assert pd.isna(unanswered["gap_s"].iloc[0]) and group_gap_s(unanswered) is None
