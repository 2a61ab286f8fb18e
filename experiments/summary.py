"""The Spark summary of a run: events in, verdicts and tables out.

`summarize_run` reads RUN_DIR/events/*.jsonl with an explicit schema, derives the frames
the checks need (ownership intervals, per-partition owner spans, consumed and lost offset ranges),
runs every check of `experiments.checker`, computes per-phase aggregates, Kafka's
rebalance metrics and the herd cost of each membership change, and writes them to
RUN_DIR/summary/ as Parquet files plus summary.md. Small results travel as pandas frames;
the heavy lifting (records, joins, windows) stays in Spark, so `--master` can point at a
cluster for big logs.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from experiments import checker
from experiments.checker import CheckConfig, CheckResult, Verdict
from experiments.faults.actions import SILENCING_KINDS
from experiments.runmeta import read_run_meta

# One schema for every event type (docs/events.md); a type simply leaves the others null.
# `params` is any object, read as its JSON text. `produce_ts_ms` is a list (one produce time per
# record of a batch); older per-record producer lines carry a single number there, read apart.
EVENT_SCHEMA = T.StructType([
    T.StructField("run_id", T.StringType()),
    T.StructField("backend", T.StringType()),
    T.StructField("ts_ns", T.LongType()),
    T.StructField("ts_ms", T.LongType()),
    T.StructField("process", T.StringType()),
    T.StructField("member", T.StringType()),
    T.StructField("type", T.StringType()),
    T.StructField("strategy", T.StringType()),
    T.StructField("reason", T.StringType()),
    T.StructField("trigger", T.StringType()),
    T.StructField("generation", T.LongType()),
    T.StructField("assigned", T.ArrayType(T.StringType())),
    T.StructField("duration_ms", T.DoubleType()),
    T.StructField("attempts", T.LongType()),
    T.StructField("error", T.StringType()),
    T.StructField("outcome", T.StringType()),
    T.StructField("partitions", T.ArrayType(T.StringType())),
    T.StructField("topic", T.StringType()),
    T.StructField("partition", T.LongType()),
    T.StructField("first_offset", T.LongType()),
    T.StructField("last_offset", T.LongType()),
    T.StructField("count", T.LongType()),
    T.StructField("produce_ts_ms", T.ArrayType(T.LongType())),
    T.StructField("offsets", T.MapType(T.StringType(), T.LongType())),
    T.StructField("op", T.StringType()),
    T.StructField("path", T.StringType()),
    T.StructField("latency_ms", T.DoubleType()),
    T.StructField("fault_id", T.StringType()),
    T.StructField("kind", T.StringType()),
    T.StructField("target", T.StringType()),
    T.StructField("member_ids", T.ArrayType(T.StringType())),
    T.StructField("link", T.StringType()),
    T.StructField("params", T.StringType()),
    T.StructField("offset", T.LongType()),
    T.StructField("name", T.StringType()),
])

CRASH_KINDS = SILENCING_KINDS   # a restart stops the member cleanly: its own events end its ownership
# Requests every member makes all the time, whether or not the group changes: not herd cost.
BACKGROUND_OPS = ("Heartbeat", "OffsetCommit", "Fetch", "ListOffsets", "Metadata")
DEFAULT_CHECKS = CheckConfig()
CHANGE_GAP_S = 0.05          # membership changes closer than this count as one change


# Spark's own log configuration: warnings only, and none for what is expected here (no native
# Hadoop library; time-ordered windows over small frames that run in one partition on purpose).
_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = stderr
appender.console.type = Console
appender.console.name = stderr
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = spark %p %c{1}: %m%n
logger.hadoop.name = org.apache.hadoop.util.NativeCodeLoader
logger.hadoop.level = error
logger.window.name = org.apache.spark.sql.execution.window.WindowExec
logger.window.level = error
"""


def start_spark(master: str = "local[*]", *, driver_memory: str = "4g", shuffle_partitions: int = 8) -> SparkSession:
    """A quiet session: no UI, no console progress bars, warnings only."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    log_config = Path(tempfile.gettempdir()) / "rebalance-lab-log4j2.properties"
    log_config.write_text(_LOG4J2)
    builder = (
        SparkSession.builder.appName("rebalance-lab-summary").master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.debug.maxToStringFields", "200")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log_config}")
    )
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no "hostname resolves to loopback" warning
        builder = builder.config("spark.driver.memory", driver_memory)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


@dataclass(frozen=True, kw_only=True)
class RunInfo:
    """What a run was: from lock.json when the runner wrote one, else derived from its events."""

    run_dir: Path
    name: str
    backend: str
    strategy: str
    session_timeout_ms: int | None
    topics: dict[str, int]
    members: int | None


def read_lock(run_dir: Path) -> dict:
    meta = read_run_meta(run_dir)
    return {} if meta is None else meta.to_json()


def _topics(value: object) -> dict[str, int]:
    """lock.json topics as {name: partitions}, or a list of {name, partitions} tables."""
    if isinstance(value, dict):
        return {str(name): int(n if not isinstance(n, dict) else n.get("partitions", 0)) for name, n in value.items()}
    if isinstance(value, list):
        return {str(t["name"]): int(t["partitions"]) for t in value if isinstance(t, dict) and "name" in t}
    return {}


def _member_count(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, (list, dict)):
        return len(value)
    return None


@dataclass
class RunSummary:
    info: RunInfo
    checks: list[CheckResult]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    facts: dict = field(default_factory=dict)

    def verdicts(self) -> pd.DataFrame:
        return pd.DataFrame([
            {"run": self.info.name, "backend": self.info.backend, "check": c.check, "verdict": c.verdict.value,
             "count": c.count, "detail": c.detail} for c in self.checks
        ])


Step = Callable[[str], None]


# Record events and commits are most of a log. The log is parsed once with the explicit schema and
# cached; control events and commits get small flat caches of their own, record batches are read from
# the parsed log, and produced records stay in their batches (offset ranges), so no check expands
# every produced record to a row.
_PRODUCED_TYPES = ("record_produced", "records_produced")
_CONSUMED_TYPE = "records_consumed"
_COMMIT_TYPE = "offsets_committed"
_RECORD_FIELDS = ("first_offset", "last_offset", "count", "produce_ts_ms", "offset")


@dataclass
class EventFrames:
    """A run's events in four frames: `control` (every other event, full schema, plus `seq`),
    `commits` (one row per partition per offsets_committed: member, ts_ns, ts_ms, seq, generation,
    tp, offset), `produced` batches (tp, first_offset, last_offset, records, stamps: one produce time
    per record, ts_ns, ts_ms) and `consumed` batches; `types` counts the lines by event type (None:
    unreadable lines). `unpersist` drops every cache behind them (`cached`: the parsed log)."""

    control: DataFrame
    commits: DataFrame
    produced: DataFrame
    consumed: DataFrame
    types: dict[str | None, int]
    cached: tuple[DataFrame, ...] = ()

    def unpersist(self) -> None:
        for frame in (self.control, self.commits, *self.cached):
            frame.unpersist()


def read_events(spark: SparkSession, run_dir: Path) -> EventFrames:
    files = sorted(str(p) for p in (run_dir / "events").glob("*.jsonl"))
    if not files:
        raise FileNotFoundError(f"{run_dir}: no events/*.jsonl")
    reader = spark.read.option("mode", "PERMISSIVE")
    events = reader.schema(EVENT_SCHEMA).json(files).withColumn("seq", F.monotonically_increasing_id()).persist()
    types = {row["type"]: row["count"] for row in events.groupBy("type").count().collect()}
    kind = F.coalesce(F.col("type"), F.lit(""))
    # A torn last line (a crash mid-write) parses to nulls: kept in `control`, counted, then dropped.
    control = events.filter(~kind.isin(*_PRODUCED_TYPES, _CONSUMED_TYPE, _COMMIT_TYPE)).select(
        *(name for name in events.columns if name not in _RECORD_FIELDS))
    commits = events.filter(kind == _COMMIT_TYPE).select(
        "member", "ts_ns", "ts_ms", "seq", "generation", F.explode("offsets").alias("tp", "offset"))
    consumed = events.filter(kind == _CONSUMED_TYPE).select(
        "member", _tp().alias("tp"), "ts_ns", "ts_ms", "first_offset", "last_offset",
        F.coalesce("count", F.col("last_offset") - F.col("first_offset") + 1).alias("count"),
        F.col("produce_ts_ms").alias("produce_list"))
    produced = _batches(events.filter(kind == "records_produced"), F.col("produce_ts_ms"))
    if types.get("record_produced"):   # an older log: its single-record lines carry a number, read apart
        single = reader.schema("type string, topic string, partition long, ts_ns long, ts_ms long, offset long, "
                               "produce_ts_ms long").json(files).filter(F.col("type") == "record_produced")
        produced = produced.unionByName(_batches(single, F.array(F.coalesce("produce_ts_ms", "ts_ms"))))
    # Control events and commits are cached on their own (flat, and read by many windows); record
    # batches are read straight from the parsed log, which stays cached until `unpersist`.
    control, commits = control.persist(), commits.persist()
    return EventFrames(control, commits, produced, consumed, types, (events,))


def _batches(frame: DataFrame, stamps) -> DataFrame:
    """Produced records as batches (a single-record line is a batch of one)."""
    names = set(frame.columns)
    offset = F.col("offset") if "offset" in names else F.lit(None).cast("long")
    first, last = (F.coalesce(F.col(name), offset) if name in names else offset for name in ("first_offset", "last_offset"))
    records = last - first + 1
    return frame.filter(first.isNotNull()).select(
        _tp().alias("tp"), first.alias("first_offset"), last.alias("last_offset"), records.alias("records"),
        # Without one stamp per record, the batch's own time stands in for each record's.
        F.when(F.size(stamps) == records, stamps).otherwise(F.array_repeat("ts_ms", records.cast("int")))
        .alias("stamps"), "ts_ns", "ts_ms")


def summarize_run(spark: SparkSession, run_dir: str | Path, config: CheckConfig = DEFAULT_CHECKS,
                  step: Step = lambda _: None, write: bool = True) -> RunSummary:
    run_dir = Path(run_dir)
    lock = read_lock(run_dir)
    step("reading events")
    frames = read_events(spark, run_dir)
    ns = F.coalesce("ts_ns", F.col("ts_ms") * 1_000_000)
    spans = [frame.agg(F.min(ns), F.max(ns), F.min(ts_ms)).first() for frame, ts_ms in (
        (frames.control.filter(F.col("type").isNotNull()), F.col("ts_ms")), (frames.commits, F.col("ts_ms")),
        (frames.produced, F.array_min("stamps")), (frames.consumed, F.col("ts_ms")))]
    counts = dict(frames.types)
    unreadable = counts.pop(None, 0)
    produced_records = frames.produced.agg(F.sum("records")).first()[0] or 0
    counts = {kind: n for kind, n in counts.items() if n}
    if not counts:
        raise ValueError(f"{run_dir}: the event files hold no readable events")
    t0_ns = min(row[0] for row in spans if row[0] is not None)
    t0_ms = min(row[2] for row in spans if row[2] is not None)
    run_end = (max(row[1] for row in spans if row[1] is not None) - t0_ns) / 1e9
    seconds = lambda column: (F.col(column) - F.lit(t0_ns)) / 1e9  # noqa: E731
    control = frames.control.filter(F.col("type").isNotNull()).withColumn("t", (ns - F.lit(t0_ns)) / 1e9)
    commits = frames.commits.withColumn("t", (ns - F.lit(t0_ns)) / 1e9)
    produced = frames.produced
    consumed = frames.consumed.withColumn("t", seconds("ts_ns"))
    info = _run_info(run_dir, lock, control)

    step("records")
    universe = _universe(info, control, produced, consumed)
    last_consume = consumed.agg(F.max("t")).first()[0] if counts.get("records_consumed") else None
    tail_start = None if last_consume is None else last_consume - config.latency_limit_ms / 1000
    covered = _coverage(consumed).persist()   # gaps (lost) and overlaps (duplicates) both come from it
    missing, unseen = _lost(produced, covered, t0_ms, tail_start)
    missing = missing.persist()
    repeats = _duplicate_ranges(covered)
    deliveries = _deliveries(consumed)

    step("ownership")
    ownership = _ownership(control, universe, run_end).persist()
    segments = _segments(ownership, universe, run_end).persist()

    step("checks")
    since_t, bound_s = _convergence_window(control, info, config)
    checks = [
        checker.double_ownership(segments, counts, config),
        checker.consumption_outside_ownership(consumed, segments, counts, config),
        checker.lost_records(missing, unseen, counts, config),
        checker.duplicates(repeats, counts, config),
        checker.offset_regressions(commits, counts, config),
        checker.slow_records(deliveries, config),
        checker.convergence(segments, len(universe), since_t, bound_s, run_end, counts, config),
        checker.fenced_commits(control, config),
    ]

    step("aggregates")
    phases = _phases(control, run_end)
    episodes = _rebalance_episodes(control).toPandas()
    tables = {
        "phases": _phase_table(_produce_times(produced, t0_ms), missing, repeats, deliveries, episodes, checks, phases, config),
        "rebalance_metrics": _rebalance_metrics(control, run_end),
        "herd": _herd(control, ownership, len(universe)),
        "throughput": _throughput(_produce_times(produced, t0_ms), consumed, missing, deliveries, config),
        "ownership": ownership.orderBy("tp", "start").toPandas(),
        "faults": _faults(control, run_end),
        "episodes": episodes,
    }
    facts = {
        "events": sum(counts.values()),
        "events_by_type": counts,
        "produced_records": produced_records,
        "unreadable_lines": unreadable,
        "duration_s": run_end,
        "t0_ns": t0_ns,
        "t0_ms": t0_ms,
        "partitions": len(universe),
        "convergence_since_t": since_t,
        "convergence_bound_s": bound_s,
        "latency_limit_ms": config.latency_limit_ms,
    }
    if info.members is None:
        info = replace(info, members=_usual_group_size(tables["herd"], run_end) or info.members)
    summary = RunSummary(info, checks, tables, facts)
    frames.unpersist()
    for frame in (covered, missing, ownership, segments):
        frame.unpersist()
    if write:
        step("writing")
        write_summary(summary)
    return summary


# -- run identity --------------------------------------------------------------------------

def _run_info(run_dir: Path, lock: dict, control: DataFrame) -> RunInfo:
    first = lambda column: (control.filter(F.col(column).isNotNull() & (F.col(column) != ""))  # noqa: E731
                            .groupBy(column).count().orderBy(F.desc("count")).first())
    backend_row, strategy_row = first("backend"), first("strategy")
    members = _member_count(lock.get("members"))  # without it: the usual group size, found later
    session = lock.get("session_timeout_ms") or lock.get("session_timeout")
    return RunInfo(
        run_dir=run_dir,
        name=str(lock.get("name") or run_dir.name),
        backend=str(lock.get("backend") or (backend_row[0] if backend_row else "unknown")),
        strategy=str(lock.get("strategy") or (strategy_row[0] if strategy_row else "unknown")),
        session_timeout_ms=int(session) if session else None,
        topics=_topics(lock.get("topics")),
        members=members,
    )


def _universe(info: RunInfo, control: DataFrame, produced: DataFrame, consumed: DataFrame) -> list[str]:
    """Every partition of the run: lock.json's topics, else every partition the events mention."""
    if info.topics:
        return [f"{topic}-{p}" for topic, n in sorted(info.topics.items()) for p in range(n)]
    named = control.select(F.explode(F.coalesce("partitions", "assigned")).alias("tp"))
    mentioned = named.union(produced.select("tp")).union(consumed.select("tp")).distinct()
    return sorted(row.tp for row in mentioned.collect())


# -- records ---------------------------------------------------------------------------------

def _tp(topic: str = "topic", partition: str = "partition"):
    return F.concat_ws("-", F.col(topic), F.col(partition).cast("string"))


def _coverage(consumed: DataFrame) -> DataFrame:
    """Consumed batches in offset order per partition (tp, first_offset, last_offset, member, t), each
    with the highest offset consumed by the batches before it (`reach`) and the member of the batch
    just before it."""
    in_offsets = Window.partitionBy("tp").orderBy("first_offset", "last_offset", "t")
    return consumed.select("tp", "first_offset", "last_offset", "member", "t").withColumn(
        "reach", F.max("last_offset").over(in_offsets.rowsBetween(Window.unboundedPreceding, -1))
    ).withColumn("earlier_member", F.lag("member").over(in_offsets))


def _lost(produced: DataFrame, covered: DataFrame, t0_ms: int, tail_start: float | None) -> tuple[DataFrame, int]:
    """Produced records no batch covers, computed on offset ranges rather than record by record: the
    gaps between consumed ranges (`covered`, from `_coverage`; and after the last one) are intersected
    with the produced batches, and only the intersections are expanded to records (tp, offset,
    produce_ms, t_produce). Returns the lost records and how many more were only 'unseen' (produced
    at the very end)."""
    gaps = covered.filter(F.col("first_offset") > F.coalesce("reach", F.lit(-1)) + 1).select(
        "tp", (F.coalesce("reach", F.lit(-1)) + 1).alias("low"), (F.col("first_offset") - 1).alias("high"))
    reach = covered.groupBy("tp").agg(F.max("last_offset").alias("reach"))
    tails = produced.groupBy("tp").agg(F.max("last_offset").alias("high")).join(reach, "tp", "left").select(
        "tp", (F.coalesce("reach", F.lit(-1)) + 1).alias("low"), "high").filter(F.col("high") >= F.col("low"))
    ranges = gaps.unionByName(tails).withColumnRenamed("tp", "gap_tp")
    if ranges.count() < 100_000:
        ranges = F.broadcast(ranges)
    overlap = produced.join(ranges, (F.col("tp") == F.col("gap_tp")) & (F.col("first_offset") <= F.col("high"))
                            & (F.col("last_offset") >= F.col("low")))
    never = overlap.select(
        "tp", "first_offset", "stamps",
        F.explode(F.sequence(F.greatest("first_offset", "low"), F.least("last_offset", "high"))).alias("offset"),
    ).select("tp", "offset", F.element_at("stamps", (F.col("offset") - F.col("first_offset") + 1).cast("int"))
             .alias("produce_ms")).withColumn("t_produce", (F.col("produce_ms") - F.lit(t0_ms)) / 1e3)
    if tail_start is None:
        return never, 0
    unseen = never.filter(F.col("t_produce") >= tail_start).count()
    return never.filter(F.col("t_produce") < tail_start), unseen


def _produce_times(produced: DataFrame, t0_ms: int) -> DataFrame:
    """When each produced record was produced (`t_produce`, run seconds), and nothing else per record."""
    return produced.select(F.explode("stamps").alias("produce_ms")).select(
        ((F.col("produce_ms") - F.lit(t0_ms)) / 1e3).alias("t_produce"))


def _duplicate_ranges(covered: DataFrame) -> DataFrame:
    """Offsets a batch consumed that earlier batches (in offset order) had consumed already."""
    return covered.filter(F.col("reach") >= F.col("first_offset")).select(
        "tp", F.col("first_offset").alias("from_offset"), F.least("last_offset", "reach").alias("to_offset"),
        (F.least("last_offset", "reach") - F.col("first_offset") + 1).alias("records"),
        F.when(F.col("member") == F.col("earlier_member"), "one member").otherwise("different members").alias("by"),
        "member", "earlier_member", "t",
    )


def _deliveries(consumed: DataFrame) -> DataFrame:
    """Every processed record with its produce-to-process latency (from the batch's produce timestamps)."""
    return consumed.select("*", F.posexplode("produce_list").alias("i", "produce_ms")).select(
        "tp", (F.col("first_offset") + F.col("i")).alias("offset"), "member", "t", "produce_ms",
        (F.col("ts_ms") - F.col("produce_ms")).cast("double").alias("latency_ms"),
    )


# -- ownership -------------------------------------------------------------------------------

def _ownership(control: DataFrame, universe: list[str], run_end: float) -> DataFrame:
    """Intervals (member, tp, start, end) during which a member believed it owned a partition.

    A member starts owning on partitions_assigned and on rebalance_completed's `assigned`
    (its whole assignment); it stops on partitions_revoked/lost, on a rebalance_completed
    that no longer lists the partition, on member_stopped, and when a crash fault hits it."""
    spark = control.sparkSession
    all_tps = spark.createDataFrame([(tp,) for tp in universe], "tp string")
    listed = control.filter(F.col("type").isin("partitions_assigned", "partitions_revoked", "partitions_lost")).select(
        "member", "t", "seq", F.explode("partitions").alias("tp"),
        (F.col("type") == "partitions_assigned").cast("int").alias("owned"))
    completed = control.filter((F.col("type") == "rebalance_completed") & F.col("assigned").isNotNull()).crossJoin(
        all_tps).select("member", "t", "seq", "tp", F.array_contains("assigned", F.col("tp")).cast("int").alias("owned"))
    stopped = control.filter(F.col("type") == "member_stopped").select("member", "t", "seq")
    names = control.filter(F.col("member") != "").select("member", "process").distinct()
    crashes = _crash_targets(control)
    crashed = crashes.join(
        names, (crashes.target == names.member) | (crashes.target == names.process)
        | (crashes.target == F.concat(F.lit("member:"), names.member)),
    ).select("member", "t", "seq").distinct()
    ended = stopped.unionByName(crashed).crossJoin(all_tps).select("member", "t", "seq", "tp", F.lit(0).alias("owned"))
    actions = listed.unionByName(completed).unionByName(ended).filter(F.col("member") != "")

    per_pair = Window.partitionBy("member", "tp").orderBy("t", "seq")
    flips = actions.withColumn("before", F.lag("owned", 1, 0).over(per_pair)).filter(F.col("owned") != F.col("before"))
    return flips.withColumn("end", F.lead("t").over(per_pair)).filter(F.col("owned") == 1).select(
        "member", "tp", F.col("t").alias("start"), F.coalesce("end", F.lit(run_end)).alias("end"),
        F.col("end").isNull().alias("open"),
    )


def _crash_targets(control: DataFrame) -> DataFrame:
    """(target, t, seq) per member hit by a crash-like fault: the runner lists the hit members' ids in
    `member_ids`; `target` (comma-separated names) is the fallback."""
    faults = control.filter((F.col("type") == "fault_started") & F.col("kind").isin(*CRASH_KINDS))
    hit = F.coalesce("member_ids", F.split(F.coalesce("target", F.lit("")), ","))
    return faults.select(F.explode(hit).alias("target"), "t", "seq").filter(F.col("target") != "")


def _segments(ownership: DataFrame, universe: list[str], run_end: float) -> DataFrame:
    """Per partition, the spans between ownership changes and who owned it in each."""
    spark = ownership.sparkSession
    origin = spark.createDataFrame([(tp, 0.0) for tp in universe], "tp string, t double")
    bounds = (origin.unionByName(ownership.select("tp", F.col("start").alias("t")))
              .unionByName(ownership.select("tp", F.col("end").alias("t"))).distinct())
    spans = bounds.withColumn("end", F.lead("t").over(Window.partitionBy("tp").orderBy("t"))).select(
        "tp", F.col("t").alias("start"), F.coalesce("end", F.greatest("t", F.lit(run_end))).alias("end"))
    o = ownership.alias("o")
    covered = spans.alias("s").join(
        o, (F.col("s.tp") == F.col("o.tp")) & (F.col("o.start") <= F.col("s.start")) & (F.col("o.end") > F.col("s.start")),
        "left",
    )
    return covered.groupBy("s.tp", "s.start", "s.end").agg(
        F.sort_array(F.collect_set("o.member")).alias("owners")
    ).select("tp", "start", "end", "owners")


def _convergence_window(control: DataFrame, info: RunInfo, config: CheckConfig) -> tuple[float, float]:
    """From when and for how long convergence is awaited: the last fault's end, 2 x session + 5 s."""
    last_fault = control.filter(F.col("type").isin("fault_started", "fault_stopped")).agg(F.max("t")).first()[0]
    if last_fault is None:
        last_fault = control.filter(F.col("type") == "member_started").agg(F.max("t")).first()[0] or 0.0
    session_s = (info.session_timeout_ms or 10_000) / 1000
    bound = config.convergence_bound_s if config.convergence_bound_s is not None else 2 * session_s + 5
    return float(last_fault), float(bound)


# -- aggregates ------------------------------------------------------------------------------

def _phases(control: DataFrame, run_end: float) -> list[tuple[str, float, float]]:
    marks = [(row["name"] or "?", row["t"]) for row in
             control.filter(F.col("type") == "phase").orderBy("t", "seq").select("name", "t").collect()]
    if not marks or marks[0][1] > 1e-3:
        marks.insert(0, ("start", 0.0))
    ends = [t for _, t in marks[1:]] + [max(run_end, marks[-1][1])]
    return [(name, start, end) for (name, start), end in zip(marks, ends, strict=True)]


def _phase_index(column: str, phases: list[tuple[str, float, float]]):
    index = F.lit(0)
    for _, start, _ in phases[1:]:
        index = index + (F.col(column) >= start).cast("int")
    return index


def _rebalance_episodes(control: DataFrame) -> DataFrame:
    """Spans when at least one member was rebalancing (its completed/failed rebalances, merged)."""
    per_member = Window.partitionBy("member").orderBy("t", "seq")
    ends = control.filter(F.col("type").isin("rebalance_started", "rebalance_completed", "rebalance_failed")).withColumn(
        "last_start", F.last(F.when(F.col("type") == "rebalance_started", F.col("t")), ignorenulls=True).over(
            per_member.rowsBetween(Window.unboundedPreceding, -1))
    ).filter(F.col("type") != "rebalance_started")
    spans = ends.select(
        F.coalesce(F.col("t") - F.col("duration_ms") / 1000, "last_start", "t").alias("start"), F.col("t").alias("end"),
        F.lit(1).alias("run"),
    )
    in_time = Window.partitionBy("run").orderBy("start", "end")
    merged = spans.withColumn(
        "reach", F.max("end").over(in_time.rowsBetween(Window.unboundedPreceding, -1))
    ).withColumn("new", F.when(F.col("reach").isNull() | (F.col("start") > F.col("reach")), 1).otherwise(0)).withColumn(
        "episode", F.sum("new").over(in_time.rowsBetween(Window.unboundedPreceding, 0)))
    return merged.groupBy("episode").agg(F.min("start").alias("start"), F.max("end").alias("end")).orderBy("start")


def _phase_table(produce_times: DataFrame, missing: DataFrame, repeats: DataFrame, deliveries: DataFrame,
                 episodes: pd.DataFrame, checks: list[CheckResult], phases: list[tuple[str, float, float]],
                 config: CheckConfig) -> pd.DataFrame:
    """Seed 002's table per phase: records lost (never processed or over the limit), max latency,
    time spent rebalancing; plus duplicates and double ownership. Records belong to the phase in
    which they were produced."""
    def by_phase(frame: DataFrame, column: str, *aggregates) -> pd.DataFrame:
        return frame.withColumn("phase", _phase_index(column, phases)).groupBy("phase").agg(*aggregates).toPandas(
        ).set_index("phase")

    made = by_phase(produce_times, "t_produce", F.count("*").alias("produced"))
    never = by_phase(missing, "t_produce", F.count("*").alias("never_processed"))
    late = by_phase(
        deliveries.withColumn("t_produce", F.col("t") - F.col("latency_ms") / 1000), "t_produce",
        F.sum((F.col("latency_ms") > config.latency_limit_ms).cast("int")).alias("over_limit"),
        F.max("latency_ms").alias("max_latency_ms"), F.percentile_approx("latency_ms", 0.99).alias("p99_latency_ms"))
    again = by_phase(repeats, "t", F.sum("records").alias("duplicates"))
    double = next((c.evidence for c in checks if c.check == "double-ownership"), pd.DataFrame())

    def get(table: pd.DataFrame, column: str, index: int, default=0):
        value = table[column].get(index) if column in table else None
        return default if value is None or pd.isna(value) else value

    rows = []
    for index, (name, start, end) in enumerate(phases):
        row = {"phase": name, "start_s": start, "end_s": end,
               "produced": int(get(made, "produced", index)),
               "never_processed": int(get(never, "never_processed", index)),
               "over_limit": int(get(late, "over_limit", index)),
               "duplicates": int(get(again, "duplicates", index)),
               "max_latency_ms": get(late, "max_latency_ms", index, None),
               "p99_latency_ms": get(late, "p99_latency_ms", index, None)}
        row["processed"] = row["produced"] - row["never_processed"]
        row["records_lost"] = row["never_processed"] + row["over_limit"]
        lower = float("-inf") if index == 0 else start
        upper = float("inf") if index == len(phases) - 1 else end
        starting = episodes[(episodes["start"] >= lower) & (episodes["start"] < upper)]
        row["rebalances"] = len(starting)
        row["rebalance_ms"] = float((starting["end"] - starting["start"]).sum() * 1000)
        if len(double):
            row["double_ownership_s"] = float(double[(double["start"] >= lower) & (double["start"] < upper)][
                "duration_s"].sum())
        else:
            row["double_ownership_s"] = 0.0
        rows.append(row)
    return pd.DataFrame(rows)


def _rebalance_metrics(control: DataFrame, run_end: float) -> pd.DataFrame:
    """Per member and for the group, under the Kafka consumer metric names."""
    per_member = Window.partitionBy("member").orderBy("t", "seq").rowsBetween(Window.unboundedPreceding, -1)
    rebalances = control.filter(F.col("type").isin("rebalance_started", "rebalance_completed", "rebalance_failed")).withColumn(
        "last_start", F.last(F.when(F.col("type") == "rebalance_started", F.col("t")), ignorenulls=True).over(per_member)
    ).withColumn("latency", F.coalesce("duration_ms", (F.col("t") - F.col("last_start")) * 1000))
    done = F.col("type") == "rebalance_completed"
    metrics = rebalances.groupBy("member").agg(
        F.sum(done.cast("int")).alias("rebalance-total"),
        F.sum((F.col("type") == "rebalance_failed").cast("int")).alias("failed-rebalance-total"),
        F.avg(F.when(done, F.col("latency"))).alias("rebalance-latency-avg"),
        F.max(F.when(done, F.col("latency"))).alias("rebalance-latency-max"),
        F.sum(F.when(done, F.col("latency"))).alias("rebalance-latency-total"),
        (F.lit(run_end) - F.max(F.when(done, F.col("t")))).alias("last-rebalance-seconds-ago"),
    )
    requests = control.filter(F.col("type") == "coordination_request").groupBy("member").agg(
        F.avg(F.when(F.col("op") == "JoinGroup", F.col("latency_ms"))).alias("join-time-avg"),
        F.max(F.when(F.col("op") == "JoinGroup", F.col("latency_ms"))).alias("join-time-max"),
        F.avg(F.when(F.col("op") == "SyncGroup", F.col("latency_ms"))).alias("sync-time-avg"),
        F.max(F.when(F.col("op") == "SyncGroup", F.col("latency_ms"))).alias("sync-time-max"),
    )
    table = metrics.join(requests, "member", "left").orderBy("member").toPandas()
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


def _herd(control: DataFrame, ownership: DataFrame, partitions: int) -> pd.DataFrame:
    """Per membership change (a join, a leave, a crash): what it cost the group until it was stable.

    requests: coordination requests (ZooKeeper ops or group APIs, background ones excluded);
    notifications: watch notifications; stable_s: until the last assignment it caused;
    stop_the_world_s: time in that span when no partition was owned by anyone;
    unowned_partition_s: partition-seconds without an owner in that span."""
    started = control.filter(F.col("type") == "member_started").select("t", "seq", F.lit("join").alias("kind"),
                                                                      F.lit(1).alias("delta"))
    stopped = control.filter(F.col("type") == "member_stopped").select("t", "seq", F.lit("leave").alias("kind"),
                                                                      F.lit(-1).alias("delta"))
    crashed = _crash_targets(control).select("t", "seq", F.lit("crash").alias("kind"), F.lit(-1).alias("delta"))
    in_time = Window.partitionBy("run").orderBy("t", "seq")
    changes = (
        started.unionByName(stopped).unionByName(crashed).withColumn("run", F.lit(1))
        .withColumn("live_after", F.sum("delta").over(in_time.rowsBetween(Window.unboundedPreceding, 0)))
        .withColumn("gap", F.col("t") - F.lag("t").over(in_time))
        .withColumn("new", F.when(F.col("gap").isNull() | (F.col("gap") > CHANGE_GAP_S), 1).otherwise(0))
        .withColumn("change", F.sum("new").over(in_time.rowsBetween(Window.unboundedPreceding, 0)))
        .withColumn("live_before", F.col("live_after") - F.col("delta"))
        .groupBy("change").agg(
            F.min("t").alias("t"), F.first("kind").alias("kind"), F.count("*").alias("members_changed"),
            F.min_by("live_before", F.struct("t", "seq")).alias("live_before"),
            F.max_by("live_after", F.struct("t", "seq")).alias("live_after"))
    )
    work = control.filter(
        ((F.col("type") == "coordination_request") & ~F.coalesce(F.col("op"), F.lit("")).isin(*BACKGROUND_OPS)
         & ~((F.col("op") == "set") & F.coalesce(F.col("path"), F.lit("")).contains("/offsets/")))
        | F.col("type").isin("watch_notification", "rebalance_attempt", "rebalance_failed", "rebalance_completed",
                             "partitions_assigned")
    ).select("t", "seq", "type", "outcome", F.lit(None).cast("long").alias("change"))
    marks = changes.select("t", F.lit(-1).cast("long").alias("seq"), F.lit("change").alias("type"),
                           F.lit(None).cast("string").alias("outcome"), "change")
    attributed = work.unionByName(marks).withColumn("run", F.lit(1)).withColumn(
        "change", F.last("change", ignorenulls=True).over(in_time.rowsBetween(Window.unboundedPreceding, 0))
    ).filter((F.col("type") != "change") & F.col("change").isNotNull())
    costs = attributed.groupBy("change").agg(
        F.sum((F.col("type") == "coordination_request").cast("int")).alias("requests"),
        F.sum((F.col("type") == "watch_notification").cast("int")).alias("notifications"),
        F.sum(((F.col("type") == "rebalance_attempt") & (F.col("outcome") != "success")).cast("int")
              + (F.col("type") == "rebalance_failed").cast("int")).alias("failed_attempts"),
        F.max(F.when(F.col("type").isin("rebalance_completed", "partitions_assigned"), F.col("t"))).alias("stable_t"),
    )
    table = changes.join(costs, "change", "left").orderBy("t").toPandas()
    if table.empty:
        return table
    for column in ("requests", "notifications", "failed_attempts"):
        table[column] = table[column].fillna(0).astype(int)
    table["stable_s"] = table["stable_t"] - table["t"]
    owned = _owned_count_spans(ownership)
    stw, unowned = [], []
    for _, row in table.iterrows():
        end = row["stable_t"] if pd.notna(row["stable_t"]) else row["t"]
        clipped = (owned["end"].clip(upper=end) - owned["start"].clip(lower=row["t"])).clip(lower=0)
        stw.append(float(clipped[owned["owned"] == 0].sum()))
        unowned.append(float((clipped * (partitions - owned["owned"]).clip(lower=0)).sum()))
    table["stop_the_world_s"] = stw
    table["unowned_partition_s"] = unowned
    return table.drop(columns=["stable_t"])


def _usual_group_size(herd: pd.DataFrame, run_end: float) -> int | None:
    """Without lock.json: the group size the run spent the most time at."""
    if herd.empty:
        return None
    spans = herd[["t", "live_after"]].copy()
    spans["seconds"] = spans["t"].shift(-1).fillna(run_end) - spans["t"]
    by_size = spans[spans["live_after"] > 0].groupby("live_after")["seconds"].sum()
    return int(by_size.idxmax()) if len(by_size) else None


def _owned_count_spans(ownership: DataFrame) -> pd.DataFrame:
    """How many partitions were owned (by anyone, counted once per owner) between ownership changes."""
    deltas = ownership.select(F.col("start").alias("t"), F.lit(1).alias("d")).unionByName(
        ownership.select(F.col("end").alias("t"), F.lit(-1).alias("d"))).groupBy("t").agg(F.sum("d").alias("d"))
    frame = deltas.orderBy("t").toPandas()
    frame["owned"] = frame["d"].cumsum()
    frame["start"] = frame["t"]
    frame["end"] = frame["t"].shift(-1).fillna(frame["t"].max() if len(frame) else 0.0)
    return frame[["start", "end", "owned"]]


def _throughput(produce_times: DataFrame, consumed: DataFrame, missing: DataFrame, deliveries: DataFrame,
                config: CheckConfig) -> pd.DataFrame:
    """Per second of the run: records processed; and by the second they were produced: records
    produced, processed over the latency limit, never processed."""
    second = lambda column: F.floor(column).alias("second")  # noqa: E731
    processed = consumed.groupBy(second("t")).agg(F.sum("count").alias("processed"))
    made = produce_times.groupBy(second("t_produce")).agg(F.count("*").alias("produced"))
    late = deliveries.filter(F.col("latency_ms") > config.latency_limit_ms).groupBy(
        second(F.col("t") - F.col("latency_ms") / 1000)).agg(F.count("*").alias("over_limit"))
    never = missing.groupBy(second("t_produce")).agg(F.count("*").alias("never_processed"))
    table = processed.join(made, "second", "full").join(late, "second", "full").join(never, "second", "full")
    return table.orderBy("second").toPandas().fillna(0).astype(int)


def _faults(control: DataFrame, run_end: float) -> pd.DataFrame:
    """Fault windows: each fault_started with its fault_stopped (or open until the end)."""
    faults = control.filter(F.col("type").isin("fault_started", "fault_stopped")).select(
        "type", "t", "fault_id", "kind", "target", "link").orderBy("t").toPandas()
    rows, open_ = [], {}
    for _, event in faults.iterrows():
        key = event["fault_id"] or f"{event['kind']}:{event['target']}"
        if event["type"] == "fault_started":
            open_[key] = {"fault_id": key, "kind": event["kind"], "target": event["target"], "link": event["link"],
                          "start": event["t"], "end": None}
            rows.append(open_[key])
        elif key in open_:
            open_.pop(key)["end"] = event["t"]
    for row in rows:
        if row["end"] is None:
            row["end"] = run_end
    return pd.DataFrame(rows, columns=["fault_id", "kind", "target", "link", "start", "end"])


# -- output ----------------------------------------------------------------------------------

def write_summary(summary: RunSummary) -> Path:
    out = summary.info.run_dir / "summary"
    evidence_dir = out / "evidence"
    evidence_dir.mkdir(parents=True, exist_ok=True)
    summary.verdicts().to_parquet(out / "verdicts.parquet", index=False)
    for name, table in summary.tables.items():
        table.to_parquet(out / f"{name}.parquet", index=False)
    for check in summary.checks:
        path = evidence_dir / f"{check.check}.parquet"
        if len(check.evidence):
            check.evidence.to_parquet(path, index=False)
        elif path.exists():
            path.unlink()
    info = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(summary.info).items()}
    (out / "run.json").write_text(json.dumps({"info": info, "facts": summary.facts}, indent=2, default=str) + "\n")
    (out / "summary.md").write_text(summary_markdown(summary))
    return out


def markdown_table(frame: pd.DataFrame, *, digits: int = 1, limit: int | None = None) -> str:
    """A GitHub Markdown table; floats rounded, long tables cut with a note."""
    if frame.empty:
        return "_(none)_\n"
    shown = frame if limit is None else frame.head(limit)

    def cell(value: object) -> str:
        if value is None or (isinstance(value, float) and pd.isna(value)):
            return ""
        if isinstance(value, float):
            return f"{value:,.{digits}f}"
        if isinstance(value, (list, tuple)) or hasattr(value, "tolist"):
            return ", ".join(map(str, list(value)))
        return str(value).replace("|", "\\|")

    lines = ["| " + " | ".join(map(str, shown.columns)) + " |", "|" + "---|" * len(shown.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in shown.itertuples(index=False)]
    if limit is not None and len(frame) > limit:
        lines.append(f"\n_{len(frame) - limit} more rows in the Parquet file_")
    return "\n".join(lines) + "\n"


def summary_markdown(summary: RunSummary) -> str:
    info, facts = summary.info, summary.facts
    parts = [
        f"# Summary of {info.name}\n",
        f"backend **{info.backend}**, strategy **{info.strategy}**, {info.members} members, "
        f"{facts['partitions']} partitions, {facts['events']:,} events over {facts['duration_s']:.1f} s"
        + (f", {facts['unreadable_lines']} unreadable lines skipped" if facts["unreadable_lines"] else "") + "\n",
        "## Checks\n", markdown_table(summary.verdicts().drop(columns=["run", "backend"])),
        "## Phases\n", markdown_table(summary.tables["phases"]),
        "## Rebalance metrics (Kafka names, ms)\n", markdown_table(summary.tables["rebalance_metrics"], limit=20),
        "## Membership changes (herd cost)\n", markdown_table(summary.tables["herd"], digits=3, limit=40),
    ]
    for check in summary.checks:
        if check.verdict is Verdict.FALSE and len(check.evidence):
            parts += [f"## Evidence: {check.check}\n", markdown_table(check.evidence, digits=3, limit=20)]
    return "\n".join(parts)


def summarize(run_dirs: list[Path], *, master: str = "local[*]", config: CheckConfig = DEFAULT_CHECKS,
              step: Step = lambda _: None) -> list[RunSummary]:
    """Summarise several runs with one Spark session."""
    for run_dir in run_dirs:
        if not (run_dir / "events").is_dir():
            raise FileNotFoundError(f"{run_dir}: not a run directory (no events/)")
    step("starting Spark")
    spark = start_spark(master)
    return [summarize_run(spark, run_dir, config, step=lambda s, r=run_dir: step(f"{r.name}: {s}"))
            for run_dir in run_dirs]
