"""The servers as witnesses: their own request counts against the members', and their stalls."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
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
)
from experiments.summary.spark_batch import Batch
from experiments.summary.witness_counts import witness_windows
from rebalance import events as ev


def server_witness(inputs: CheckInputs, config: CheckConfig, batch: Batch) -> Reader:
    """The servers' own count of requests (ZooKeeper's packets, the brokers' group-API counts) against the
    members' logged requests, window by window between the runner's server samples."""
    windows = witness_windows(inputs.control).withColumn("difference", F.col("server") - F.col("client"))
    allowed = F.greatest(F.lit(float(config.witness_tolerance_requests)),
                         F.lit(config.witness_tolerance_fraction) * F.greatest("server", "client"))
    flagged = windows.filter(F.abs("difference") > allowed).select(
        "run", "start", "end", "from_moment", "to_moment", "server", "client", "difference", "baseline_per_s")
    stats = batch.values(windows.groupBy("run").agg(
        F.count("*").alias("windows"), F.sum("server").alias("server"), F.sum("client").alias("client"),
        F.sum("served_delta").alias("served"), F.sum((F.abs("difference") > allowed).cast("int")).alias("n")))
    evidence = batch.first_rows(flagged, ["start"], config.evidence_rows)

    def read() -> Results:
        return {run: witness_result(stats.value.get(run), config, evidence.value[run]) for run in inputs.runs}

    return read


def witness_tolerance(config: CheckConfig) -> str:
    """The rule a window is held to, in words."""
    return (f"a window may differ by {config.witness_tolerance_requests} requests or "
            f"{config.witness_tolerance_fraction:.0%} of the larger count, whichever is more")


def witness_result(row: Mapping | None, config: CheckConfig, evidence: pd.DataFrame | None = None) -> CheckResult:
    """The server witness's verdict from one run's totals over its windows: `windows`, `server` (the servers'
    count less the background), `client` (the members' logged requests), `served` (the servers' raw count)
    and `n` (windows beyond the tolerance). Servers that counted nothing at all saw nothing: unknown, even
    when every window is within the tolerance (a few member requests are)."""
    name = checks.SERVER_WITNESS.name
    evidence = pd.DataFrame() if evidence is None else evidence
    if not row or not row["windows"]:
        return CheckResult(name, Verdict.UNKNOWN, 0, "no two comparable server samples")
    windows, client = row["windows"], int(row["client"] or 0)
    if not row["served"]:
        seen = f"while the members logged {client}" if client else "and neither did the members"
        return CheckResult(name, Verdict.UNKNOWN, 0, f"the servers counted no request in {windows} windows "
                           f"{seen}: the witness saw nothing to compare")
    totals = f"servers {row['server']:.0f}, members {client} requests in total"
    rule = witness_tolerance(config)
    if row["n"]:   # the lab's two measures of one thing disagree: said as counts (checks.SERVER_WITNESS.cross_check)
        return CheckResult(name, Verdict.FALSE, row["n"], f"members {client:,}, servers {row['server']:,.0f}; "
                           f"{row['n']} of {windows} windows differ by more than the tolerance ({rule}); the figures "
                           "use the members' counts (the servers' are the herd table's server_requests)", evidence)
    return CheckResult(name, Verdict.TRUE, 0, f"servers and members agree within the tolerance in all {windows} "
                       f"windows ({rule}); {totals}", evidence)


def server_stall(inputs: CheckInputs, config: CheckConfig, batch: Batch) -> Reader:
    """Windows of more than `stall_threshold_s` in which a broker answered no request while requests were held
    up, as each broker's own sampler wrote them (`broker_liveness`: `stalled` when a window reaches its
    threshold, `resumed` when it ends; broker.liveness). A `stalled` without its `resumed` (the log ended, or
    the broker died, inside the stall) lasts until that broker process's last event."""
    liveness = inputs.control.filter(F.col("type") == ev.BROKER_LIVENESS).withColumn(
        "last_t", F.max("t").over(Window.partitionBy("run", "process")))
    marks = liveness.filter(F.col("state").isin("stalled", "resumed")).withColumn(
        "start", F.col("t") - (F.col("ts_ns") - F.col("start_ns")) / 1e9)
    ended = marks.filter(F.col("state") == "resumed")
    still_open = marks.filter(F.col("state") == "stalled").join(
        ended.select("run", "process", "start_ns"), ["run", "process", "start_ns"], "left_anti")
    windows = ended.withColumn("length_s", F.col("stalled_ms") / 1000).withColumn("ended", F.lit(True)).unionByName(
        still_open.withColumn("length_s", F.greatest(F.col("stalled_ms") / 1000, F.col("last_t") - F.col("start")))
        .withColumn("ended", F.lit(False)))
    stalls = windows.filter(F.col("length_s") > config.stall_threshold_s).select(
        "run", F.col("node").alias("broker"), "process", "start", "length_s", "ended", "outstanding",
        (F.col("loop_lag_ms") / 1000).alias("loop_lag_s"), (F.col("sampler_gap_ms") / 1000).alias("sampler_gap_s"),
        (F.col("gc_ms") / 1000).alias("gc_s"), (F.col("loop_cpu_ms") / 1000).alias("loop_cpu_s"),
        (F.col("loop_waited_ms") / 1000).alias("loop_waited_s"),
        F.array_join(F.slice(F.split(F.coalesce("stack", F.lit("")), "\n"), 1, 5), " <- ").alias("top_frames"))
    stats = batch.values(stalls.groupBy("run").agg(
        F.count("*").alias("n"), F.max_by(F.struct("broker", "start", "length_s", "loop_lag_s", "loop_waited_s", "top_frames"),
                                          "length_s").alias("longest")))
    lag = batch.values(liveness.groupBy("run").agg(F.max("loop_lag_ms").alias("lag_ms"),
                                                   F.countDistinct("process").alias("brokers")))
    evidence = batch.first_rows(stalls, ["start", "broker"], config.evidence_rows)

    def read() -> Results:
        return {run: stall_result(stats.value.get(run), lag.value.get(run), config, evidence.value[run])
                for run in inputs.runs}

    return read


def _waited(longest: Mapping) -> str:
    """How long the stalled loop waited for a CPU, where the broker recorded it (a window that ended)."""
    waited = longest["loop_waited_s"] if "loop_waited_s" in longest else None
    return "" if waited is None else f", {waited:.1f} s of it waiting for a CPU"


def stall_result(row: Mapping | None, lag: Mapping | None, config: CheckConfig,
                 evidence: pd.DataFrame | None = None) -> CheckResult:
    """The server-stall verdict of one run: `row` has `n` (stall windows) and the `longest` of them; `lag`
    the longest loop lag any broker sampled and how many broker processes sampled."""
    name, limit = checks.SERVER_STALL.name, config.stall_threshold_s
    evidence = pd.DataFrame() if evidence is None else evidence
    count = int(row["n"]) if row else 0
    if count:
        longest = row["longest"]
        frame = (longest["top_frames"] or "").split(" <- ")[0] or "no stack"
        return CheckResult(name, Verdict.FALSE, count, f"{count} window{'s' if count > 1 else ''} of more than "
                           f"{limit:g} s in which a broker answered no request while requests were held up; the "
                           f"longest {longest['length_s']:.1f} s (broker {longest['broker']} at t={longest['start']:.1f} s, "
                           f"loop lag {longest['loop_lag_s'] or 0:.1f} s{_waited(longest)}, in {frame})", evidence)
    worst = (lag or {}).get("lag_ms") or 0.0
    processes = (lag or {}).get("brokers") or 0
    return CheckResult(name, Verdict.TRUE, 0, f"no broker went more than {limit:g} s without answering while "
                       f"requests were held up ({processes} broker process{'es' if processes != 1 else ''} "
                       f"sampled; longest event-loop lag {worst / 1000:.2f} s)", evidence)


