"""One Spark pass over every run: events in, verdicts and tables out, per run.

Every query is grouped by `run`, so the number of Spark jobs is fixed whatever the number of runs:
a few small per-run facts are collected first (first and last event, phase marks, partitions), sent
back as a broadcast table of per-run constants, and every check and aggregate is then computed for
all runs at once, collected once and split per run in pandas."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from experiments.by_run import split_by_run, values_by_run
from experiments.checker import CheckConfig, CheckInputs, run_checks
from experiments.summary import herd, phases, records
from experiments.summary.fault_rules import FAULT_EVENTS, convergence_awaited_from, fault_windows
from experiments.summary.frames import EventFrames, read_runs
from experiments.summary.output import write_summary
from experiments.summary.ownership import ownership, segments
from experiments.summary.runs import RunSummary, read_lock, run_columns, run_info
from experiments.summary.session import start_spark
from experiments.witness_counts import witness_windows
from rebalance import events as ev
from rebalance.member import DEFAULT_SESSION_TIMEOUT_MS  # when lock.json does not say (convergence bound)

DEFAULT_CHECKS = CheckConfig()
Step = Callable[[str], None]



def _ns() -> Column:
    """An event's time in ns: its monotonic stamp, else its wall clock."""
    return F.coalesce("ts_ns", F.col("ts_ms") * 1_000_000)


_RUN_CONSTANTS = ("run int, t0_ns long, t0_ms long, run_end double, tail_start double, phase_starts array<double>, "
                  "partitions long, since_t double, bound_s double, backend string, strategy string, n long, "
                  "campaign string, repetition long")


def summarize(run_dirs: list[Path], *, master: str = "local[*]", config: CheckConfig = DEFAULT_CHECKS,
              step: Step = lambda _: None) -> list[RunSummary]:
    """Summarise several runs with one Spark session, in one pass."""
    for run_dir in run_dirs:
        if not (run_dir / "events").is_dir():
            raise FileNotFoundError(f"{run_dir}: not a run directory (no events/)")
    step("starting Spark")
    spark = start_spark(master)
    return summarize_runs(spark, run_dirs, config, step=step)


def summarize_run(spark: SparkSession, run_dir: str | Path, config: CheckConfig = DEFAULT_CHECKS,
                  step: Step = lambda _: None, write: bool = True) -> RunSummary:
    (summary,) = summarize_runs(spark, [Path(run_dir)], config, step=step, write=write)
    return summary


def _bounds(frames: EventFrames) -> dict[int, dict]:
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
    return values_by_run(union.groupBy("run").agg(
        F.min("ns").alias("first_ns"), F.max("ns").alias("last_ns"), F.min("ms").alias("first_ms"),
        F.sum("records").alias("produced_records"), F.max("fault_ns").alias("fault_ns"),
        F.max("joined_ns").alias("joined_ns"), F.max("consumed_ns").alias("consumed_ns")))


def _usual_values(control: DataFrame, runs: list[int]) -> dict[int, dict[str, str]]:
    """Per run, the backend and the strategy most events name (for runs whose lock.json does not)."""
    if not runs:
        return {}
    named = control.filter(F.col("type").isNotNull() & F.col("run").isin(runs))
    pairs = named.select("run", F.lit("backend").alias("field"), F.col("backend").alias("value")).unionByName(
        named.select("run", F.lit("strategy").alias("field"), F.col("strategy").alias("value")))
    usual: dict[int, dict[str, tuple[int, str]]] = {run: {} for run in runs}
    for row in pairs.filter(F.col("value").isNotNull() & (F.col("value") != "")).groupBy(
            "run", "field", "value").count().collect():
        best = usual[row["run"]].get(row["field"])
        if best is None or row["count"] > best[0]:
            usual[row["run"]][row["field"]] = (row["count"], row["value"])
    return {run: {name: value for name, (_, value) in fields.items()} for run, fields in usual.items()}


def _mentioned_partitions(frames: EventFrames, runs: list[int]) -> dict[int, list[str]]:
    """Every partition the events of these runs mention (for runs whose lock.json names no topics)."""
    if not runs:
        return {}
    named = frames.control.filter(F.col("type").isNotNull()).select(
        "run", F.explode(F.coalesce("partitions", "assigned")).alias("tp"))
    mentioned = named.union(frames.produced.select("run", "tp")).union(frames.consumed.select("run", "tp"))
    found: dict[int, list[str]] = {run: [] for run in runs}
    for row in mentioned.filter(F.col("run").isin(runs)).distinct().collect():
        found[row["run"]].append(row["tp"])
    return {run: sorted(tps) for run, tps in found.items()}


def _phase_marks(control: DataFrame) -> dict[int, list[tuple[str, int, int]]]:
    marks: dict[int, list[tuple[str, int, int]]] = {}
    for row in control.filter(F.col("type") == ev.PHASE).select("run", "name", _ns().alias("ns"), "seq").collect():
        marks.setdefault(row["run"], []).append((row["name"] or "?", row["ns"], row["seq"]))
    return marks


def summarize_runs(spark: SparkSession, run_dirs: list[Path], config: CheckConfig = DEFAULT_CHECKS,
                   step: Step = lambda _: None, write: bool = True) -> list[RunSummary]:
    run_dirs = [Path(run_dir) for run_dir in run_dirs]
    ids = list(range(len(run_dirs)))
    locks = [read_lock(run_dir) for run_dir in run_dirs]
    step("reading events")
    frames = read_runs(spark, run_dirs)
    bounds = _bounds(frames)
    counts = {run: {kind: n for kind, n in frames.types_by_run[run].items() if kind is not None and n} for run in ids}
    for run in ids:
        if not counts[run]:
            raise ValueError(f"{run_dirs[run]}: the event files hold no readable events")
    usual = _usual_values(frames.control, [r for r in ids if not (locks[r].get("backend") and locks[r].get("strategy"))])
    infos = [run_info(run_dirs[r], locks[r], usual_backend=usual.get(r, {}).get("backend"),
                      usual_strategy=usual.get(r, {}).get("strategy")) for r in ids]
    mentioned = _mentioned_partitions(frames, [r for r in ids if not infos[r].topics])
    universe = {r: [f"{topic}-{p}" for topic, n in sorted(infos[r].topics.items()) for p in range(n)]
                if infos[r].topics else mentioned[r] for r in ids}
    marks = _phase_marks(frames.control)

    constants, phase_lists = [], {}
    for r in ids:
        b = bounds[r]
        t0_ns, t0_ms = b["first_ns"], b["first_ms"]
        seconds = lambda ns, t0=t0_ns: None if ns is None else (ns - t0) / 1e9  # noqa: E731
        run_end = seconds(b["last_ns"])
        last_consume = seconds(b["consumed_ns"]) if counts[r].get(ev.RECORDS_CONSUMED) else None
        tail_start = None if last_consume is None else last_consume - config.latency_limit_ms / 1000
        ordered = sorted(((name, seconds(ns), seq) for name, ns, seq in marks.get(r, [])), key=lambda m: (m[1], m[2]))
        phase_lists[r] = phases.phases_of([(name, t) for name, t, _ in ordered], run_end)
        since_t = convergence_awaited_from(seconds(b["fault_ns"]), seconds(b["joined_ns"]))
        session_s = (infos[r].session_timeout_ms or DEFAULT_SESSION_TIMEOUT_MS) / 1000
        bound_s = float(config.convergence_bound_s if config.convergence_bound_s is not None else 2 * session_s + 5)
        meta = run_columns(r, locks[r])
        constants.append((r, t0_ns, t0_ms, run_end, tail_start, [start for _, start, _ in phase_lists[r][1:]],
                          len(universe[r]), since_t, bound_s, meta["backend"], meta["strategy"], meta["n"],
                          meta["campaign"], meta["repetition"]))
    runs = spark.createDataFrame(constants, _RUN_CONSTANTS)
    partitions = spark.createDataFrame([(r, tp) for r in ids for tp in universe[r]], "run int, tp string")

    def timed(frame: DataFrame, ns) -> DataFrame:
        return frame.join(F.broadcast(runs.select("run", "t0_ns")), "run").withColumn(
            "t", (ns - F.col("t0_ns")) / 1e9).drop("t0_ns")

    control = timed(frames.control.filter(F.col("type").isNotNull()), _ns()).persist()
    commits = timed(frames.commits, _ns()).persist()
    consumed = timed(frames.consumed, F.col("ts_ns")).persist()   # batches: read by five queries

    step("records")
    covered = records.coverage(consumed).persist()   # gaps (lost) and overlaps (duplicates) both come from it
    never = records.never_processed(frames.produced, covered, runs).persist()
    repeats = records.duplicate_ranges(covered)
    deliveries = records.deliveries(consumed)

    step("ownership")
    owned = ownership(control, partitions, runs).persist()
    spans = segments(owned, partitions, runs).persist()

    step("checks")
    checks = run_checks(CheckInputs(
        runs=ids, counts=counts, control=control, commits=commits, consumed=consumed, segments=spans, never=never,
        repeats=repeats, deliveries=deliveries,
        context=runs.select("run", "partitions", "since_t", "bound_s", "run_end")), config)

    step("aggregates")
    produce_times = records.produce_times(frames.produced, runs)
    episodes = split_by_run(phases.rebalance_episodes(control), ids)
    measures = phases.phase_measures(produce_times, never, repeats, deliveries, runs, ids, config)
    metrics = split_by_run(herd.rebalance_metrics(control), ids)
    changes = split_by_run(herd.herd_changes(control), ids)
    witness = split_by_run(witness_windows(control).orderBy("run", "start"), ids)
    per_second = split_by_run(phases.throughput(produce_times, consumed, never, deliveries, config), ids)
    intervals = split_by_run(owned.orderBy("run", "tp", "start"), ids)
    faults = split_by_run(control.filter(F.col("type").isin(*FAULT_EVENTS)).select(
        "run", "type", "t", "fault_id", "kind", "target", "link").orderBy("run", "t"), ids)

    summaries = []
    for r in ids:
        run_end, n_partitions = constants[r][3], constants[r][6]
        tables = {
            "phases": phases.phase_table(measures[r], episodes[r], checks[r], phase_lists[r]),
            "rebalance_metrics": herd.group_metrics(metrics[r], run_end),
            "herd": herd.herd_table(changes[r], intervals[r], n_partitions, witness[r]),
            "throughput": per_second[r].fillna(0).astype(int),
            "ownership": intervals[r],
            "faults": fault_windows(faults[r], run_end),
            "episodes": episodes[r],
        }
        facts = {
            "events": sum(counts[r].values()),
            "events_by_type": counts[r],
            "produced_records": bounds[r]["produced_records"] or 0,
            "unreadable_lines": frames.types_by_run[r].get(None, 0),
            "duration_s": run_end,
            "t0_ns": constants[r][1],
            "t0_ms": constants[r][2],
            "partitions": n_partitions,
            "convergence_since_t": constants[r][7],
            "convergence_bound_s": constants[r][8],
            "latency_limit_ms": config.latency_limit_ms,
        }
        info = infos[r]
        if info.members is None:
            info = replace(info, members=herd.usual_group_size(tables["herd"], run_end) or info.members)
        summaries.append(RunSummary(info, checks[r], tables, facts))
    frames.unpersist()
    for frame in (control, commits, consumed, covered, never, owned, spans):
        frame.unpersist()
    if write:
        step("writing")
        for summary in summaries:
            write_summary(summary)
    return summaries



