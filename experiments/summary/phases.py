"""Per-phase tables (seed 002's measures), throughput per second and rebalancing episodes, for every
run of a pass: grouped by run in Spark, finished per run in pandas."""

from __future__ import annotations

import pandas as pd
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from experiments.summary.check_queries import CheckConfig, CheckResult
from experiments.summary.checks import DOUBLE_OWNERSHIP
from experiments.summary.lag import phase_lag
from experiments.summary.spark_batch import Batch, Pending
from rebalance import events as ev

Phases = list[tuple[str, float, float]]
REBALANCE_EVENTS = (ev.REBALANCE_STARTED, ev.REBALANCE_COMPLETED, ev.REBALANCE_FAILED)
# An episode's start is its end less the member's duration, which is recorded to the microsecond: a rebalance that
# began at the very moment a phase was marked (a simulated member joins at the step's instant) may come out a hair
# before the mark in floating point, and belongs to the phase all the same.
START_TOLERANCE_S = 1e-6


def phases_of(marks: list[tuple[str, float]], run_end: float) -> Phases:
    """(name, start, end) per phase from the run's `phase` events in time order; before the first: `start`."""
    marks = list(marks)
    if not marks or marks[0][1] > 1e-3:
        marks.insert(0, ("start", 0.0))
    ends = [t for _, t in marks[1:]] + [max(run_end, marks[-1][1])]
    return [(name, start, end) for (name, start), end in zip(marks, ends, strict=True)]


def _phase_index(column: str) -> Column:
    """The phase a time falls in: how many of the run's later phase starts (`phase_starts`) it has reached."""
    return F.size(F.filter("phase_starts", lambda start: F.col(column) >= start))


def rebalance_episodes(control: DataFrame) -> DataFrame:
    """Spans when at least one member was rebalancing (its completed/failed rebalances, merged)."""
    per_member = Window.partitionBy("run", "member").orderBy("t", "seq")
    ends = control.filter(F.col("type").isin(*REBALANCE_EVENTS)).withColumn(
        "last_start", F.last(F.when(F.col("type") == ev.REBALANCE_STARTED, F.col("t")), ignorenulls=True).over(
            per_member.rowsBetween(Window.unboundedPreceding, -1))
    ).filter(F.col("type") != ev.REBALANCE_STARTED)
    spans = ends.select(
        "run", F.coalesce(F.col("t") - F.col("duration_ms") / 1000, "last_start", "t").alias("start"),
        F.col("t").alias("end"))
    in_time = Window.partitionBy("run").orderBy("start", "end")
    merged = spans.withColumn(
        "reach", F.max("end").over(in_time.rowsBetween(Window.unboundedPreceding, -1))
    ).withColumn("new", F.when(F.col("reach").isNull() | (F.col("start") > F.col("reach")), 1).otherwise(0)).withColumn(
        "episode", F.sum("new").over(in_time.rowsBetween(Window.unboundedPreceding, 0)))
    return merged.groupBy("run", "episode").agg(F.min("start").alias("start"), F.max("end").alias("end"))


def phase_measures(produce_times: DataFrame, never: DataFrame, repeats: DataFrame, deliveries: DataFrame,
                   runs: DataFrame, config: CheckConfig, batch: Batch) -> Pending[dict[int, pd.DataFrame]]:
    """Per run and phase: produced, never processed, over the limit, max and p99 latency, duplicates
    (one frame). Records belong to the phase in which they were produced."""
    starts = F.broadcast(runs.select("run", "phase_starts"))

    def by_phase(frame: DataFrame, column: str, *aggregates: Column) -> DataFrame:
        return frame.join(starts, "run").withColumn("phase", _phase_index(column)).groupBy("run", "phase").agg(
            *aggregates)

    made = by_phase(produce_times, "t_produce", F.count("*").alias("produced"))
    missed = by_phase(never.filter(~F.col("unseen")), "t_produce", F.count("*").alias("never_processed"))
    late = by_phase(
        deliveries.withColumn("t_produce", F.col("t") - F.col("latency_ms") / 1000), "t_produce",
        F.sum((F.col("latency_ms") > config.latency_limit_ms).cast("int")).alias("over_limit"),
        F.max("latency_ms").alias("max_latency_ms"), F.percentile_approx("latency_ms", 0.99).alias("p99_latency_ms"))
    again = by_phase(repeats, "t", F.sum("records").alias("duplicates"))
    table = made.join(missed, ["run", "phase"], "full").join(late, ["run", "phase"], "full").join(
        again, ["run", "phase"], "full")
    return batch.tables(table, ["phase"])


def phase_table(measures: pd.DataFrame, episodes: pd.DataFrame, checks: list[CheckResult], phases: Phases,
                lag: pd.DataFrame | None = None) -> pd.DataFrame:
    """Seed 002's table per phase, as the article names its measures: records over the limit (`records_lost`:
    handled later than the limit after they were produced, or never), the maximum end-to-end latency
    (`max_latency_ms`), the time spent rebalancing (`rebalance_ms`: the spans when at least one member was
    rebalancing, merged, that start in the phase); plus the largest consumer lag (`max_lag`, records, from
    `lag`: experiments.summary.lag), duplicates and double ownership."""
    measures = measures.set_index("phase") if len(measures) else pd.DataFrame()
    double = next((c.evidence for c in checks if c.check == DOUBLE_OWNERSHIP.name), pd.DataFrame())

    def get(column: str, index: int, default=0):
        value = measures[column].get(index) if column in measures else None
        return default if value is None or pd.isna(value) else value

    rows = []
    for index, (name, start, end) in enumerate(phases):
        row = {"phase": name, "start_s": start, "end_s": end,
               "produced": int(get("produced", index)),
               "never_processed": int(get("never_processed", index)),
               "over_limit": int(get("over_limit", index)),
               "duplicates": int(get("duplicates", index)),
               "max_latency_ms": get("max_latency_ms", index, None),
               "p99_latency_ms": get("p99_latency_ms", index, None)}
        row["processed"] = row["produced"] - row["never_processed"]
        row["records_lost"] = row["never_processed"] + row["over_limit"]
        lower = float("-inf") if index == 0 else start - START_TOLERANCE_S
        upper = float("inf") if index == len(phases) - 1 else end - START_TOLERANCE_S
        starting = episodes[(episodes["start"] >= lower) & (episodes["start"] < upper)]
        row["rebalances"] = len(starting)
        row["rebalance_ms"] = float((starting["end"] - starting["start"]).sum() * 1000)
        row["max_lag"] = phase_lag(lag, start, end, first=index == 0, last=index == len(phases) - 1)
        if len(double):
            row["double_ownership_s"] = float(double[(double["start"] >= lower) & (double["start"] < upper)][
                "duration_s"].sum())
        else:
            row["double_ownership_s"] = 0.0
        rows.append(row)
    return pd.DataFrame(rows)


def throughput(produce_times: DataFrame, consumed: DataFrame, never: DataFrame, deliveries: DataFrame,
               config: CheckConfig, handled: DataFrame | None = None) -> DataFrame:
    """Per run and second of the run: records processed; and by the second they were produced: records
    produced, processed over the latency limit, never processed.

    A record is processed in the second its handling ended where the run's members had a service time
    (`handled`: records_processed batches with `t` and `done_list`, one end time per record), else in the
    second poll() returned it: after a stall the handled rate shows the backlog draining, capped by what the
    members can handle, where poll() would show one burst."""
    second = lambda column: F.floor(column).alias("second")  # noqa: E731
    processed = consumed.groupBy("run", second("t")).agg(F.sum("count").alias("processed"))
    if handled is not None:
        ends = handled.select("run", "t", "ts_ms", F.explode("done_list").alias("done_ms"))
        by_end = ends.groupBy("run", second(F.col("t") - (F.col("ts_ms") - F.col("done_ms")) / 1e3)).agg(
            F.count("*").alias("processed"))
        polled = processed.join(F.broadcast(handled.select("run").distinct()), "run", "left_anti")
        processed = by_end.unionByName(polled)
    made = produce_times.groupBy("run", second("t_produce")).agg(F.count("*").alias("produced"))
    late = deliveries.filter(F.col("latency_ms") > config.latency_limit_ms).groupBy(
        "run", second(F.col("t") - F.col("latency_ms") / 1000)).agg(F.count("*").alias("over_limit"))
    missed = never.filter(~F.col("unseen")).groupBy("run", second("t_produce")).agg(
        F.count("*").alias("never_processed"))
    keys = ["run", "second"]
    table = processed.join(made, keys, "full").join(late, keys, "full").join(missed, keys, "full")
    return table
