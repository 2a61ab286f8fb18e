"""Checks of the records and offsets: lost, duplicated, slow, offsets moved back, commits fenced."""

from __future__ import annotations

from pyspark.sql import Window
from pyspark.sql import functions as F

from experiments.summary import checks
from experiments.summary.check_queries.model import (
    CheckConfig,
    CheckInputs,
    CheckResult,
    Reader,
    Results,
    Verdict,
    result_of,
)
from experiments.summary.spark_batch import Batch
from rebalance import events as ev

FENCING_ERRORS = ("ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "FENCED_INSTANCE_ID", "STALE_MEMBER_EPOCH",
                  "FENCED_MEMBER_EPOCH")



def lost_records(inputs: CheckInputs, config: CheckConfig, batch: Batch) -> Reader:
    """Produced and never processed, while later records of the same partition were: skipped, lost for good.
    Records still in the log after everything processed on their partition when the run ended were not reached
    (a group that never settled, a backlog at the teardown) and are counted apart; those produced in the run's
    last `latency limit` seconds of consumption are only 'unseen': the run may have ended first."""
    lost = inputs.never.filter(~F.col("unseen") & F.col("skipped")).drop("unseen")
    stats = batch.values(inputs.never.groupBy("run").agg(
        F.sum((~F.col("unseen") & F.col("skipped")).cast("int")).alias("lost"),
        F.sum((~F.col("unseen") & ~F.col("skipped")).cast("int")).alias("not_reached"),
        F.sum(F.col("unseen").cast("int")).alias("unseen")))
    evidence = batch.first_rows(lost, ["t_produce", "tp", "offset"], config.evidence_rows)

    def read() -> Results:
        results = {}
        for run in inputs.runs:
            row = stats.value.get(run, {})
            count, not_reached, unseen = (row.get(key) or 0 for key in ("lost", "not_reached", "unseen"))
            apart = "; ".join(part for part in (
                f"{not_reached} still in the log when the run ended, after the last record processed on their "
                "partition: not reached, not skipped" if not_reached else "",
                f"{unseen} produced at the very end not seen: unseen, not lost" if unseen else "") if part)
            clean = "no record was skipped" + (f" ({apart})" if apart else "; every produced record was processed")
            found = f"{count} records skipped: produced and never processed while later records of their partition " \
                    f"were" + (f" ({apart})" if apart else "")
            results[run] = result_of(checks.LOST_RECORDS.name, count, found, clean, evidence.value[run])
        return results

    return read


def duplicates(inputs: CheckInputs, config: CheckConfig, batch: Batch) -> Reader:
    """The same (partition, offset) processed more than once, by one member or by several.
    `repeats` holds offset ranges a batch consumed that earlier batches had consumed already;
    the count is of extra deliveries."""
    by_whom = batch.tables(inputs.repeats.groupBy("run", "by").agg(F.sum("records").alias("n")), ["by"])
    evidence = batch.first_rows(inputs.repeats, ["t", "tp", "from_offset"], config.evidence_rows)

    def read() -> Results:
        results = {}
        for run in inputs.runs:
            by = by_whom.value[run]
            count = int(by["n"].sum())
            results[run] = result_of(checks.DUPLICATES.name, count, ", ".join(f"{n} by {who}" for who, n in zip(by["by"], by["n"], strict=True)),
                                  "every record was processed once", evidence.value[run])
        return results

    return read


def offset_regressions(inputs: CheckInputs, config: CheckConfig, batch: Batch) -> Reader:
    """Per partition, a successful commit below the offset stored just before it (the partition's previous
    commit): the stored offset moved back (a zombie's late commit, a stale commit applied after a later one).
    Told apart: a commit of exactly the stored value when an earlier commit was higher, a member committing
    again where the coordinator had already been moved back to; it moves nothing and is not counted, only
    named. A commit above the stored value is a move forward, even below an earlier high."""
    in_order = Window.partitionBy("run", "tp").orderBy("t", "seq")
    earlier = in_order.rowsBetween(Window.unboundedPreceding, -1)
    commits = (inputs.commits.withColumn("stored_before", F.lag("offset").over(in_order))
               .withColumn("highest_before", F.max("offset").over(earlier)))
    moved_back = F.col("offset") < F.col("stored_before")
    re_commit = (F.col("offset") == F.col("stored_before")) & (F.col("offset") < F.col("highest_before"))
    below = (commits.filter(moved_back | re_commit)
             .withColumn("kind", F.when(moved_back, F.lit(_MOVED_BACK)).otherwise(F.lit(_RE_COMMIT)))
             .select("run", "tp", "t", "member", "offset", "stored_before", "highest_before", "kind"))
    counts = batch.values(below.groupBy("run").agg(
        F.sum(F.when(F.col("kind") == _MOVED_BACK, 1).otherwise(0)).alias("moved_back"),
        F.sum(F.when(F.col("kind") == _RE_COMMIT, 1).otherwise(0)).alias("re_commits")))
    evidence = batch.first_rows(below, ["t", "tp"], config.evidence_rows)

    def read() -> Results:
        results = {}
        for run in inputs.runs:
            found = counts.value.get(run, {})
            back, again = int(found.get("moved_back", 0)), int(found.get("re_commits", 0))
            detail = f"{back} commit{_s(back)} moved a partition's stored offset back"
            if again:
                detail += (f"; {again} commit{_s(again)} re-committed the value the coordinator had already "
                           "been moved back to")
            clean = detail if again else "committed offsets never went back"
            results[run] = result_of(checks.OFFSET_REGRESSIONS.name, back, detail, clean, evidence.value[run])
        return results

    return read


_MOVED_BACK, _RE_COMMIT = "moved back", "re-commit"   # the kinds of offset_regressions' evidence rows


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def slow_records(inputs: CheckInputs, config: CheckConfig, batch: Batch) -> Reader:
    """Processed later than the latency limit after being produced (seed 002 counts these as lost)."""
    limit = config.latency_limit_ms
    timed = inputs.deliveries.filter(F.col("latency_ms").isNotNull())
    stats = batch.values(timed.groupBy("run").agg(
        F.count("*").alias("timed"), F.sum((F.col("latency_ms") > limit).cast("int")).alias("n"),
        F.max("latency_ms").alias("worst")))
    slow = timed.filter(F.col("latency_ms") > limit).select("run", "tp", "offset", "t", "latency_ms", "member")
    evidence = batch.first_rows(slow, ["t", "tp", "offset"], config.evidence_rows)

    def read() -> Results:
        results = {}
        for run in inputs.runs:
            row = stats.value.get(run)
            if not row or not row["timed"]:
                results[run] = CheckResult(checks.SLOW_RECORDS.name, Verdict.UNKNOWN, 0,
                                           "no produce timestamps on consumed records")
                continue
            results[run] = result_of(checks.SLOW_RECORDS.name, row["n"],
                                  f"{row['n']} records over {limit} ms (worst {row['worst']:.0f} ms)",
                                  f"every record within {limit} ms", evidence.value[run])
        return results

    return read


def fenced_commits(inputs: CheckInputs, config: CheckConfig, batch: Batch) -> Reader:
    """Commits the coordinator refused because the member's generation or id was stale.
    Found means fencing happened: a zombie was stopped from moving offsets back."""
    fenced = inputs.control.filter((F.col("type") == ev.COMMIT_FAILED) & F.col("error").isin(*FENCING_ERRORS)).select(
        "run", "t", "member", "error", F.to_json("offsets").alias("offsets"))
    by_error = batch.tables(fenced.groupBy("run", "error").count(), ["error"])
    evidence = batch.first_rows(fenced, ["t"], config.evidence_rows)

    def read() -> Results:
        results = {}
        for run in inputs.runs:
            errors = by_error.value[run]
            count = int(errors["count"].sum())
            detail = ", ".join(f"{n} {error}" for error, n in zip(errors["error"], errors["count"], strict=True))
            results[run] = result_of(checks.FENCED_COMMITS.name, count, detail, "no commit was fenced", evidence.value[run])
        return results

    return read


