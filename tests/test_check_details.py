"""The words of the convergence and server-witness verdicts (no Spark: the functions that phrase them).

- convergence says from which event it waited (the final heal, a fault's start or end, the last member's
  start) and what is allowed, as "allowed: 17 s, 2 x session timeout + 5 s", never "(bound 17 s)" beside a
  run time that reads like the limit;
- the witness states its tolerance; servers that counted nothing read `unknown`, not ok.
"""

from __future__ import annotations

from experiments.summary.check_queries import (
    CheckConfig,
    Verdict,
    awaited_from,
    bound_source,
    convergence_detail,
    witness_result,
)
from rebalance import events as ev


def test_waiting_from_the_final_heal_says_so():
    since = awaited_from(72.86, {"type": ev.FAULT_STOPPED, "kind": "leave", "target": "m004"}, heal_t=72.80)
    assert since == "the final heal at t=72.86 s, which ends every fault still in force"


def test_waiting_from_a_fault_names_it_and_whether_it_began_or_ended():
    cut = {"type": ev.FAULT_STOPPED, "kind": "partition", "target": "m001", "link": "coord"}
    assert awaited_from(22.0, cut, heal_t=30.0) == "the last fault event at t=22.00 s (m001 cut off (coord) ended)"
    crash = {"type": ev.FAULT_STARTED, "kind": "crash", "target": "m002"}
    assert awaited_from(5.5, crash, heal_t=None) == "the last fault event at t=5.50 s (crash m002 began)"
    assert awaited_from(1.25, None, heal_t=None) == "the last member started, at t=1.25 s (no faults)"


def test_the_allowed_time_and_where_it_comes_from():
    assert bound_source(CheckConfig()) == "2 x session timeout + 5 s"
    assert bound_source(CheckConfig(convergence_bound_s=9.0)) == "--convergence-bound-s"
    words = {"partitions": 6, "since": "the final heal at t=56.96 s, which ends every fault still in force",
             "bound_s": 17.0, "source": "2 x session timeout + 5 s"}
    ok = convergence_detail(Verdict.TRUE, after_s=0.004, **words)
    assert ok == ("all 6 partitions had exactly one owner 0.0 s after the final heal at t=56.96 s, which ends every "
                  "fault still in force (allowed: 17 s, 2 x session timeout + 5 s)")
    assert "bound" not in ok
    late = convergence_detail(Verdict.UNKNOWN, short_s=3.14, **words)
    assert late.startswith("not every partition had exactly one owner when the log ends, 3.1 s before the 17 s allowed")
    failed = convergence_detail(Verdict.FALSE, count=2, **words)
    assert failed.startswith("2 of 6 partitions without exactly one owner 17 s after the final heal")


def _row(**values):
    return {"windows": 11, "server": 611.0, "client": 689, "served": 700, "n": 0, **values}


def test_agreement_states_the_tolerance():
    result = witness_result(_row(), CheckConfig())
    assert result.verdict is Verdict.TRUE
    assert result.detail == ("servers and members agree within the tolerance in all 11 windows (a window may differ "
                             "by 10 requests or 25% of the larger count, whichever is more); servers 611, members "
                             "689 requests in total")


def test_disagreement_states_the_tolerance_too():
    result = witness_result(_row(n=2), CheckConfig(witness_tolerance_requests=5, witness_tolerance_fraction=0.1))
    assert (result.verdict, result.count) == (Verdict.FALSE, 2)
    assert result.detail.startswith("members 689, servers 611; 2 of 11 windows differ by more than the tolerance "
                                    "(a window may differ by 5 requests or 10% of the larger count, whichever is more)")
    assert result.detail.endswith("the figures use the members' counts (the servers' are the herd table's "
                                  "server_requests)")


def test_a_witness_disagreement_reads_as_counts_that_differ_not_as_a_violation():
    """The witness checks the lab's own measurement: its finding is two counts apart, not an anomaly."""
    from experiments.summary.verdict_words import Word, read_result

    reading = read_result(witness_result(_row(n=2, server=1343.0, client=1251), CheckConfig()))
    assert reading.word is Word.DIFFER and reading.label == "counts differ (members 1,251, servers 1,343)"
    assert "VIOLATED" not in reading.line and "the figures use the members' counts" in reading.meaning


def test_servers_that_counted_nothing_leave_the_witness_unknown():
    # N = 300 on classic: the members logged 3 requests between samples, the brokers counted none; 3 is within
    # the 10-request tolerance, but a witness that saw nothing cannot vouch for anything.
    result = witness_result(_row(server=0.0, client=3, served=0), CheckConfig())
    assert result.verdict is Verdict.UNKNOWN
    assert result.detail == "the servers counted no request in 11 windows while the members logged 3: the witness " \
                            "saw nothing to compare"
    silent = witness_result(_row(server=0.0, client=0, served=0), CheckConfig())
    assert silent.verdict is Verdict.UNKNOWN and "neither did the members" in silent.detail


def test_no_windows_is_unknown():
    assert witness_result(None, CheckConfig()).verdict is Verdict.UNKNOWN
    assert witness_result(_row(windows=0), CheckConfig()).detail == "no two comparable server samples"
