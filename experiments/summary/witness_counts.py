"""The servers' count of requests beside the members' own, from `server_counters` events (Spark).

Between two consecutive samples of a run (the same servers answering both, no counter reset) the
server's count is the growth of `served` less the background the members do not log: ZooKeeper's
packets include every client's pings and the brokers' own sessions. That background is measured once
per run, in the warm-up's quiet window (the group stable, nobody joining: samples `quiet start` and
`quiet end`), as a rate: served packets less the requests the members logged, per second. The
brokers' counts leave the background APIs out by name, so their baseline comes out near zero.

The members' count over the same window is their `coordination_request` events, background APIs
(heartbeats, commits through OffsetCommit, fetches, metadata) left out. KIP-848 has no separate join
or sync: its one ConsumerGroupHeartbeat carries both the rhythm and the changes, so a heartbeat is
background only when the member logged it `steady` (rebalance.heartbeat_kinds); the broker counts the
others apart. In ZooKeeper a commit is a `set` like any other, so the witness cannot leave commits
out: here they stay in both counts (the herd table's own request count leaves them out).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from rebalance import events as ev
from rebalance import heartbeat_kinds

# Requests every member makes all the time, whether or not the group changes: not herd cost.
BACKGROUND_OPS = ("Heartbeat", "OffsetCommit", "Fetch", "ListOffsets", "Metadata")
QUIET_START, QUIET_END = "quiet start", "quiet end"


def _op() -> F.Column:
    return F.coalesce(F.col("op"), F.lit(""))


def _background() -> F.Column:
    steady_heartbeat = (_op() == heartbeat_kinds.API) & (F.coalesce(F.col("detail"), F.lit("")) == heartbeat_kinds.STEADY)
    return _op().isin(*BACKGROUND_OPS) | steady_heartbeat


def herd_requests(control: DataFrame) -> DataFrame:
    """Requests that count as a change's cost: group APIs and ZooKeeper ops, without background ones
    and without ZooKeeper offset commits."""
    return control.filter((F.col("type") == ev.COORDINATION_REQUEST) & ~_background()
                          & ~((_op() == "set") & F.coalesce(F.col("path"), F.lit("")).contains("/offsets/")))


def requests_made() -> F.Column:
    """How many requests a coordination_request stands for: one, or its `count` (a simulated ZooKeeper's
    `get_many`, docs/simulation.md)."""
    return F.coalesce(F.col("count"), F.lit(1))


def witnessed_requests(control: DataFrame) -> DataFrame:
    """Requests the servers' counts can be held against: as `herd_requests`, ZooKeeper commits kept."""
    return control.filter((F.col("type") == ev.COORDINATION_REQUEST) & ~_background())


def sample_windows(control: DataFrame) -> DataFrame:
    """Per run, each window between consecutive server samples: run, start, end, from_moment, to_moment,
    server, served_delta (raw growth), client (witnessed requests the members logged in [start, end))."""
    samples = control.filter((F.col("type") == ev.SERVER_COUNTERS) & F.col("served").isNotNull()).select(
        "run", "t", "seq", "server", "moment", "served", "nodes")
    in_time = Window.partitionBy("run").orderBy("t", "seq")
    windows = samples.select(
        "run", F.lag("t").over(in_time).alias("start"), F.col("t").alias("end"),
        F.lag("moment").over(in_time).alias("from_moment"), F.col("moment").alias("to_moment"), "server",
        (F.col("served") - F.lag("served").over(in_time)).alias("served_delta"),
        ((F.lag("server").over(in_time) == F.col("server"))
         & (F.lag("nodes").over(in_time) == F.col("nodes"))).alias("same_nodes"),
    ).filter(F.col("start").isNotNull() & F.col("same_nodes") & (F.col("served_delta") >= 0)
             & (F.col("end") > F.col("start"))).drop("same_nodes")
    spans = windows.select(F.col("run").alias("w_run"), F.col("start").alias("w_start"), "end")
    requests = witnessed_requests(control).select("run", "t", requests_made().alias("made"))
    inside = (F.col("run") == F.col("w_run")) & (F.col("t") >= F.col("w_start")) & (F.col("t") < F.col("end"))
    counts = requests.join(F.broadcast(spans), inside).groupBy("run", F.col("w_start").alias("start")).agg(
        F.sum("made").alias("client"))
    return windows.join(counts, ["run", "start"], "left").withColumn("client", F.coalesce("client", F.lit(0)))


def witness_windows(control: DataFrame) -> DataFrame:
    """`sample_windows` with the background taken out: `baseline_per_s` (from the quiet window, 0 without
    one) and `server` = served_delta - baseline_per_s x duration."""
    windows = sample_windows(control)
    quiet = windows.filter((F.col("from_moment") == QUIET_START) & (F.col("to_moment") == QUIET_END)).groupBy(
        "run").agg(F.max_by(F.greatest(F.lit(0.0), (F.col("served_delta") - F.col("client"))
                                       / (F.col("end") - F.col("start"))), "end").alias("baseline_per_s"))
    return windows.join(F.broadcast(quiet), "run", "left").withColumn(
        "baseline_per_s", F.coalesce("baseline_per_s", F.lit(0.0))).withColumn(
        "server", F.col("served_delta") - F.col("baseline_per_s") * (F.col("end") - F.col("start")))
