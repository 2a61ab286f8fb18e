"""Checks of the group's ownership: the warm-up, one owner per partition, consumption only by an owner, and
convergence after the last fault or join."""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column, Window
from pyspark.sql import functions as F

from experiments.scenario.labels import fault_label
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


def warmup(inputs: CheckInputs, config: CheckConfig, batch: Batch) -> Reader:
    """A warm-up that timed out (the runner's `warmup-timeout` phase, with the group's ownership when it gave
    up): the timeline then began from a group still forming, and every count after it measures that too."""
    def summary(name: str) -> Column:
        return F.get_json_object("detail", f"$.{name}").cast("long").alias(name)

    timeouts = inputs.control.filter((F.col("type") == ev.PHASE) & (F.col("name") == ev.WARMUP_TIMEOUT)).select(
        "run", "t", summary("members_up"), summary("owned"), summary("partitions"), summary("double_owned"))
    evidence = batch.first_rows(timeouts, ["t"], config.evidence_rows)

    def read() -> Results:
        results = {}
        for run in inputs.runs:
            rows = evidence.value[run]
            detail = "; ".join(f"at {row.t:.1f} s, {row.members_up} members up, {row.owned} of {row.partitions} "
                               f"partitions owned, {row.double_owned} owned twice" for row in rows.itertuples())
            results[run] = result_of(checks.WARMUP.name, len(rows), detail, "the group was stable first", rows)
        return results

    return read


def double_ownership(inputs: CheckInputs, config: CheckConfig, batch: Batch) -> Reader:
    """Exclusive ownership, checked continuously: spans where two or more members owned one partition."""
    windows = (
        inputs.segments.filter((F.size("owners") >= 2) & (F.col("end") - F.col("start") > config.overlap_tolerance_s))
        .select("run", "tp", "start", "end", (F.col("end") - F.col("start")).alias("duration_s"), "owners")
    )
    stats = batch.values(windows.groupBy("run").agg(F.count("*").alias("n"), F.sum("duration_s").alias("s")))
    evidence = batch.first_rows(windows, ["start", "tp"], config.evidence_rows)

    def read() -> Results:
        results = {}
        for run in inputs.runs:
            count, seconds = stats.value.get(run, {}).get("n", 0), stats.value.get(run, {}).get("s") or 0.0
            results[run] = result_of(checks.DOUBLE_OWNERSHIP.name, count, f"{count} windows, {seconds:.2f} s in total",
                                  "every partition had at most one owner", evidence.value[run])
        return results

    return read


def consumption_outside_ownership(inputs: CheckInputs, config: CheckConfig, batch: Batch) -> Reader:
    """Ownership evidenced by consumption: records a member processed while it was not the sole owner.

    Each batch looks up the owners of its partition at the time its handling ended (the last ownership change
    at or before it, per partition): a batch 0.8's application was still handling when the watcher thread
    released the partition counts, though poll() delivered it in time."""
    marks = inputs.segments.select("run", "tp", F.col("start").alias("t"), F.lit(0).alias("kind"), "owners",
                                   F.lit(None).cast("string").alias("member"), F.lit(None).cast("long").alias("count"))
    batches = inputs.handled.select("run", "tp", "t", F.lit(1).alias("kind"),
                                     F.lit(None).cast("array<string>").alias("owners"), "member", "count")
    timeline = Window.partitionBy("run", "tp").orderBy("t", "kind").rowsBetween(Window.unboundedPreceding, 0)
    looked_up = (
        marks.unionByName(batches)
        .withColumn("owners_then", F.last("owners", ignorenulls=True).over(timeline))
        .filter(F.col("kind") == 1)
        .withColumn("owners_then", F.coalesce("owners_then", F.array().cast("array<string>")))
    )
    outside = looked_up.filter(~((F.size("owners_then") == 1) & (F.element_at("owners_then", 1) == F.col("member"))))
    grouped = outside.groupBy("run", "member", "tp", "owners_then").agg(
        F.min("t").alias("first_t"), F.max("t").alias("last_t"),
        F.count("*").alias("batches"), F.sum("count").alias("records"),
    )
    stats = batch.values(grouped.groupBy("run").agg(F.count("*").alias("n"), F.sum("records").alias("records")))
    evidence = batch.first_rows(grouped, ["first_t", "tp"], config.evidence_rows)

    def read() -> Results:
        results = {}
        for run in inputs.runs:
            count, records = stats.value.get(run, {}).get("n", 0), stats.value.get(run, {}).get("records")
            results[run] = result_of(checks.CONSUMED_WITHOUT_OWNERSHIP.name, count, f"{records} records in {count} spans "
                                  "processed by a member that was not the sole owner",
                                  "every batch was processed by its partition's sole owner", evidence.value[run])
        return results

    return read


def awaited_from(since_t: float, last_fault: Mapping | None, heal_t: float | None) -> str:
    """What `since_t` is, in words: the run's last fault event (a fault applied or ended; a leave counts,
    as it is written as one) or, in a run without fault events, the last member's start. Faults still in
    force when the timeline ends are all ended by the runner's final heal, which is then that event."""
    if not last_fault:
        return f"the last member started, at t={since_t:.2f} s (no faults)"
    if last_fault.get("type") == ev.FAULT_STOPPED and heal_t is not None and since_t >= heal_t:
        return f"the final heal at t={since_t:.2f} s, which ends every fault still in force"
    label = fault_label(last_fault.get("kind"), last_fault.get("target"), last_fault.get("link"))
    what = "ended" if last_fault.get("type") == ev.FAULT_STOPPED else "began"
    return f"the last fault event at t={since_t:.2f} s ({label} {what})"


def bound_source(config: CheckConfig) -> str:
    """Where the allowed time comes from."""
    return "2 x session timeout + 5 s" if config.convergence_bound_s is None else "--convergence-bound-s"


def convergence_detail(verdict: Verdict, *, partitions: int, since: str, bound_s: float, source: str,
                       after_s: float = 0.0, short_s: float = 0.0, count: int = 0) -> str:
    """The convergence verdict in words: how long after `since` every partition had exactly one owner, and
    the time allowed (`bound_s`, from `source`)."""
    allowed = f"allowed: {bound_s:.0f} s, {source}"
    if verdict is Verdict.TRUE:
        return f"all {partitions} partitions had exactly one owner {after_s:.1f} s after {since} ({allowed})"
    if verdict is Verdict.UNKNOWN:
        return (f"not every partition had exactly one owner when the log ends, {short_s:.1f} s before the "
                f"{bound_s:.0f} s allowed after {since} ran out ({source})")
    return (f"{count} of {partitions} partitions without exactly one owner {bound_s:.0f} s after {since}, and no "
            f"moment in between when all had one ({allowed})")


def convergence(inputs: CheckInputs, config: CheckConfig, batch: Batch) -> Reader:
    """Every partition owned by exactly one member at some moment within `bound_s` after `since_t`: the
    run's last fault event (its start or its end; the final heal ends every fault still in force), or the
    last member's start in a run without faults. Kafka's system tests ask this after killing an owner."""
    name = checks.CONVERGENCE.name
    context = F.broadcast(inputs.context.select(
        "run", "partitions", "since_t", "bound_s", "run_end", (F.col("since_t") + F.col("bound_s")).alias("deadline")))
    per_tp = Window.partitionBy("run", "tp").orderBy("start")
    changes = (
        inputs.segments.withColumn("good", (F.size("owners") == 1).cast("int"))
        .withColumn("delta", F.col("good") - F.lag("good", 1, 0).over(per_tp))
        .groupBy("run", "start").agg(F.sum("delta").alias("delta"))
    )
    in_time = Window.partitionBy("run").orderBy("start")
    good = (
        changes.withColumn("good_partitions", F.sum("delta").over(in_time.rowsBetween(Window.unboundedPreceding, 0)))
        .join(context, "run")
        .withColumn("until", F.coalesce(F.lead("start").over(in_time), "run_end"))
    )
    first = batch.values(good.filter(
        (F.col("good_partitions") == F.col("partitions")) & (F.col("until") > F.col("since_t"))
        & (F.col("start") <= F.col("deadline"))).groupBy("run").agg(F.min("start").alias("first")))
    probe = F.least("deadline", "run_end")
    owners = inputs.segments.join(context, "run").filter((F.col("start") <= probe) & (F.col("end") > probe)).select(
        "run", "tp", probe.alias("t"), "owners").filter(F.size("owners") != 1)
    counts = batch.values(owners.groupBy("run").count())
    evidence = batch.first_rows(owners, ["tp"], config.evidence_rows)
    window = batch.values(inputs.context)
    order = F.struct("t", "seq")
    faults = inputs.control.filter(F.col("type").isin(ev.FAULT_STARTED, ev.FAULT_STOPPED))
    last_fault = batch.values(faults.groupBy("run").agg(
        *(F.max_by(column, order).alias(column) for column in ("type", "kind", "target", "link"))))
    heal = batch.values(inputs.control.filter((F.col("type") == ev.PHASE) & (F.col("name") == str(ev.RunnerPhase.HEAL)))
                        .groupBy("run").agg(F.min("t").alias("t")))
    source = bound_source(config)

    def read() -> Results:
        results = {}
        for run in inputs.runs:
            partitions, since_t, bound_s, run_end = (
                window.value[run][key] for key in ("partitions", "since_t", "bound_s", "run_end"))
            since = awaited_from(since_t, last_fault.value.get(run), heal.value.get(run, {}).get("t"))
            words = {"partitions": partitions, "since": since, "bound_s": bound_s, "source": source}
            if partitions == 0:
                results[run] = CheckResult(name, Verdict.UNKNOWN, 0, "no partitions or no ownership events")
            elif first.value.get(run, {}).get("first") is not None:
                after = max(first.value[run]["first"] - since_t, 0.0)
                results[run] = CheckResult(name, Verdict.TRUE, 0, convergence_detail(Verdict.TRUE, after_s=after,
                                                                                     **words))
            elif run_end < since_t + bound_s:
                results[run] = CheckResult(name, Verdict.UNKNOWN, 0, convergence_detail(
                    Verdict.UNKNOWN, short_s=since_t + bound_s - run_end, **words), evidence.value[run])
            else:
                count = counts.value.get(run, {}).get("count", 0)
                results[run] = CheckResult(name, Verdict.FALSE, count, convergence_detail(
                    Verdict.FALSE, count=count, **words), evidence.value[run])
        return results

    return read


