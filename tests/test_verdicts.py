"""Verdicts in words: ok, VIOLATED (n), protected (n), unknown, the same in the terminal, Markdown and HTML."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
from rich.console import Console

from experiments.report.page import table_html
from experiments.report.run_tables import verdict_table
from experiments.summary.check_queries import CheckResult, Verdict
from experiments.summary.read_back import RunData
from experiments.summary.verdict_words import Word, combine, print_verdicts, question, read, read_result
from tests.fixtures.run_record import run_data


def test_nothing_found_reads_ok_with_what_was_checked():
    reading = read("double-ownership", "true", 0, "every partition had at most one owner")
    assert reading.word is Word.OK and reading.label == "ok"
    assert reading.line == "ok: every partition had at most one owner"


def test_an_anomaly_reads_violated_with_its_count_and_what_it_counts():
    reading = read("double-ownership", "false", 3, "3 windows, 30.00 s in total")
    assert reading.word is Word.VIOLATED and reading.label == "VIOLATED (3)"
    assert reading.meaning == "3 windows, 30.00 s in total, in which two or more members owned the same partition"
    duplicates = read("duplicates", "false", 12, "12 by c1")
    assert duplicates.label == "VIOLATED (12)" and duplicates.meaning == "12 records processed more than once (12 by c1)"


def test_a_fenced_commit_reads_protected_not_violated():
    reading = read_result(CheckResult("fenced-commits", Verdict.FALSE, 1, "1 UNKNOWN_MEMBER_ID"))
    assert reading.word is Word.PROTECTED and reading.label == "protected (1)"
    assert reading.meaning == "1 commit of a stale member refused by the coordinator (1 UNKNOWN_MEMBER_ID)"
    assert read("fenced-commits", "false", 2, "2 ILLEGAL_GENERATION").meaning.startswith("2 commits of a stale")
    assert read("fenced-commits", "true", 0, "no commit was fenced").label == "ok"


def test_a_log_that_cannot_tell_reads_unknown_with_what_is_missing():
    reading = read("offset-regressions", "unknown", 0, "no offsets_committed events")
    assert reading.word is Word.UNKNOWN and reading.label == "unknown"
    assert reading.line == "unknown: no offsets_committed events"


READINGS = [
    read("double-ownership", "false", 3, "3 windows, 30.00 s in total"),
    read("fenced-commits", "false", 2, "2 UNKNOWN_MEMBER_ID"),
    read("offset-regressions", "unknown", 0, "no offsets_committed events"),
    read("lost-records", "true", 0, "every produced record was processed"),
]


def test_a_pipe_gets_one_whole_line_per_check_and_run():
    out = io.StringIO()
    console = Console(file=out, width=40, force_terminal=False)          # a narrow CI log
    print_verdicts(console, "Checks", [("legacy", READINGS), ("classic", READINGS[:2])])
    lines = out.getvalue().splitlines()
    for reading in READINGS:
        assert sum(reading.line in line and line.startswith(reading.check) for line in lines) == (
            2 if reading in READINGS[:2] else 1), lines
    assert any("offset-regressions" in line and "  classic  -" in line for line in lines)
    assert not any("│" in line for line in lines)


def test_a_terminal_gets_a_table_with_the_same_words():
    out = io.StringIO()
    console = Console(file=out, width=160, force_terminal=True, color_system=None)
    print_verdicts(console, "Checks", [("legacy", READINGS)])
    text = out.getvalue()
    assert "│" in text
    for label in ("VIOLATED (3)", "protected (2)", "unknown", "ok"):
        assert label in text


def _run(verdicts: list[tuple[str, str, int, str]], name: str, backend: str) -> RunData:
    empty = pd.DataFrame()
    frame = pd.DataFrame([{"run": name, "backend": backend, "check": c, "verdict": v, "count": n, "detail": d}
                          for c, v, n, d in verdicts])
    return run_data(run_dir=Path(f"/runs/{backend}"), info={"name": name, "backend": backend, "strategy": "range"},
                   facts={}, verdicts=frame, phases=empty, throughput=empty, ownership=empty, faults=empty,
                   herd=empty, metrics=empty, evidence={})


def test_the_report_table_has_compact_words_coloured_by_word_with_the_run_s_line_as_tooltip():
    legacy = _run([("double-ownership", "false", 3, "3 windows, 30.00 s in total"),
                   ("fenced-commits", "true", 0, "no commit was fenced")], "split", "legacy")
    classic = _run([("double-ownership", "true", 0, "every partition had at most one owner"),
                   ("fenced-commits", "false", 1, "1 UNKNOWN_MEMBER_ID")], "split", "classic")
    table = verdict_table([legacy, classic])
    assert list(table.columns) == ["check", "legacy", "classic"]          # one scenario: a column per backend
    rows = {str(row["check"]): row for _, row in table.iterrows()}
    assert rows["double-ownership"]["check"].note == question("double-ownership")   # the meaning, once per row
    assert str(rows["double-ownership"]["legacy"]) == "VIOLATED (3)"
    assert rows["double-ownership"]["legacy"].title.startswith("VIOLATED (3): 3 windows")
    assert str(rows["fenced-commits"]["classic"]) == "protected (1)" and str(rows["double-ownership"]["classic"]) == "ok"
    page = table_html(table)
    assert "<td class='bad' title='VIOLATED (3): 3 windows" in page and ">VIOLATED (3)</td>" in page
    assert "<td class='protected' title='protected (1): " in page
    assert "<td class='good' title='ok: every partition had at most one owner'>ok</td>" in page


def test_readings_of_several_runs_combine_into_the_worst_word_with_the_counts_added():
    ok = read("duplicates", "true", 0, "every record was processed once")
    found = [read("duplicates", "false", 2, "2 by one member"), read("duplicates", "false", 3, "3 by one member")]
    assert combine([ok, *found]).label == "VIOLATED (5)"
    assert combine([ok, read("duplicates", "unknown", 0, "no records consumed")]).word is Word.UNKNOWN
    assert combine([ok, ok]).label == "ok" and combine([ok]) is ok
    fenced = read("fenced-commits", "false", 1, "1 UNKNOWN_MEMBER_ID")
    assert combine([read("fenced-commits", "true", 0, ""), fenced]).label == "protected (1)"
    assert all(question(check) for check in ("double-ownership", "duplicates", "offset-regressions",
                                             "fenced-commits", "convergence", "server-witness"))


def test_a_cross_check_whose_totals_agree_says_its_windows_differ():
    totals_apart = read("server-witness", "false", 2, "members 1,251, servers 1,343; 2 of 11 windows differ")
    assert totals_apart.label == "counts differ (members 1,251, servers 1,343)"
    windows_only = read("server-witness", "false", 3, "members 11,006, servers 11,006; 3 of 11 windows differ")
    assert windows_only.label == "counts differ (in 3 windows; totals equal: members 11,006, servers 11,006)"
