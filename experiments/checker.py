"""Jepsen-style checks over a run's events, as PySpark DataFrame queries.

Every check answers one question about the whole run and returns a `CheckResult`: a
verdict (true: nothing found, false: found, unknown: the log cannot tell) and evidence
rows saying where and when. The inputs are the frames `experiments.summary` derives from
the events (times `t` in seconds since the run's first event):

- `ownership`: one row per interval a member believed it owned a partition
  (member, tp, start, end);
- `segments`: per partition, the spans between ownership changes with the set of owners
  (tp, start, end, owners);
- `lost` records, `repeats` (offset ranges consumed again) and `deliveries` (one row per
  processed record with its latency), all derived from offset ranges;
- the raw events `ev` for commits and commit failures.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

import pandas as pd
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

Counts = Mapping[str, int]   # events per type in the run

# Commit errors that mean "you are not (or no longer) a member of this generation".
FENCING_ERRORS = ("ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "FENCED_INSTANCE_ID")


class Verdict(StrEnum):
    TRUE = "true"        # checked, nothing found
    FALSE = "false"      # the anomaly happened: see the evidence
    UNKNOWN = "unknown"  # the log lacks what the check needs


@dataclass(frozen=True, kw_only=True)
class CheckConfig:
    latency_limit_ms: int = 3000           # seed 002: a record slower than this counts as lost
    convergence_bound_s: float | None = None  # default: 2 x session timeout + 5 s (Kafka's system tests)
    overlap_tolerance_s: float = 0.0       # double ownership shorter than this is ignored
    evidence_rows: int = 1000              # evidence kept per check (the count is always exact)


@dataclass(frozen=True)
class CheckResult:
    check: str
    verdict: Verdict
    count: int                             # how many anomalies (windows, records, commits...)
    detail: str
    evidence: pd.DataFrame = field(default_factory=pd.DataFrame, compare=False)


def _evidence(frame: DataFrame, order: list[str], limit: int) -> pd.DataFrame:
    return frame.orderBy(*order).limit(limit).toPandas()


def _evidence_and_count(frame: DataFrame, order: list[str], limit: int) -> tuple[pd.DataFrame, int]:
    """The first `limit` rows and the exact count, counting separately only when rows were cut."""
    rows = _evidence(frame, order, limit)
    return rows, (len(rows) if len(rows) < limit else frame.count())


def _owning(counts: Counts) -> bool:
    return bool(counts.get("partitions_assigned") or counts.get("rebalance_completed"))


def double_ownership(segments: DataFrame, counts: Counts, config: CheckConfig) -> CheckResult:
    """Exclusive ownership, checked continuously: spans where two or more members owned one partition."""
    windows = (
        segments.filter((F.size("owners") >= 2) & (F.col("end") - F.col("start") > config.overlap_tolerance_s))
        .select("tp", "start", "end", (F.col("end") - F.col("start")).alias("duration_s"), "owners")
    )
    if not _owning(counts):
        return CheckResult("double-ownership", Verdict.UNKNOWN, 0, "no ownership events")
    stats = windows.agg(F.count("*").alias("n"), F.sum("duration_s").alias("s")).first()
    count, seconds = stats["n"], stats["s"] or 0.0
    verdict = Verdict.FALSE if count else Verdict.TRUE
    detail = f"{count} windows, {seconds:.2f} s in total" if count else "every partition had at most one owner"
    return CheckResult("double-ownership", verdict, count, detail,
                       _evidence(windows, ["start", "tp"], config.evidence_rows))


def consumption_outside_ownership(consumed: DataFrame, segments: DataFrame, counts: Counts,
                                  config: CheckConfig) -> CheckResult:
    """Ownership evidenced by consumption: records a member processed while it was not the sole owner.

    Each consumption batch looks up the owners of its partition at its time (the last
    ownership change at or before it, per partition)."""
    marks = segments.select("tp", F.col("start").alias("t"), F.lit(0).alias("kind"), "owners",
                            F.lit(None).cast("string").alias("member"), F.lit(None).cast("long").alias("count"))
    batches = consumed.select("tp", "t", F.lit(1).alias("kind"), F.lit(None).cast("array<string>").alias("owners"),
                              "member", "count")
    timeline = Window.partitionBy("tp").orderBy("t", "kind").rowsBetween(Window.unboundedPreceding, 0)
    looked_up = (
        marks.unionByName(batches)
        .withColumn("owners_then", F.last("owners", ignorenulls=True).over(timeline))
        .filter(F.col("kind") == 1)
        .withColumn("owners_then", F.coalesce("owners_then", F.array().cast("array<string>")))
    )
    outside = looked_up.filter(
        ~((F.size("owners_then") == 1) & (F.element_at("owners_then", 1) == F.col("member")))
    )
    grouped = outside.groupBy("member", "tp", "owners_then").agg(
        F.min("t").alias("first_t"), F.max("t").alias("last_t"),
        F.count("*").alias("batches"), F.sum("count").alias("records"),
    )
    if not counts.get("records_consumed"):
        return CheckResult("consumed-without-ownership", Verdict.UNKNOWN, 0, "no records consumed")
    evidence, count = _evidence_and_count(grouped, ["first_t", "tp"], config.evidence_rows)
    records = int(evidence["records"].sum()) if count == len(evidence) else grouped.agg(F.sum("records")).first()[0]
    detail = (f"{records} records in {count} spans processed by a member that was not the sole owner"
              if count else "every batch was processed by its partition's sole owner")
    return CheckResult("consumed-without-ownership", Verdict.FALSE if count else Verdict.TRUE, count, detail,
                       evidence)


def lost_records(lost: DataFrame, unseen: int, counts: Counts, config: CheckConfig) -> CheckResult:
    """Produced and never processed (`lost`: tp, offset, produce_ms, t_produce). Records produced in
    the run's last `latency limit` seconds of consumption are only 'unseen': the run may have ended first."""
    if not (counts.get("record_produced") or counts.get("records_produced")):
        return CheckResult("lost-records", Verdict.UNKNOWN, 0, "no records_produced (or record_produced) events")
    evidence, count = _evidence_and_count(lost, ["t_produce", "tp", "offset"], config.evidence_rows)
    detail = f"{count} records produced and never processed" if count else "every produced record was processed"
    if unseen:
        detail += f" ({unseen} produced at the very end not seen: unseen, not lost)"
    return CheckResult("lost-records", Verdict.FALSE if count else Verdict.TRUE, count, detail, evidence)


def duplicates(repeats: DataFrame, counts: Counts, config: CheckConfig) -> CheckResult:
    """The same (partition, offset) processed more than once, by one member or by several.
    `repeats` holds offset ranges a batch consumed that earlier batches had consumed already;
    the count is of extra deliveries."""
    if not counts.get("records_consumed"):
        return CheckResult("duplicates", Verdict.UNKNOWN, 0, "no records consumed")
    by = {row["by"]: row["n"] for row in repeats.groupBy("by").agg(F.sum("records").alias("n")).collect()}
    count = int(sum(by.values()))
    detail = (", ".join(f"{n} by {who}" for who, n in sorted(by.items())) if count
              else "every record was processed once")
    return CheckResult("duplicates", Verdict.FALSE if count else Verdict.TRUE, count, detail,
                       _evidence(repeats, ["t", "tp", "from_offset"], config.evidence_rows))


def offset_regressions(commits: DataFrame, counts: Counts, config: CheckConfig) -> CheckResult:
    """Per partition, a successful commit lower than an earlier one (a zombie's late commit).
    `commits`: one row per partition per offsets_committed event (member, t, seq, tp, offset)."""
    if not counts.get("offsets_committed"):
        return CheckResult("offset-regressions", Verdict.UNKNOWN, 0, "no offsets_committed events")
    earlier = Window.partitionBy("tp").orderBy("t", "seq").rowsBetween(Window.unboundedPreceding, -1)
    regressions = (
        commits.withColumn("highest_before", F.max("offset").over(earlier))
        .filter(F.col("offset") < F.col("highest_before"))
        .select("tp", "t", "member", "offset", "highest_before")
    )
    evidence, count = _evidence_and_count(regressions, ["t", "tp"], config.evidence_rows)
    detail = f"{count} commits moved a partition's offset backwards" if count else "committed offsets never went back"
    return CheckResult("offset-regressions", Verdict.FALSE if count else Verdict.TRUE, count, detail, evidence)


def slow_records(deliveries: DataFrame, config: CheckConfig) -> CheckResult:
    """Processed later than the latency limit after being produced (seed 002 counts these as lost).
    `deliveries`: one row per processed record with its latency."""
    timed = deliveries.filter(F.col("latency_ms").isNotNull())
    slow = timed.filter(F.col("latency_ms") > config.latency_limit_ms)
    stats = timed.agg(F.count("*").alias("timed"), F.sum((F.col("latency_ms") > config.latency_limit_ms).cast("int"))
                      .alias("n"), F.max("latency_ms").alias("worst")).first()
    if not stats["timed"]:
        return CheckResult("slow-records", Verdict.UNKNOWN, 0, "no produce timestamps on consumed records")
    count = stats["n"]
    detail = (f"{count} records over {config.latency_limit_ms} ms (worst {stats['worst']:.0f} ms)" if count
              else f"every record within {config.latency_limit_ms} ms")
    evidence = slow.select("tp", "offset", "t", "latency_ms", "member")
    return CheckResult("slow-records", Verdict.FALSE if count else Verdict.TRUE, count, detail,
                       _evidence(evidence, ["t", "tp", "offset"], config.evidence_rows))


def convergence(segments: DataFrame, partitions: int, since_t: float, bound_s: float, run_end_t: float,
                counts: Counts, config: CheckConfig) -> CheckResult:
    """Every partition owned by exactly one member at some moment within `bound_s` after `since_t`
    (the last fault's end). Kafka's system tests ask this after killing an owner."""
    name = "convergence"
    if partitions == 0 or not _owning(counts):
        return CheckResult(name, Verdict.UNKNOWN, 0, "no partitions or no ownership events")
    per_tp = Window.partitionBy("tp").orderBy("start")
    changes = (
        segments.withColumn("good", (F.size("owners") == 1).cast("int"))
        .withColumn("delta", F.col("good") - F.lag("good", 1, 0).over(per_tp))
        .groupBy("start").agg(F.sum("delta").alias("delta"))
        .withColumn("run", F.lit(1))
    )
    in_time = Window.partitionBy("run").orderBy("start")
    good = (
        changes.withColumn("good_partitions", F.sum("delta").over(in_time.rowsBetween(Window.unboundedPreceding, 0)))
        .withColumn("until", F.coalesce(F.lead("start").over(in_time), F.lit(run_end_t)))
    )
    deadline = since_t + bound_s
    first = (
        good.filter((F.col("good_partitions") == partitions) & (F.col("until") > since_t)
                    & (F.col("start") <= deadline))
        .agg(F.min("start")).first()[0]
    )
    if first is not None:
        after = max(first - since_t, 0.0)
        return CheckResult(name, Verdict.TRUE, 0,
                           f"all {partitions} partitions had one owner {after:.2f} s after t={since_t:.2f} s "
                           f"(bound {bound_s:.0f} s)")
    probe = min(deadline, run_end_t)
    owners = segments.filter((F.col("start") <= probe) & (F.col("end") > probe)).select(
        "tp", F.lit(probe).alias("t"), "owners").filter(F.size("owners") != 1)
    count = owners.count()
    if run_end_t < deadline:
        return CheckResult(name, Verdict.UNKNOWN, 0,
                           f"the log ends {deadline - run_end_t:.1f} s before the bound; not yet converged",
                           _evidence(owners, ["tp"], config.evidence_rows))
    return CheckResult(name, Verdict.FALSE, count,
                       f"{count} partitions without exactly one owner {bound_s:.0f} s after t={since_t:.2f} s",
                       _evidence(owners, ["tp"], config.evidence_rows))


def fenced_commits(ev: DataFrame, config: CheckConfig) -> CheckResult:
    """Commits the coordinator refused because the member's generation or id was stale.
    Found means fencing happened: a zombie was stopped from moving offsets back."""
    failed = ev.filter(F.col("type") == "commit_failed")
    fenced = failed.filter(F.col("error").isin(*FENCING_ERRORS)).select(
        "t", "member", "error", F.to_json("offsets").alias("offsets"))
    by_error = {row["error"]: row["count"] for row in fenced.groupBy("error").count().collect()}
    count = sum(by_error.values())
    detail = ", ".join(f"{n} {error}" for error, n in sorted(by_error.items())) if count else "no commit was fenced"
    return CheckResult("fenced-commits", Verdict.FALSE if count else Verdict.TRUE, count, detail,
                       _evidence(fenced, ["t"], config.evidence_rows))
