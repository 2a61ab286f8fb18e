"""Consumer lag over time, per second of a run (every frame keyed by `run`).

Kafka's `records-lag-max` is a member's largest lag over the partitions it fetches, a partition's lag being
its log end offset minus the member's position (the next offset it will fetch). From the events: a
partition's log end offset at the end of second s is one past the highest offset produced by then
(`records_produced`); its position is one past the last offset of its latest batch by then (`records_consumed`,
or `records_processed` for the offsets handled), whichever member took it, so a new owner that starts again
from the committed offset moves the position back and the lag up. A partition keeps counting while it has no
owner: its records wait all the same (an exporter's group lag counts them too).

Per second: `lag_max`, the largest partition lag (the largest records-lag-max of the members), and
`lag_total`, the lag summed over the partitions (the records the group has yet to take)."""

from __future__ import annotations

import pandas as pd
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F


def lag_per_second(produced: DataFrame, batches: DataFrame, partitions: DataFrame, runs: DataFrame) -> DataFrame:
    """(run, second, lag_max, lag_total) from 0 to the run's last second.

    `produced`: batches (run, tp, last_offset, ts_ns) as `event_tables.read_runs` gives them; `batches`: taken
    batches with their run time (run, tp, t, last_offset); `partitions`: every partition of each run (run, tp);
    `runs`: each run's `t0_ns` and `run_end`."""
    constants = F.broadcast(runs.select("run", "t0_ns", "run_end"))
    ends = produced.join(constants, "run").groupBy(
        "run", "tp", F.floor((F.col("ts_ns") - F.col("t0_ns")) / 1e9).alias("second")).agg(
        (F.max("last_offset") + 1).alias("log_end"))
    taken = batches.groupBy("run", "tp", F.floor("t").alias("second")).agg(
        (F.max_by("last_offset", F.struct("t", "last_offset")) + 1).alias("position"))
    grid = partitions.join(constants, "run").select(
        "run", "tp", F.explode(F.sequence(F.lit(0).cast("long"), F.floor("run_end"))).alias("second"))
    so_far = Window.partitionBy("run", "tp").orderBy("second").rowsBetween(Window.unboundedPreceding, 0)
    filled = grid.join(ends, ["run", "tp", "second"], "left").join(taken, ["run", "tp", "second"], "left").select(
        "run", "second",
        F.coalesce(F.last("log_end", ignorenulls=True).over(so_far), F.lit(0)).alias("log_end"),
        F.coalesce(F.last("position", ignorenulls=True).over(so_far), F.lit(0)).alias("position"))
    lag = F.greatest(F.col("log_end") - F.col("position"), F.lit(0))
    return filled.groupBy("run", "second").agg(F.max(lag).alias("lag_max"), F.sum(lag).alias("lag_total"))


def phase_lag(lag: pd.DataFrame | None, start: float, end: float, *, first: bool, last: bool) -> int | None:
    """The largest `lag_max` of the seconds that start in a phase (the first phase from the run's start, the
    last to its end); None when the run has no lag table."""
    if lag is None or lag.empty:
        return None
    seconds = lag["second"]
    inside = lag[((seconds >= start) | first) & ((seconds < end) | last)]
    return int(inside["lag_max"].max()) if len(inside) else 0
