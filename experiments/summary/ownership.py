"""Who believed it owned which partition, and when (every frame keyed by `run`)."""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from experiments.summary.fault_rules import faults_that_end_ownership
from rebalance import events as ev


def ownership(control: DataFrame, universe: DataFrame, runs: DataFrame) -> DataFrame:
    """Intervals (run, member, tp, start, end, open) during which a member believed it owned a partition.

    A member starts owning on partitions_assigned and on rebalance_completed's `assigned`
    (its whole assignment); it stops on partitions_revoked/lost, on a rebalance_completed
    that no longer lists the partition, on member_stopped, and when a crash fault hits it.
    `universe`: every partition of each run (run, tp); `runs`: each run's `run_end`."""
    listed = control.filter(F.col("type").isin(ev.PARTITIONS_ASSIGNED, ev.PARTITIONS_REVOKED, ev.PARTITIONS_LOST)).select(
        "run", "member", "t", "seq", F.explode("partitions").alias("tp"),
        (F.col("type") == ev.PARTITIONS_ASSIGNED).cast("int").alias("owned"))
    completed = control.filter((F.col("type") == ev.REBALANCE_COMPLETED) & F.col("assigned").isNotNull()).join(
        universe, "run").select("run", "member", "t", "seq", "tp",
                                F.array_contains("assigned", F.col("tp")).cast("int").alias("owned"))
    stopped = control.filter(F.col("type") == ev.MEMBER_STOPPED).select("run", "member", "t", "seq")
    names = control.filter(F.col("member") != "").select("run", "member", "process").distinct().alias("n")
    crashes = faults_that_end_ownership(control).alias("c")
    target = F.col("c.target")
    crashed = crashes.join(
        names, (F.col("c.run") == F.col("n.run")) & ((target == F.col("n.member")) | (target == F.col("n.process"))
                                                     | (target == F.concat(F.lit("member:"), F.col("n.member")))),
    ).select("c.run", "n.member", "c.t", "c.seq").distinct()
    ended = stopped.unionByName(crashed).join(universe, "run").select(
        "run", "member", "t", "seq", "tp", F.lit(0).alias("owned"))
    actions = listed.unionByName(completed).unionByName(ended).filter(F.col("member") != "")

    per_pair = Window.partitionBy("run", "member", "tp").orderBy("t", "seq")
    flips = actions.withColumn("before", F.lag("owned", 1, 0).over(per_pair)).filter(F.col("owned") != F.col("before"))
    return flips.withColumn("end", F.lead("t").over(per_pair)).filter(F.col("owned") == 1).join(
        F.broadcast(runs.select("run", "run_end")), "run").select(
        "run", "member", "tp", F.col("t").alias("start"), F.coalesce("end", "run_end").alias("end"),
        F.col("end").isNull().alias("open"),
    )


def segments(owned: DataFrame, universe: DataFrame, runs: DataFrame) -> DataFrame:
    """Per partition, the spans between ownership changes and who owned it in each (run, tp, start, end, owners)."""
    origin = universe.select("run", "tp", F.lit(0.0).alias("t"))
    bounds = (origin.unionByName(owned.select("run", "tp", F.col("start").alias("t")))
              .unionByName(owned.select("run", "tp", F.col("end").alias("t"))).distinct())
    spans = bounds.withColumn("end", F.lead("t").over(Window.partitionBy("run", "tp").orderBy("t"))).join(
        F.broadcast(runs.select("run", "run_end")), "run").select(
        "run", "tp", F.col("t").alias("start"), F.coalesce("end", F.greatest("t", "run_end")).alias("end"))
    o = owned.alias("o")
    covered = spans.alias("s").join(
        o, (F.col("s.run") == F.col("o.run")) & (F.col("s.tp") == F.col("o.tp")) & (F.col("o.start") <= F.col("s.start"))
        & (F.col("o.end") > F.col("s.start")),
        "left",
    )
    return covered.groupBy("s.run", "s.tp", "s.start", "s.end").agg(
        F.sort_array(F.collect_set("o.member")).alias("owners")
    ).select("run", "tp", "start", "end", "owners")
