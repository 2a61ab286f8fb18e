"""What the summary needs to know about fault actions, each rule in one named function.

These restate rules of the fault actions (which kinds end a member's claims, how a fault's window is
delimited, from when convergence is awaited) for reading them back from events."""

from __future__ import annotations

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from experiments.scenario.actions import SILENCING_KINDS
from rebalance import events as ev

# A restart stops the member cleanly: its own events end its ownership. A member silenced by a fault
# (a crash) writes nothing more, so the fault itself ends its claims: the action table says which.
CRASH_KINDS = SILENCING_KINDS
FAULT_EVENTS = (ev.FAULT_STARTED, ev.FAULT_STOPPED)


def faults_that_end_ownership(control: DataFrame) -> DataFrame:
    """(run, target, t, seq) per member hit by a crash-like fault: the runner lists the hit members' ids in
    `member_ids`; `target` (comma-separated names) is the fallback."""
    faults = control.filter((F.col("type") == ev.FAULT_STARTED) & F.col("kind").isin(*CRASH_KINDS))
    hit = F.coalesce("member_ids", F.split(F.coalesce("target", F.lit("")), ","))
    return faults.select("run", F.explode(hit).alias("target"), "t", "seq").filter(F.col("target") != "")


def convergence_awaited_from(last_fault_t: float | None, last_join_t: float | None) -> float:
    """Convergence is awaited from the last fault event (its start or its end); without faults, from the
    last member to start."""
    if last_fault_t is not None:
        return float(last_fault_t)
    return float(last_join_t or 0.0)


def fault_windows(events: pd.DataFrame, run_end: float) -> pd.DataFrame:
    """Fault windows: each fault_started with its fault_stopped (or open until the end). `events`: the
    run's fault events in time order (type, t, fault_id, kind, target, link)."""
    rows, open_ = [], {}
    for _, event in events.iterrows():
        key = event["fault_id"] or f"{event['kind']}:{event['target']}"
        if event["type"] == ev.FAULT_STARTED:
            open_[key] = {"fault_id": key, "kind": event["kind"], "target": event["target"], "link": event["link"],
                          "start": event["t"], "end": None}
            rows.append(open_[key])
        elif key in open_:
            open_.pop(key)["end"] = event["t"]
    for row in rows:
        if row["end"] is None:
            row["end"] = run_end
    return pd.DataFrame(rows, columns=["fault_id", "kind", "target", "link", "start", "end"])
