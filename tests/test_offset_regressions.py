"""The offset-regression check tells a commit that moved a partition's stored offset back from one that only
committed again the value the coordinator had already been moved back to (a member that goes on committing
its position after a stale commit moved the stored offset below it)."""

from __future__ import annotations

import pytest

from experiments.summary import checks
from experiments.summary.check_queries import CheckConfig, CheckInputs, Verdict, offset_regressions

pytestmark = pytest.mark.spark


def _regressions(spark, rows):
    from experiments.summary.spark_batch import Batch

    commits = spark.createDataFrame(rows, "run int, tp string, t double, seq long, member string, offset long")
    inputs = CheckInputs(runs=[0, 1], counts={}, control=None, commits=commits, consumed=None, handled=None,
                         segments=None, never=None, repeats=None, deliveries=None, context=None)
    with Batch(inputs.runs) as batch:
        read = offset_regressions(inputs, CheckConfig(), batch)
        batch.collect()
    return read()


def test_a_backward_move_is_counted_and_a_re_commit_of_the_stored_value_is_named_apart(spark):
    rows = [
        # run 0, t-3: 10 stored; a stale commit moves it back to 4; the member commits 4 again (a re-commit of
        # the stored value), then moves on: 7 (forward from 4, still below 10) and 12.
        (0, "t-3", 1.0, 1, "a", 10), (0, "t-3", 2.0, 2, "b", 4), (0, "t-3", 3.0, 3, "a", 4),
        (0, "t-3", 4.0, 4, "a", 7), (0, "t-3", 5.0, 5, "a", 12),
        # run 0, t-1: never back
        (0, "t-1", 1.5, 6, "a", 3), (0, "t-1", 2.5, 7, "a", 3), (0, "t-1", 3.5, 8, "a", 5),
        # run 1: clean
        (1, "t-0", 1.0, 1, "a", 1), (1, "t-0", 2.0, 2, "a", 2),
    ]
    results = _regressions(spark, rows)
    moved = results[0]
    assert moved.check == checks.OFFSET_REGRESSIONS.name
    assert moved.verdict is Verdict.FALSE and moved.count == 1
    assert moved.detail == ("1 commit moved a partition's stored offset back; 1 commit re-committed the value the "
                            "coordinator had already been moved back to")
    evidence = moved.evidence
    assert list(zip(evidence["t"], evidence["kind"], strict=True)) == [(2.0, "moved back"), (3.0, "re-commit")]
    first = evidence.iloc[0]
    assert (first["stored_before"], first["highest_before"], first["offset"]) == (10, 10, 4)
    clean = results[1]
    assert clean.verdict is Verdict.TRUE and clean.count == 0 and clean.detail == "committed offsets never went back"
