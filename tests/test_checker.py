"""The checker over synthetic event logs: planted anomalies are found, clean logs pass."""

from __future__ import annotations

import pytest

from experiments.run.conditions import Grade
from experiments.summary.check_queries import Verdict
from experiments.synthetic.anomalies import Anomaly
from experiments.synthetic.simulation import SyntheticRun
from tests.fixtures.spark import SERVER_EXTRA

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]  # the first test pays for the shared runs

DURATION = SyntheticRun().duration_s


def _check(summary, name):
    return next(check for check in summary.checks if check.check == name)


def test_clean_log_passes_every_check(synthetic_runs):
    summary = synthetic_runs["clean"]
    failing = {c.check: (c.verdict, c.detail) for c in summary.checks if c.verdict not in (Verdict.TRUE, Grade.OK)}
    assert failing == {}
    assert summary.checks[0].check == "conditions"   # the run vouches for itself first
    assert len(summary.checks) == 12    # conditions and the eleven checks of what the group did


def test_torn_last_line_is_skipped_and_counted(synthetic_runs):
    facts = synthetic_runs["clean"].facts
    assert facts.unreadable_lines == 1
    assert facts.produced_records == int(SyntheticRun().rate * (DURATION - 1))


def test_double_ownership_is_found_with_its_window_and_members(synthetic_runs):
    check = _check(synthetic_runs["planted"], "double-ownership")
    assert check.verdict is Verdict.FALSE and check.count == 1
    window = check.evidence.iloc[0]
    assert window["tp"] == "t0-2" and len(window["owners"]) == 2
    assert window["start"] == pytest.approx(0.40 * DURATION, abs=0.01)
    assert 0.3 < window["duration_s"] <= 1.0   # the intruder's claim ends at the next rebalance


def test_consumption_by_a_member_that_is_not_the_sole_owner_is_found(synthetic_runs):
    check = _check(synthetic_runs["planted"], "consumed-without-ownership")
    assert check.verdict is Verdict.FALSE
    span = check.evidence.iloc[0]
    assert span["tp"] == "t0-2" and len(span["owners_then"]) == 2 and span["records"] > 0


def test_lost_record_is_found(synthetic_runs):
    check = _check(synthetic_runs["planted"], "lost-records")
    assert check.verdict is Verdict.FALSE
    first = check.evidence.iloc[0]     # the skipped offset comes first; the orphaned partition later
    assert first["tp"] == "t0-1" and abs(first["t_produce"] - 0.30 * DURATION) < 1.0
    assert "unseen" in check.detail    # the orphaned partition's last records are only 'unseen'


def test_duplicate_is_found(synthetic_runs):
    check = _check(synthetic_runs["planted"], "duplicates")
    assert check.verdict is Verdict.FALSE and check.count == 1
    row = check.evidence.iloc[0]
    assert (row["tp"], row["records"], row["by"]) == ("t0-1", 1, "one member")
    assert row["from_offset"] == row["to_offset"] and row["member"] == row["earlier_member"]


def test_offset_regression_is_found(synthetic_runs):
    check = _check(synthetic_runs["planted"], "offset-regressions")
    assert check.verdict is Verdict.FALSE and check.count == 1
    row = check.evidence.iloc[0]
    assert row["tp"] == "t0-3" and row["highest_before"] - row["offset"] == 5


def test_slow_records_are_found(synthetic_runs):
    check = _check(synthetic_runs["planted"], "slow-records")
    assert check.verdict is Verdict.FALSE
    assert set(check.evidence["tp"]) == {"t0-0"}
    assert (check.evidence["latency_ms"] > 3000).all()


def test_non_convergence_is_found(synthetic_runs):
    check = _check(synthetic_runs["planted"], "convergence")
    assert check.verdict is Verdict.FALSE and check.count == 1
    row = check.evidence.iloc[0]
    assert row["tp"] == "t0-4" and len(row["owners"]) == 0


def test_convergence_says_from_which_event_it_waited_and_how_long_is_allowed(synthetic_runs):
    clean = _check(synthetic_runs["clean"], "convergence")
    assert clean.verdict is Verdict.TRUE
    assert "partitions had exactly one owner" in clean.detail
    assert "after the last fault event at t=13.0" in clean.detail and "crash" in clean.detail
    assert clean.detail.endswith("(allowed: 9 s, 2 x session timeout + 5 s)")   # a session of 2 s
    planted = _check(synthetic_runs["planted"], "convergence")
    assert planted.detail.startswith("1 of 6 partitions without exactly one owner")
    assert "2 x session timeout + 5 s" in planted.detail


def test_fenced_commit_is_found(synthetic_runs):
    check = _check(synthetic_runs["planted"], "fenced-commits")
    assert check.verdict is Verdict.FALSE and check.count == 1
    assert check.evidence.iloc[0]["error"] == "ILLEGAL_GENERATION"


def test_a_warm_up_that_timed_out_is_found_with_the_group_it_left(synthetic_runs):
    check = _check(synthetic_runs["planted"], "warm-up")
    assert check.verdict is Verdict.FALSE and check.count == 1
    partitions = SyntheticRun().partitions
    assert check.detail == (f"at 0.0 s, {SyntheticRun().members} members up, {partitions - 1} of {partitions} "
                            "partitions owned, 0 owned twice")
    assert _check(synthetic_runs["clean"], "warm-up").detail == "the group was stable first"


def test_servers_and_members_agreeing_pass_the_witness_check(synthetic_runs):
    check = _check(synthetic_runs["clean"], "server-witness")
    assert check.verdict is Verdict.TRUE and check.count == 0
    # JoinGroup + SyncGroup per member and rebalance: groups of 3, 5, 3 and 2
    assert "servers 26, members 26 requests" in check.detail
    assert "a window may differ by 10 requests or 25% of the larger count" in check.detail


def test_servers_counting_more_than_the_members_logged_is_flagged(synthetic_runs):
    check = _check(synthetic_runs["planted"], "server-witness")
    assert check.verdict is Verdict.FALSE and check.count == 1
    window = check.evidence.iloc[0]
    assert (window["from_moment"], window["to_moment"]) == ("before join", "before leave")
    assert window["difference"] == SERVER_EXTRA and window["client"] == 5 * (5 + 2)


def test_a_log_without_server_samples_leaves_the_witness_unknown(synthetic_runs):
    check = _check(synthetic_runs["unsampled"], "server-witness")
    assert check.verdict is Verdict.UNKNOWN and "no server samples" in check.detail


def test_every_planted_anomaly_has_a_check_that_finds_it(synthetic_runs):
    finds = {
        Anomaly.DOUBLE_OWNERSHIP: "double-ownership", Anomaly.LOST_RECORD: "lost-records",
        Anomaly.DUPLICATE: "duplicates", Anomaly.OFFSET_REGRESSION: "offset-regressions",
        Anomaly.SLOW_RECORD: "slow-records", Anomaly.NON_CONVERGENCE: "convergence",
        Anomaly.FENCED_COMMIT: "fenced-commits", Anomaly.WARMUP_TIMEOUT: "warm-up",
    }
    assert set(finds) == set(Anomaly)
    verdicts = {c.check: c.verdict for c in synthetic_runs["planted"].checks}
    assert {check: verdicts[check] for check in finds.values()} == dict.fromkeys(finds.values(), Verdict.FALSE)


def test_what_a_run_was_comes_from_its_record(synthetic_runs):
    from experiments.folders.run_folder import RunFolder

    summary = synthetic_runs["clean"]
    meta = RunFolder(summary.folder.path).record()
    assert (summary.record.backend, summary.record.strategy, summary.record.members) == (meta.backend, meta.strategy,
                                                                                   meta.members)
    assert summary.facts.partitions == sum(meta.topics.values())
