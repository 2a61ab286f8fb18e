"""Records on offset ranges: what was lost, consumed twice, and how late (every frame keyed by `run`).

Per partition, consumed batches in offset order: a batch starting above everything consumed before it
leaves a gap (lost), one starting at or below it repeats offsets (duplicates). Only the intersections
of gaps with produced batches are expanded to records."""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

BROADCAST_RANGES = 100_000    # fewer gap ranges than this (over all runs) are sent to every task


def coverage(consumed: DataFrame) -> DataFrame:
    """Consumed batches in offset order per partition (run, tp, first_offset, last_offset, member, t), each
    with the highest offset consumed by the batches before it (`reach`) and the member of the batch
    just before it."""
    in_offsets = Window.partitionBy("run", "tp").orderBy("first_offset", "last_offset", "t")
    return consumed.select("run", "tp", "first_offset", "last_offset", "member", "t").withColumn(
        "reach", F.max("last_offset").over(in_offsets.rowsBetween(Window.unboundedPreceding, -1))
    ).withColumn("earlier_member", F.lag("member").over(in_offsets))


def never_processed(produced: DataFrame, covered: DataFrame, runs: DataFrame) -> DataFrame:
    """Produced records no batch covers (run, tp, offset, produce_ms, t_produce, unseen, skipped): the gaps
    between consumed ranges (`covered`, from `coverage`; and after the last one) intersected with the produced
    batches. `skipped`: in a gap below a record of its partition that was processed, so the consumption went past
    it (a commit or a reset moved over it): lost for good; otherwise it was still in the log, after everything
    processed on its partition, when the run ended: not reached. `unseen`: produced within the latency limit
    before the run's last consumption (`tail_start` in `runs`), so the run may simply have ended first."""
    gaps = covered.filter(F.col("first_offset") > F.coalesce("reach", F.lit(-1)) + 1).select(
        "run", "tp", (F.coalesce("reach", F.lit(-1)) + 1).alias("low"), (F.col("first_offset") - 1).alias("high"),
        F.lit(True).alias("skipped"))
    reach = covered.groupBy("run", "tp").agg(F.max("last_offset").alias("reach"))
    tails = produced.groupBy("run", "tp").agg(F.max("last_offset").alias("high")).join(
        reach, ["run", "tp"], "left").select(
        "run", "tp", (F.coalesce("reach", F.lit(-1)) + 1).alias("low"), "high", F.lit(False).alias("skipped")
    ).filter(F.col("high") >= F.col("low"))
    ranges = gaps.unionByName(tails).withColumnRenamed("run", "gap_run").withColumnRenamed("tp", "gap_tp")
    if ranges.count() < BROADCAST_RANGES:
        ranges = F.broadcast(ranges)
    overlap = produced.join(ranges, (F.col("run") == F.col("gap_run")) & (F.col("tp") == F.col("gap_tp"))
                            & (F.col("first_offset") <= F.col("high")) & (F.col("last_offset") >= F.col("low")))
    never = overlap.select(
        "run", "tp", "first_offset", "stamps", "skipped",
        F.explode(F.sequence(F.greatest("first_offset", "low"), F.least("last_offset", "high"))).alias("offset"),
    ).select("run", "tp", "offset", F.element_at("stamps", (F.col("offset") - F.col("first_offset") + 1).cast("int"))
             .alias("produce_ms"), "skipped")
    return never.join(F.broadcast(runs.select("run", "t0_ms", "tail_start")), "run").select(
        "run", "tp", "offset", "produce_ms", ((F.col("produce_ms") - F.col("t0_ms")) / 1e3).alias("t_produce"),
        F.coalesce(((F.col("produce_ms") - F.col("t0_ms")) / 1e3) >= F.col("tail_start"), F.lit(False)).alias("unseen"),
        "skipped")


def produce_times(produced: DataFrame, runs: DataFrame) -> DataFrame:
    """When each produced record was produced (run, `t_produce` in run seconds), and nothing else per record."""
    return produced.join(F.broadcast(runs.select("run", "t0_ms")), "run").select(
        "run", F.explode("stamps").alias("produce_ms"), "t0_ms").select(
        "run", ((F.col("produce_ms") - F.col("t0_ms")) / 1e3).alias("t_produce"))


def duplicate_ranges(covered: DataFrame) -> DataFrame:
    """Offsets a batch consumed that earlier batches (in offset order) had consumed already."""
    return covered.filter(F.col("reach") >= F.col("first_offset")).select(
        "run", "tp", F.col("first_offset").alias("from_offset"), F.least("last_offset", "reach").alias("to_offset"),
        (F.least("last_offset", "reach") - F.col("first_offset") + 1).alias("records"),
        F.when(F.col("member") == F.col("earlier_member"), "one member").otherwise("different members").alias("by"),
        "member", "earlier_member", "t",
    )


def handled_batches(consumed: DataFrame, processed: DataFrame) -> DataFrame:
    """Each batch (run, tp, member, t, count) at the time the application finished handling it: in a run with
    `records_processed` events (its members had a service time) at that event, so a record delivered while
    the member owned its partition but handled after it lost it counts where it was handled; in any other
    run, when poll() delivered it."""
    columns = ["run", "tp", "member", "t", "count"]
    unhandled_runs = consumed.join(F.broadcast(processed.select("run").distinct()), "run", "left_anti")
    return processed.select(*columns).unionByName(unhandled_runs.select(*columns))


def deliveries(consumed: DataFrame, processed: DataFrame | None = None) -> DataFrame:
    """Every processed record with its produce-to-process latency (from the batch's produce timestamps).

    A record counts as processed when the application finished handling it: in a run with `records_processed`
    events (its members had a service time), at its own end time there (`t` taken back from the event's time
    to the record's); in any other run, when poll() delivered it (`records_consumed`)."""
    delivered = consumed.select("*", F.posexplode("produce_list").alias("i", "produce_ms")).select(
        "run", "tp", (F.col("first_offset") + F.col("i")).alias("offset"), "member", "t", "produce_ms",
        (F.col("ts_ms") - F.col("produce_ms")).cast("double").alias("latency_ms"),
    )
    if processed is None:
        return delivered
    done = F.coalesce(F.element_at("done_list", (F.col("i") + 1).cast("int")), F.col("ts_ms"))
    handled = processed.select("*", F.posexplode("produce_list").alias("i", "produce_ms")).select(
        "run", "tp", (F.col("first_offset") + F.col("i")).alias("offset"), "member",
        (F.col("t") - (F.col("ts_ms") - done) / 1e3).alias("t"), "produce_ms",
        (done - F.col("produce_ms")).cast("double").alias("latency_ms"),
    )
    unhandled_runs = delivered.join(F.broadcast(processed.select("run").distinct()), "run", "left_anti")
    return handled.unionByName(unhandled_runs)
