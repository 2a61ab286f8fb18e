"""Herd cost per membership change and Kafka's rebalance metrics, for every run of a pass."""

from __future__ import annotations

import pandas as pd
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from experiments.summary.fault_rules import faults_that_end_ownership
from experiments.summary.witness_counts import herd_requests, requests_made
from rebalance import events as ev
from rebalance import heartbeat_kinds

CHANGE_GAP_S = 0.05          # membership changes closer than this count as one change
# What a membership change causes: requests, notifications, attempts, and the assignments that end it.
_WORK = (ev.WATCH_NOTIFICATION, ev.REBALANCE_ATTEMPT, ev.REBALANCE_FAILED, ev.REBALANCE_COMPLETED,
         ev.PARTITIONS_ASSIGNED)
_SETTLED = (ev.REBALANCE_COMPLETED, ev.PARTITIONS_ASSIGNED)
_WENT_AHEAD = "went_ahead"   # a step the runner took on its timeout, the group not yet stable again


def rebalance_metrics(control: DataFrame) -> DataFrame:
    """Per run and member, under the Kafka consumer metric names (`group_metrics` adds the group's row)."""
    per_member = Window.partitionBy("run", "member").orderBy("t", "seq").rowsBetween(Window.unboundedPreceding, -1)
    rebalances = control.filter(F.col("type").isin(ev.REBALANCE_STARTED, ev.REBALANCE_COMPLETED, ev.REBALANCE_FAILED)
                                ).withColumn(
        "last_start", F.last(F.when(F.col("type") == ev.REBALANCE_STARTED, F.col("t")), ignorenulls=True).over(per_member)
    ).withColumn("latency", F.coalesce("duration_ms", (F.col("t") - F.col("last_start")) * 1000))
    done = F.col("type") == ev.REBALANCE_COMPLETED
    metrics = rebalances.groupBy("run", "member").agg(
        F.sum(done.cast("int")).alias("rebalance-total"),
        F.sum((F.col("type") == ev.REBALANCE_FAILED).cast("int")).alias("failed-rebalance-total"),
        F.avg(F.when(done, F.col("latency"))).alias("rebalance-latency-avg"),
        F.max(F.when(done, F.col("latency"))).alias("rebalance-latency-max"),
        F.sum(F.when(done, F.col("latency"))).alias("rebalance-latency-total"),
        F.max(F.when(done, F.col("t"))).alias("last_done_t"),
    )
    requests = control.filter(F.col("type") == ev.COORDINATION_REQUEST).groupBy("run", "member").agg(
        F.avg(F.when(F.col("op") == "JoinGroup", F.col("latency_ms"))).alias("join-time-avg"),
        F.max(F.when(F.col("op") == "JoinGroup", F.col("latency_ms"))).alias("join-time-max"),
        F.avg(F.when(F.col("op") == "SyncGroup", F.col("latency_ms"))).alias("sync-time-avg"),
        F.max(F.when(F.col("op") == "SyncGroup", F.col("latency_ms"))).alias("sync-time-max"),
    )
    return metrics.join(requests, ["run", "member"], "left")


def group_metrics(table: pd.DataFrame, run_end: float) -> pd.DataFrame:
    """One run's member rows (from `rebalance_metrics`) with the group's row first."""
    last = table.pop("last_done_t")
    table.insert(table.columns.get_loc("rebalance-latency-total") + 1, "last-rebalance-seconds-ago", run_end - last)
    if table.empty:
        return table
    group = {
        "member": "(group)",
        "rebalance-total": int(table["rebalance-total"].sum()),
        "failed-rebalance-total": int(table["failed-rebalance-total"].sum()),
        "rebalance-latency-avg": table["rebalance-latency-total"].sum() / max(table["rebalance-total"].sum(), 1),
        "rebalance-latency-max": table["rebalance-latency-max"].max(),
        "rebalance-latency-total": table["rebalance-latency-total"].sum(),
        "last-rebalance-seconds-ago": table["last-rebalance-seconds-ago"].min(),
        "join-time-avg": table["join-time-avg"].mean(), "join-time-max": table["join-time-max"].max(),
        "sync-time-avg": table["sync-time-avg"].mean(), "sync-time-max": table["sync-time-max"].max(),
    }
    return pd.concat([pd.DataFrame([group]), table], ignore_index=True)


def herd_changes(control: DataFrame) -> DataFrame:
    """Per run and membership change (a join, a leave, a crash): what it cost the group until it was stable.

    requests: coordination requests (ZooKeeper ops or group APIs, background ones excluded);
    notifications: watch notifications; members_moved: members whose assignment changed (gave partitions
    up or took some); stable_t: the last assignment it caused; next_went_ahead: 1 when the runner took the
    next change on its timeout, this one not yet stable (`after = "stable"`, experiments.run.runner).
    `herd_table` adds the time without owners from the ownership intervals, and which changes overlap."""
    started = control.filter(F.col("type") == ev.MEMBER_STARTED).select(
        "run", "t", "seq", F.lit("join").alias("kind"), F.lit(1).alias("delta"))
    stopped = _leaves(control).select("run", "t", "seq", F.lit("leave").alias("kind"), F.lit(-1).alias("delta"))
    crashed = faults_that_end_ownership(control).select(
        "run", "t", "seq", F.lit("crash").alias("kind"), F.lit(-1).alias("delta"))
    in_time = Window.partitionBy("run").orderBy("t", "seq")
    changes = (
        started.unionByName(stopped).unionByName(crashed)
        .withColumn("live_after", F.sum("delta").over(in_time.rowsBetween(Window.unboundedPreceding, 0)))
        .withColumn("gap", F.col("t") - F.lag("t").over(in_time))
        .withColumn("new", F.when(F.col("gap").isNull() | (F.col("gap") > CHANGE_GAP_S), 1).otherwise(0))
        .withColumn("change", F.sum("new").over(in_time.rowsBetween(Window.unboundedPreceding, 0)))
        .withColumn("live_before", F.col("live_after") - F.col("delta"))
        .groupBy("run", "change").agg(
            F.min("t").alias("t"), F.first("kind").alias("kind"), F.count("*").alias("members_changed"),
            F.min_by("live_before", F.struct("t", "seq")).alias("live_before"),
            F.max_by("live_after", F.struct("t", "seq")).alias("live_after"))
    )
    # A member whose assignment changed gave partitions up or took new ones (an eager member does both).
    moved = F.when(F.col("type").isin(ev.PARTITIONS_REVOKED, ev.PARTITIONS_ASSIGNED)
                   & (F.size(F.coalesce("partitions", F.array())) > 0), F.col("member"))
    work = herd_requests(control).unionByName(
        control.filter(F.col("type").isin(*_WORK, ev.PARTITIONS_REVOKED)), allowMissingColumns=True).select(
        "run", "t", "seq", "type", "outcome", moved.alias("moved"), F.lit(None).cast("long").alias("change"),
        F.when(F.col("type") == ev.COORDINATION_REQUEST, requests_made()).otherwise(0).alias("made"))
    marks = changes.select("run", "t", F.lit(-1).cast("long").alias("seq"), F.lit("change").alias("type"),
                           F.lit(None).cast("string").alias("outcome"), F.lit(None).cast("string").alias("moved"),
                           "change", F.lit(0).cast("long").alias("made"))
    # The runner's event of a step that went ahead unstable comes just before the change it makes: ordered
    # before that change's mark, it falls to the change that had not settled.
    went_ahead = control.filter(F.col("type").isin(ev.PHASE, ev.FAULT_STARTED)
                                & (F.get_json_object("params", "$.stable") == "false")).select(
        "run", "t", F.lit(-2).cast("long").alias("seq"), F.lit(_WENT_AHEAD).alias("type"),
        F.lit(None).cast("string").alias("outcome"), F.lit(None).cast("string").alias("moved"),
        F.lit(None).cast("long").alias("change"), F.lit(0).cast("long").alias("made"))
    attributed = work.unionByName(marks).unionByName(went_ahead).withColumn(
        "change", F.last("change", ignorenulls=True).over(in_time.rowsBetween(Window.unboundedPreceding, 0))
    ).filter((F.col("type") != "change") & F.col("change").isNotNull())
    costs = attributed.groupBy("run", "change").agg(
        F.sum("made").alias("requests"),
        F.sum((F.col("type") == ev.WATCH_NOTIFICATION).cast("int")).alias("notifications"),
        F.sum(((F.col("type") == ev.REBALANCE_ATTEMPT) & (F.col("outcome") != "success")).cast("int")
              + (F.col("type") == ev.REBALANCE_FAILED).cast("int")).alias("failed_attempts"),
        F.max(F.when(F.col("type").isin(*_SETTLED), F.col("t"))).alias("stable_t"),
        F.count_distinct("moved").alias("members_moved"),
        F.max((F.col("type") == _WENT_AHEAD).cast("int")).alias("next_went_ahead"),
    )
    return changes.join(costs, ["run", "change"], "left")


def _leaves(control: DataFrame) -> DataFrame:
    """Each member_stopped, moved back to the member's own leave heartbeat when it logged one (KIP-848's
    member says it leaves before it stops), so that the heartbeat is the leave's cost, not the change's before."""
    is_leave = (F.col("op") == heartbeat_kinds.API) & (F.col("detail") == heartbeat_kinds.LEAVE)
    own = Window.partitionBy("run", "member").orderBy("t", "seq").rowsBetween(Window.unboundedPreceding, -1)
    marks = control.filter((F.col("type") == ev.MEMBER_STOPPED)
                           | ((F.col("type") == ev.COORDINATION_REQUEST) & is_leave)).select(
        "run", "member", "t", "seq", "type",
        F.last(F.when(is_leave, F.struct("t", "seq")), ignorenulls=True).over(own).alias("said"),
        F.last(F.when(F.col("type") == ev.MEMBER_STOPPED, F.col("t")), ignorenulls=True).over(own).alias("last_stop"))
    fresh = F.col("said").isNotNull() & (F.col("last_stop").isNull() | (F.col("said.t") >= F.col("last_stop")))
    return marks.filter(F.col("type") == ev.MEMBER_STOPPED).select(
        "run", F.when(fresh, F.col("said.t")).otherwise(F.col("t")).alias("t"),
        F.when(fresh, F.col("said.seq")).otherwise(F.col("seq")).alias("seq"))


def herd_table(table: pd.DataFrame, owned_intervals: pd.DataFrame, partitions: int,
               witness: pd.DataFrame | None = None) -> pd.DataFrame:
    """One run's changes (from `herd_changes`) with stop-the-world time (no partition owned by anyone)
    and unowned partition-seconds until each change was stable; `server_requests` beside the members'
    `requests` when the servers' counters were sampled (`witness`: the run's `witness_windows`); and
    `overlapped` (`overlapping`)."""
    if table.empty:
        return table
    table = table.sort_values("t", kind="stable").reset_index(drop=True)
    table["overlapped"] = overlapping(table)
    for column in ("requests", "notifications", "failed_attempts", "members_moved"):
        table[column] = table[column].fillna(0).astype(int)
    table.insert(table.columns.get_loc("requests") + 1, "server_requests",
                 server_per_change(table["t"], witness if witness is not None else pd.DataFrame()))
    # The last assignment a member took before the next change (what this column measured under the name
    # stable_s), and when the group was settled: every partition with exactly one owner, for SETTLED_FOR_S or
    # until the next change; NaN when that never came before the next change (or the run's end).
    table["last_assignment_s"] = table["stable_t"] - table["t"]
    table["settled_s"] = settled_after(table["t"], owned_intervals, partitions, table.get("live_after"))
    owned = owned_count_spans(owned_intervals)
    stw, unowned = [], []
    for _, row in table.iterrows():
        end = row["stable_t"] if pd.notna(row["stable_t"]) else row["t"]
        clipped = (owned["end"].clip(upper=end) - owned["start"].clip(lower=row["t"])).clip(lower=0)
        stw.append(float(clipped[owned["owned"] == 0].sum()))
        unowned.append(float((clipped * (partitions - owned["owned"]).clip(lower=0)).sum()))
    table["stop_the_world_s"] = stw
    table["unowned_partition_s"] = unowned
    return table.drop(columns=["stable_t", "next_went_ahead"], errors="ignore")


def overlapping(table: pd.DataFrame) -> pd.Series:
    """Per change (in time order), whether it overlaps a neighbour: the next change began before this one
    was stable, as the runner saw it (it took the next step on its timeout) or as the events show it (no
    member completed a rebalance or took a partition before the next change began). Both changes of such
    a pair are marked: their requests and times are each other's too."""
    following = table["t"].shift(-1).notna()
    went_ahead = table["next_went_ahead"].fillna(0) > 0 if "next_went_ahead" in table else False
    unsettled = (went_ahead | (table["stable_t"].isna() & following)).astype(bool)
    return unsettled | unsettled.shift(1, fill_value=False)


def server_per_change(change_times: pd.Series, windows: pd.DataFrame) -> list[float | None]:
    """The servers' count for each change, over the same span the members' count covers: from the last
    sample before the change to the last sample before the next change (the run's last sample for the
    last change). None where that span is not sampled: no sample between the change and the one before
    it, none after it, or a window missing (a node not answering, a counter reset)."""
    times = list(change_times)
    if windows.empty:
        return [None] * len(times)
    windows = windows.sort_values("end")
    samples = sorted({*windows["start"], *windows["end"]})
    by_start = {row.start: row for row in windows.itertuples()}
    counts: list[float | None] = []
    for index, t in enumerate(times):
        previous = times[index - 1] if index else float("-inf")
        following = times[index + 1] if index + 1 < len(times) else float("inf")
        before = [s for s in samples if s <= t]
        until = [s for s in samples if s <= following]
        if not before or before[-1] <= previous or not until or until[-1] <= t:
            counts.append(None)
            continue
        total, at = 0.0, before[-1]
        while at < until[-1] and at in by_start:
            total, at = total + by_start[at].server, by_start[at].end
        counts.append(round(total, 1) if at == until[-1] else None)
    return counts


SETTLED_FOR_S = 2.0   # as the runner's wait for a stable group: every partition owned once, for a moment


def settled_after(change_times: pd.Series, intervals: pd.DataFrame, partitions: int,
                  live_after: pd.Series | None = None) -> list[float | None]:
    """For each change, how long until the group was settled: every partition with exactly one owner and, where
    there are partitions enough, every live member (`live_after`) owning some, kept for SETTLED_FOR_S or until
    the next change. None when that never came before the next change (or the run's end)."""
    times = [float(t) for t in change_times]
    sizes = [None] * len(times) if live_after is None else [None if pd.isna(n) else int(n) for n in live_after]
    if not times or partitions <= 0 or intervals.empty:
        return [None] * len(times)
    deltas = sorted([(float(row.start), 1, row.tp, row.member) for row in intervals.itertuples()]
                    + [(float(row.end), -1, row.tp, row.member) for row in intervals.itertuples()],
                    key=lambda d: (d[0], d[1]))
    per_partition: dict[str, int] = {}
    per_member: dict[str, int] = {}
    once = owning = 0
    states: list[tuple[float, bool, int]] = []   # (from, every partition owned exactly once, members owning)
    for at, step, tp, member in deltas:
        before = per_partition.get(tp, 0)
        per_partition[tp] = before + step
        once += (per_partition[tp] == 1) - (before == 1)
        held = per_member.get(member, 0)
        per_member[member] = held + step
        owning += (per_member[member] > 0) - (held > 0)
        if states and states[-1][0] == at:
            states.pop()                     # several changes at one instant: the state after the last
        states.append((at, once == partitions, owning))
    answers: list[float | None] = []
    for index, t in enumerate(times):
        following = times[index + 1] if index + 1 < len(times) else float("inf")
        wanted = None if sizes[index] is None else min(sizes[index], partitions)
        answer, since = None, None
        for position, (start, all_once, owners) in enumerate(states):
            end = states[position + 1][0] if position + 1 < len(states) else float("inf")
            if end <= t:
                continue
            if start >= following:
                break
            if not (all_once and (wanted is None or owners == wanted)):
                since = None
                continue
            since = max(start, t) if since is None else since
            if min(end, following) - since >= SETTLED_FOR_S or end >= following:
                answer = since - t
                break
        answers.append(answer)
    return answers


def owned_count_spans(intervals: pd.DataFrame) -> pd.DataFrame:
    """How many partitions were owned (by anyone, counted once per owner) between ownership changes."""
    deltas = pd.concat([pd.DataFrame({"t": intervals["start"], "d": 1}), pd.DataFrame({"t": intervals["end"], "d": -1})])
    frame = deltas.groupby("t", as_index=False)["d"].sum().sort_values("t").reset_index(drop=True)
    frame["owned"] = frame["d"].cumsum()
    frame["start"] = frame["t"]
    frame["end"] = frame["t"].shift(-1).fillna(frame["t"].max() if len(frame) else 0.0)
    return frame[["start", "end", "owned"]]


def usual_group_size(herd: pd.DataFrame, run_end: float) -> int | None:
    """Without lock.json: the group size the run spent the most time at."""
    if herd.empty:
        return None
    spans = herd[["t", "live_after"]].copy()
    spans["seconds"] = spans["t"].shift(-1).fillna(run_end) - spans["t"]
    by_size = spans[spans["live_after"] > 0].groupby("live_after")["seconds"].sum()
    return int(by_size.idxmax()) if len(by_size) else None
