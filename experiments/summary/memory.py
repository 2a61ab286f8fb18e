"""Resident memory per process over a run: the brokers' liveness samples and the member hosts'
`process_memory` events, and the slope a soak is judged by (least squares over the run's second half,
MB a minute: the first half holds the start-up's growth).

A process started late (a restarted host, a member that joins and is scaled away) has its start-up in the
run's second half: it is fitted over the later half of its own samples there, and only when they span
`MIN_FIT_SPAN_S`. A host that lived 30 s once gave 6 MB/min from three samples of its start-up, which says
nothing about a leak."""

from __future__ import annotations

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from rebalance import events as ev

MIN_FIT_SPAN_S = 300.0    # the shortest window a slope is fitted over
MEMORY_COLUMNS = ["process", "samples", "first_mb", "last_mb", "peak_mb", "second_half_slope_mb_per_min"]


def memory_samples(control: DataFrame) -> DataFrame:
    """(run, process, t, rss_bytes), one row per sample; a broker named by its node (`broker-1`), a member
    host by its process (`member host NODE:PID`: a restarted host is another process)."""
    sampled = control.filter(F.col("type").isin(ev.PROCESS_MEMORY, ev.BROKER_LIVENESS) & F.col("rss_bytes").isNotNull())
    label = F.when(F.col("type") == ev.BROKER_LIVENESS, F.concat(F.lit("broker-"), F.col("node").cast("string"))) \
        .otherwise(F.concat(F.lit("member host "), F.col("process")))
    return sampled.select("run", label.alias("process"), "t", "rss_bytes")


def memory_table(samples: pd.DataFrame, run_end: float) -> pd.DataFrame:
    """One row per process: its samples, first, last and peak RSS (MB) and the slope over the second half
    of the run, or of the process's own life when it began after the run's first half (MB/min; empty with
    fewer than three samples there, or when they span less than `MIN_FIT_SPAN_S`)."""
    rows = []
    for process, rows_of in samples.groupby("process", sort=True):
        rows_of = rows_of.sort_values("t")
        mb = rows_of["rss_bytes"].astype(float) / 2 ** 20
        first_t = float(rows_of["t"].iloc[0])
        late = rows_of[rows_of["t"] >= max(run_end / 2, (first_t + float(rows_of["t"].iloc[-1])) / 2)]
        slope = float("nan")
        if len(late) >= 3 and float(late["t"].iloc[-1] - late["t"].iloc[0]) >= MIN_FIT_SPAN_S:
            slope = float(np.polyfit(late["t"].astype(float) / 60, late["rss_bytes"].astype(float) / 2 ** 20, 1)[0])
        rows.append({"process": process, "samples": len(rows_of), "first_mb": float(mb.iloc[0]),
                     "last_mb": float(mb.iloc[-1]), "peak_mb": float(mb.max()),
                     "second_half_slope_mb_per_min": slope})
    return pd.DataFrame(rows, columns=MEMORY_COLUMNS)


def steepest(table: pd.DataFrame) -> tuple[str, float] | None:
    """The process whose memory grew fastest over the second half, and its slope (MB/min)."""
    judged = table.dropna(subset=["second_half_slope_mb_per_min"])
    if judged.empty:
        return None
    row = judged.loc[judged["second_half_slope_mb_per_min"].idxmax()]
    return str(row["process"]), float(row["second_half_slope_mb_per_min"])


def steepest_facts(table: pd.DataFrame) -> dict:
    """The run's facts about it: `memory_slope_mb_per_min` and `memory_steepest_process` (None when no process
    has samples enough in the second half)."""
    process, slope = steepest(table) or (None, None)
    return {"memory_slope_mb_per_min": slope, "memory_steepest_process": process}
