"""One Spark pass over every run: events in, verdicts and tables out, per run.

Every query is grouped by `run`, so the number of Spark jobs is the same whatever the number of
runs. Three steps: the read (event counts per run and type); the per-run facts (first and last
event, phase marks, partitions), which go back to Spark as a broadcast table of per-run constants;
then every check and aggregate for all runs, as one batch of queries (experiments.summary.spark_batch) whose
results are split per run in pandas."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path

import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from experiments.folders.run_folder import RunFolder, record_to_summarise
from experiments.summary import coordinator_gaps, herd, lag, memory, offset_ranges, phases
from experiments.summary.check_queries import CheckConfig, CheckInputs, plan_checks
from experiments.summary.conditions_check import conditions_check, run_conditions
from experiments.summary.event_tables import EventTables, read_runs
from experiments.summary.fault_rules import FAULT_EVENTS, convergence_awaited_from, fault_windows
from experiments.summary.output import write_summary
from experiments.summary.ownership import ownership, segments
from experiments.summary.run_summary import RunSummary, SummaryFacts
from experiments.summary.session import SMALL_INPUT_BYTES, input_bytes, start_spark, tuned_for
from experiments.summary.spark_batch import Batch, Pending
from experiments.summary.witness_counts import witness_windows
from rebalance import events as ev
from rebalance.member import DEFAULT_SESSION_TIMEOUT_MS  # when lock.json does not say (convergence bound)

DEFAULT_CHECKS = CheckConfig()
Step = Callable[[str], None]               # called with each step's name as it starts
Progress = Callable[[int, int], None]      # (done, added): the checks' and aggregates' queries, as each finishes



def _ns() -> Column:
    """An event's time in ns: its monotonic stamp, else its wall clock."""
    return F.coalesce("ts_ns", F.col("ts_ms") * 1_000_000)


@dataclass(frozen=True)
class RunConstants:
    """One run's facts every later query needs, sent to Spark as one row of a broadcast table."""

    run: int                        # the run's position in this pass
    t0_ns: int                      # its first event: every `t` is seconds since
    t0_ms: int
    run_end: float
    tail_start: float | None        # the last consumption minus the latency limit
    phase_starts: list[float]
    partitions: int
    since_t: float | None           # convergence is awaited from here (the last fault or join)
    bound_s: float                  # ... for at most this long
    backend: str
    strategy: str
    n: int | None                   # the group's size

    SCHEMA = ("run int, t0_ns long, t0_ms long, run_end double, tail_start double, phase_starts array<double>, "
              "partitions long, since_t double, bound_s double, backend string, strategy string, n long")

    def row(self) -> tuple:
        return tuple(getattr(self, f.name) for f in fields(self))


def summarize(run_dirs: list[Path], *, master: str = "local[*]", config: CheckConfig = DEFAULT_CHECKS,
              step: Step = lambda _: None, tuned: bool = True, write: bool = True,
              progress: Progress | None = None) -> list[RunSummary]:
    """Summarise several runs with one Spark session, in one pass. `tuned=False`: Spark's own settings
    whatever the input's size, and no class archive (for comparisons; experiments.summary.session). `write=False`:
    the summaries are returned only (`output.write_summary` writes one later)."""
    for run_dir in run_dirs:
        if not RunFolder(run_dir).is_run():
            raise FileNotFoundError(f"{run_dir}: not a run directory (no events/)")
    step("starting Spark")
    small = tuned and input_bytes(run_dirs) < SMALL_INPUT_BYTES
    spark = start_spark(master, small_input=small, java_options=None if tuned else "")
    return summarize_runs(spark, run_dirs, config, step=step, tuned=tuned, write=write, progress=progress)


def summarize_run(spark: SparkSession, run_dir: str | Path, config: CheckConfig = DEFAULT_CHECKS,
                  step: Step = lambda _: None, write: bool = True) -> RunSummary:
    (summary,) = summarize_runs(spark, [Path(run_dir)], config, step=step, write=write)
    return summary


def _bounds(frames: EventTables, batch: Batch) -> Pending[dict[int, dict]]:
    """Per run: first and last event (ns), first wall time (ms), produced records, the last fault event,
    the last member start and the last consumption (ns)."""
    none = F.lit(None).cast("long")
    control = frames.control.filter(F.col("type").isNotNull())
    parts = [
        control.select("run", _ns().alias("ns"), F.col("ts_ms").alias("ms"), none.alias("records"),
                       F.when(F.col("type").isin(*FAULT_EVENTS), _ns()).alias("fault_ns"),
                       F.when(F.col("type") == ev.MEMBER_STARTED, _ns()).alias("joined_ns"), none.alias("consumed_ns")),
        frames.commits.select("run", _ns().alias("ns"), F.col("ts_ms").alias("ms"), *(none.alias(c) for c in (
            "records", "fault_ns", "joined_ns", "consumed_ns"))),
        frames.produced.select("run", _ns().alias("ns"), F.array_min("stamps").alias("ms"), "records",
                               *(none.alias(c) for c in ("fault_ns", "joined_ns", "consumed_ns"))),
        frames.consumed.select("run", _ns().alias("ns"), F.col("ts_ms").alias("ms"), none.alias("records"),
                               none.alias("fault_ns"), none.alias("joined_ns"), F.col("ts_ns").alias("consumed_ns")),
    ]
    union = parts[0].unionByName(parts[1]).unionByName(parts[2]).unionByName(parts[3])
    return batch.values(union.groupBy("run").agg(
        F.min("ns").alias("first_ns"), F.max("ns").alias("last_ns"), F.min("ms").alias("first_ms"),
        F.sum("records").alias("produced_records"), F.max("fault_ns").alias("fault_ns"),
        F.max("joined_ns").alias("joined_ns"), F.max("consumed_ns").alias("consumed_ns")))


def _phase_marks(control: DataFrame, batch: Batch) -> Pending[dict[int, pd.DataFrame]]:
    return batch.tables(control.filter(F.col("type") == ev.PHASE).select("run", "name", _ns().alias("ns"), "seq"),
                        ["ns", "seq"])


def summarize_runs(spark: SparkSession, run_dirs: list[Path], config: CheckConfig = DEFAULT_CHECKS,
                   step: Step = lambda _: None, write: bool = True, tuned: bool = True,
                   progress: Progress | None = None) -> list[RunSummary]:
    run_dirs = [Path(run_dir) for run_dir in run_dirs]
    size = input_bytes(run_dirs)
    with tuned_for(spark, size, enabled=tuned):
        summaries = _summaries(spark, run_dirs, config, step, progress, by_run=tuned and size < SMALL_INPUT_BYTES)
    if write:
        step("writing")
        for summary in summaries:
            write_summary(summary)
    return summaries


def _summaries(spark: SparkSession, run_dirs: list[Path], config: CheckConfig, step: Step,
               progress: Progress | None, by_run: bool) -> list[RunSummary]:
    ids = list(range(len(run_dirs)))
    infos = [record_to_summarise(RunFolder(run_dir)) for run_dir in run_dirs]
    step("reading events")
    frames = read_runs(spark, run_dirs, by_run=by_run)
    counts = {run: {kind: n for kind, n in frames.types_by_run[run].items() if kind is not None and n} for run in ids}
    for run in ids:
        if not counts[run]:
            raise ValueError(f"{run_dirs[run]}: the event files hold no readable events")
    with Batch(ids) as per_run:   # read first: the per-run constants every later query needs
        bounds, marks = _bounds(frames, per_run), _phase_marks(frames.control, per_run)
        per_run.collect()
    universe = {r: infos[r].partitions() for r in ids}

    constants, phase_lists = [], {}
    for r in ids:
        b = bounds.value[r]
        t0_ns, t0_ms = b["first_ns"], b["first_ms"]
        seconds = lambda ns, t0=t0_ns: None if ns is None else (ns - t0) / 1e9  # noqa: E731
        run_end = seconds(b["last_ns"])
        last_consume = seconds(b["consumed_ns"]) if counts[r].get(ev.RECORDS_CONSUMED) else None
        tail_start = None if last_consume is None else last_consume - config.latency_limit_ms / 1000
        starts = marks.value[r]
        phase_lists[r] = phases.phases_of(
            [(name or "?", seconds(ns)) for name, ns in zip(starts["name"], starts["ns"], strict=True)], run_end)
        since_t = convergence_awaited_from(seconds(b["fault_ns"]), seconds(b["joined_ns"]))
        bound_s = config.convergence_bound_for(infos[r].session_timeout_ms or DEFAULT_SESSION_TIMEOUT_MS)
        constants.append(RunConstants(
            run=r, t0_ns=t0_ns, t0_ms=t0_ms, run_end=run_end, tail_start=tail_start,
            phase_starts=[start for _, start, _ in phase_lists[r][1:]], partitions=len(universe[r]),
            since_t=since_t, bound_s=bound_s, backend=infos[r].backend, strategy=infos[r].strategy,
            n=infos[r].members))
    runs = spark.createDataFrame([constant.row() for constant in constants], RunConstants.SCHEMA)
    partitions = spark.createDataFrame([(r, tp) for r in ids for tp in universe[r]], "run int, tp string")

    def timed(frame: DataFrame, ns) -> DataFrame:
        return frame.join(F.broadcast(runs.select("run", "t0_ns")), "run").withColumn(
            "t", (ns - F.col("t0_ns")) / 1e9).drop("t0_ns")

    control = timed(frames.control.filter(F.col("type").isNotNull()), _ns()).persist()
    commits = timed(frames.commits, _ns()).persist()
    consumed = timed(frames.consumed, F.col("ts_ns")).persist()   # batches: read by five queries

    step("records")
    covered = offset_ranges.coverage(consumed).persist()   # gaps (lost) and overlaps (duplicates) both come from it
    never = offset_ranges.never_processed(frames.produced, covered, runs).persist()
    repeats = offset_ranges.duplicate_ranges(covered)
    processed = timed(frames.processed, F.col("ts_ns"))
    deliveries = offset_ranges.deliveries(consumed, processed)   # handled, else delivered
    handled = offset_ranges.handled_batches(consumed, processed)

    step("ownership")
    owned = ownership(control, partitions, runs).persist()
    spans = segments(owned, partitions, runs).persist()

    step("checks and aggregates")
    with Batch(ids, progress) as batch:
        read_checks = plan_checks(CheckInputs(
            runs=ids, counts=counts, control=control, commits=commits, consumed=consumed, handled=handled,
            segments=spans, never=never,
            repeats=repeats, deliveries=deliveries,
            context=runs.select("run", "partitions", "since_t", "bound_s", "run_end")), config, batch)
        produce_times = offset_ranges.produce_times(frames.produced, runs)
        episodes = batch.tables(phases.rebalance_episodes(control), ["start"])
        measures = phases.phase_measures(produce_times, never, repeats, deliveries, runs, config, batch)
        metrics = batch.tables(herd.rebalance_metrics(control), ["member"])
        changes = batch.tables(herd.herd_changes(control), ["t"])
        witness = batch.tables(witness_windows(control), ["start"])
        per_second = batch.tables(phases.throughput(produce_times, consumed, never, deliveries, config,
                                                    processed), ["second"])
        lags = batch.tables(lag.lag_per_second(frames.produced, consumed, partitions, runs), ["second"])
        intervals = batch.tables(owned, ["tp", "start"])
        faults = batch.tables(control.filter(F.col("type").isin(*FAULT_EVENTS)).select(
            "run", "type", "t", "fault_id", "kind", "target", "link"), ["t"])
        gaps = batch.tables(coordinator_gaps.gap_rows(control), ["fault_t", "member"])
        rss = batch.tables(memory.memory_samples(control), ["t"])
        batch.collect()
    checks = read_checks()
    for r in ids:   # the run's conditions first: they say how far every other number can be trusted
        checks[r].insert(0, conditions_check(run_conditions(run_dirs[r], latency_limit_ms=config.latency_limit_ms)))

    summaries = []
    for r in ids:
        run_end, n_partitions = constants[r].run_end, constants[r].partitions
        tables = {
            "phases": phases.phase_table(measures.value[r], episodes.value[r], checks[r], phase_lists[r],
                                         lags.value[r]),
            "rebalance_metrics": herd.group_metrics(metrics.value[r], run_end),
            "herd": herd.herd_table(changes.value[r], intervals.value[r], n_partitions, witness.value[r]),
            "throughput": per_second.value[r].fillna(0).astype(int),
            "lag": lags.value[r],
            "ownership": intervals.value[r],
            "faults": fault_windows(faults.value[r], run_end),
            "episodes": episodes.value[r],
            "coordinator_gaps": coordinator_gaps.gap_table(gaps.value[r]),
            "memory": memory.memory_table(rss.value[r], run_end),
        }
        facts = SummaryFacts(
            checks=config,
            events=sum(counts[r].values()),
            events_by_type=counts[r],
            produced_records=bounds.value[r]["produced_records"] or 0,
            unreadable_lines=frames.types_by_run[r].get(None, 0),
            duration_s=run_end,
            t0_ns=constants[r].t0_ns,
            t0_ms=constants[r].t0_ms,
            partitions=n_partitions,
            convergence_since_t=constants[r].since_t,
            convergence_bound_s=constants[r].bound_s,
            coordinator_gap_s=coordinator_gaps.group_gap_s(tables["coordinator_gaps"]),
            **memory.steepest_facts(tables["memory"]),
        )
        record = infos[r]
        if record.members is None and (usual := herd.usual_group_size(tables["herd"], run_end)):
            record = replace(record, members=int(usual))
        summaries.append(RunSummary(RunFolder(run_dirs[r]), record, checks[r], tables, facts))
    frames.unpersist()
    for frame in (control, commits, consumed, covered, never, owned, spans):
        frame.unpersist()
    return summaries
