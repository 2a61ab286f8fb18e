"""Time without a coordinator: how long each member went without an answer from its group coordinator
after the coordinator's broker was killed, or after its own coordination link was cut.

For every such fault and every member it hit, the gap runs from the fault to the member's first group
request afterwards that a coordinator answered. A fault hits every member of the group when it kills
the coordinator's broker (`coordinator_kill`, from the moment the broker was seen dead when the run
recorded it, else from the fault's start), and only the members it names when it cuts a coordination
link (`link` faults that stop traffic on the `coord` or `both` link, from the fault's start). A member
is counted when it was in the run at the fault (events before and after it) and speaks a group
protocol (it made group requests: legacy members talk to ZooKeeper and have no group coordinator).

Group requests are the classic group APIs and KIP-848's heartbeat, under the names the members write
in `coordination_request.op`; FindCoordinator and Metadata are not (any broker answers them). An
answer is any reply but the ones that say there is no coordinator there: a network failure,
NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE and COORDINATOR_LOAD_IN_PROGRESS (a REBALANCE_IN_PROGRESS
or an UNKNOWN_MEMBER_ID is the new coordinator speaking). Beside each gap: the FindCoordinator
requests the member made in it (each counted by the time it ended, as its event is written then).

`gap_rows` is the Spark query (one row per fault and member hit); `gap_table` turns a run's rows into
the `coordinator_gaps` table; `group_gap_s` is the run's figure, the group's maximum.
"""

from __future__ import annotations

import math

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from experiments.scenario.actions import Action, Link, LinkFault
from rebalance import events as ev
from rebalance import heartbeat_kinds

GROUP_APIS = ("JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit", "OffsetFetch", heartbeat_kinds.API)
FIND_COORDINATOR = "FindCoordinator"
NO_COORDINATOR = ("NETWORK_EXCEPTION", "NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS")
COORDINATOR_KILL = Action.COORDINATOR_KILL.value
CUTS = tuple(fault.value for fault in (LinkFault.PARTITION, LinkFault.RESET, LinkFault.DOWN))
CUT_LINKS = (Link.COORD.value, Link.BOTH.value)

COLUMNS = ["fault_id", "kind", "link", "member", "fault_t", "answered_t", "gap_s", "first_answer",
           "find_coordinator_requests"]


def gap_rows(control: DataFrame) -> DataFrame:
    """(run, fault_id, kind, link, member, fault_t, answered_t, first_answer, find_coordinator_requests) per
    fault and member hit. `control`: the control events with `t` (seconds from the run's start)."""
    kind, link = F.col("kind"), F.coalesce(F.col("link"), F.lit(""))
    relevant = (kind == COORDINATOR_KILL) | (kind.isin(*CUTS) & link.isin(*CUT_LINKS))
    started = control.filter((F.col("type") == ev.FAULT_STARTED) & relevant).select(
        "run", "fault_id", "kind", F.col("link"), "member_ids", F.col("t").alias("start_t"))
    seen_dead = control.filter((F.col("type") == ev.FAULT_STOPPED) & (kind == COORDINATOR_KILL)
                               & F.col("observed_ts_ns").isNotNull()).groupBy("run", "fault_id").agg(
        F.min(F.col("t") + (F.col("observed_ts_ns") - F.col("ts_ns")) / 1e9).alias("observed_t"))
    faults = started.join(seen_dead, ["run", "fault_id"], "left").select(
        "run", "fault_id", "kind", "link", "member_ids",
        F.when(F.col("kind") == COORDINATOR_KILL, F.coalesce("observed_t", "start_t")).otherwise(
            F.col("start_t")).alias("fault_t"))

    requests = control.filter((F.col("type") == ev.COORDINATION_REQUEST)
                              & F.col("op").isin(*GROUP_APIS, FIND_COORDINATOR)).select(
        "run", "member", F.col("t").alias("request_t"), "op", "error")
    speakers = requests.filter(F.col("op").isin(*GROUP_APIS)).select("run", "member").distinct()
    spans = control.filter(F.col("member").isNotNull() & (F.col("member") != "")).groupBy("run", "member").agg(
        F.min("t").alias("first_t"), F.max("t").alias("last_t"))
    members = spans.join(speakers, ["run", "member"])
    hit = faults.join(members, "run").filter(
        (F.col("first_t") <= F.col("fault_t")) & (F.col("last_t") >= F.col("fault_t"))
        & ((F.col("kind") == COORDINATOR_KILL) | F.array_contains(F.coalesce("member_ids", F.array()), F.col("member"))))
    hit = hit.select("run", "fault_id", "kind", "link", "member", "fault_t")

    keys = ["run", "fault_id", "kind", "link", "member", "fault_t"]
    later = requests.select(F.col("run").alias("r_run"), F.col("member").alias("r_member"), "request_t", "op", "error")
    after = hit.join(later, (F.col("run") == F.col("r_run")) & (F.col("member") == F.col("r_member"))
                     & (F.col("request_t") > F.col("fault_t")), "left").drop("r_run", "r_member")
    answered = F.col("op").isin(*GROUP_APIS) & (F.col("error").isNull() | ~F.col("error").isin(*NO_COORDINATOR))
    first = after.groupBy(*keys).agg(F.min(F.when(answered, F.struct("request_t", "op"))).alias("first"))
    first = first.select(*keys, F.col("first.request_t").alias("answered_t"), F.col("first.op").alias("first_answer"))
    finds = after.join(first.select("run", "fault_id", "member", "answered_t"), ["run", "fault_id", "member"]).filter(
        (F.col("op") == FIND_COORDINATOR)
        & (F.col("answered_t").isNull() | (F.col("request_t") <= F.col("answered_t")))).groupBy(
        "run", "fault_id", "member").agg(F.count(F.lit(1)).alias("find_coordinator_requests"))
    return first.join(finds, ["run", "fault_id", "member"], "left").select(
        *keys, "answered_t", "first_answer",
        F.coalesce("find_coordinator_requests", F.lit(0)).alias("find_coordinator_requests"))


def gap_table(rows: pd.DataFrame) -> pd.DataFrame:
    """The run's `coordinator_gaps` table: one row per fault and member hit, in time order. `gap_s` is
    empty for a member no coordinator answered before the run ended."""
    if rows is None or rows.empty:
        return pd.DataFrame({column: pd.Series(dtype=_DTYPES[column]) for column in COLUMNS})
    table = rows.copy()
    table["gap_s"] = table["answered_t"] - table["fault_t"]
    table["find_coordinator_requests"] = table["find_coordinator_requests"].fillna(0).astype(int)
    table = table.sort_values(["fault_t", "member"], kind="stable").reset_index(drop=True)
    return table[COLUMNS].astype({column: _DTYPES[column] for column in ("fault_t", "answered_t", "gap_s")})


def group_gap_s(table: pd.DataFrame) -> float | None:
    """The run's figure: the longest gap of any member (None: no such fault, or nobody answered)."""
    if table is None or table.empty or table["gap_s"].isna().all():
        return None
    value = float(table["gap_s"].max())
    return None if math.isnan(value) else value


_DTYPES = {"fault_id": "object", "kind": "object", "link": "object", "member": "object", "fault_t": "float64",
           "answered_t": "float64", "gap_s": "float64", "first_answer": "object", "find_coordinator_requests": "int64"}
