"""Events of many runs read into one set of DataFrames, each row tagged with its `run`.

The Spark schema is built from the event vocabulary (`rebalance.events.VOCABULARY`): the fields
the checks read, typed as the vocabulary declares them. Record events and commits are most of a log:
the log is parsed once and cached; control events and commits get small flat caches of their own,
record batches are read from the parsed log, and produced records stay in their batches (offset
ranges), so no check expands every produced record to a row."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from experiments.folders.run_folder import RunFolder
from rebalance import events as ev

SPARK_TYPES = {
    ev.FieldType.TEXT: T.StringType(), ev.FieldType.INT: T.LongType(), ev.FieldType.FLOAT: T.DoubleType(),
    ev.FieldType.BOOL: T.BooleanType(), ev.FieldType.TEXTS: T.ArrayType(T.StringType()),
    ev.FieldType.INTS: T.ArrayType(T.LongType()), ev.FieldType.OFFSETS: T.MapType(T.StringType(), T.LongType()),
    ev.FieldType.OBJECT: T.StringType(),   # any JSON value, read as its JSON text
}


def event_schema(types: frozenset[str] | set[str], fields: tuple[str, ...]) -> T.StructType:
    """The Spark schema of `fields` as the event `types` declare them."""
    return T.StructType([T.StructField(name, _spark_type(types, name)) for name in fields])


def _spark_type(types: frozenset[str] | set[str], name: str) -> T.DataType:
    """A field's Spark type. Two event types may declare it differently when Spark reads both the same way
    (a request's `detail` is a word, a phase's an object: both read as text)."""
    try:
        return SPARK_TYPES[ev.field_types(types, [name])[name]]
    except ValueError:
        read_as = {SPARK_TYPES[ev.VOCABULARY[kind].fields[name]] for kind in types if name in ev.VOCABULARY[kind].fields}
        if len(read_as) != 1:
            raise
        return read_as.pop()


# The types the summary reads with the full schema (the older per-record producer line apart).
READ_TYPES = ev.EVENT_TYPES - {ev.COORDINATOR_EVENT, ev.METRICS, ev.RECORD_PRODUCED}
READ_FIELDS = (
    *ev.REQUIRED_FIELDS, "strategy", "reason", "trigger", "generation", "assigned", "duration_ms", "attempts", "error",
    "outcome", "partitions", "topic", "partition", "first_offset", "last_offset", "count", "produce_ts_ms", "offsets",
    "op", "path", "detail", "latency_ms", "fault_id", "kind", "target", "member_ids", "link", "params", "name",
    "server", "moment", "served", "nodes", "observed_ts_ns", "processed_ts_ms",
    "state", "node", "start_ns", "stalled_ms", "outstanding", "loop_lag_ms", "sampler_gap_ms", "gc_ms", "stack",
    "rss_bytes", "loop_cpu_ms", "loop_waited_ms",
)
EVENT_SCHEMA = event_schema(READ_TYPES, READ_FIELDS)
SINGLE_RECORD_SCHEMA = event_schema({ev.RECORD_PRODUCED},
                                    ("type", "topic", "partition", "ts_ns", "ts_ms", "offset", "produce_ts_ms"))

_PRODUCED_TYPES = (ev.RECORD_PRODUCED, ev.RECORDS_PRODUCED)
_RECORD_FIELDS = ("first_offset", "last_offset", "produce_ts_ms", "processed_ts_ms")   # `count` stays: a request's too
_HANDLED_TYPES = (ev.RECORDS_CONSUMED, ev.RECORDS_PROCESSED)


@dataclass
class EventTables:
    """The events of every run in four frames, each with the `run` column: `control` (every other event,
    full schema, plus `seq`), `commits` (one row per partition per offsets_committed: member, ts_ns,
    ts_ms, seq, generation, tp, offset), `produced` batches (tp, first_offset, last_offset, records,
    stamps: one produce time per record, ts_ns, ts_ms), `consumed` batches (as delivered by poll()) and
    `processed` ones (as the application finished handling them: `done_list`, one end time per record,
    wall-clock ms; only in runs whose members had a service time). `types_by_run` counts
    each run's lines by event type (None: unreadable lines). `unpersist` drops every cache behind them
    (`cached`: the parsed log)."""

    control: DataFrame
    commits: DataFrame
    produced: DataFrame
    consumed: DataFrame
    processed: DataFrame
    types_by_run: dict[int, dict[str | None, int]]
    cached: tuple[DataFrame, ...] = ()

    @property
    def types(self) -> dict[str | None, int]:
        """The line counts of a pass over a single run."""
        (only,) = self.types_by_run.values()
        return only

    def unpersist(self) -> None:
        for frame in (self.control, self.commits, *self.cached):
            frame.unpersist()


def event_files(run_dir: Path) -> list[str]:
    files = [str(path) for path in RunFolder(run_dir).event_files()]
    if not files:
        raise FileNotFoundError(f"{run_dir}: no events/*.jsonl")
    return files


def read_runs(spark: SparkSession, run_dirs: list[Path], *, by_run: bool = False) -> EventTables:
    """One read of every run's files; a file's run is found by its path. `by_run`: the parsed log is cached
    hash-partitioned by `run`, so that a query grouped or windowed by run (every query of the summary) finds its
    rows already in place and shuffles nothing; for small logs only, since a run's rows then sit in one partition."""
    files = {path: index for index, run_dir in enumerate(run_dirs) for path in event_files(Path(run_dir))}
    # file URI -> run, as a literal map in the expression: no table to join, no broadcast job
    owners = F.create_map(*(F.lit(value) for path, run in files.items()
                            for value in (Path(os.path.abspath(path)).as_uri(), run)))
    reader = spark.read.option("mode", "PERMISSIVE")

    def tagged(frame: DataFrame) -> DataFrame:
        return frame.withColumn("run", owners[F.input_file_name()].cast("int"))

    parsed = reader.schema(EVENT_SCHEMA).json(list(files)).withColumn("seq", F.monotonically_increasing_id())
    events = (tagged(parsed).repartition("run") if by_run else tagged(parsed)).persist()
    types_by_run: dict[int, dict[str | None, int]] = {run: {} for run in range(len(run_dirs))}
    counts = events.groupBy("run", "type").count().collect()
    if any(row["run"] is None for row in counts):
        raise ValueError(f"events read from a file outside the runs given: {sorted(files)[:3]}...")
    for row in sorted(counts, key=lambda row: (row["run"], row["type"] or "")):   # the same order in every pass
        types_by_run[row["run"]][row["type"]] = row["count"]
    kind = F.coalesce(F.col("type"), F.lit(""))
    # A torn last line (a crash mid-write) parses to nulls: kept in `control`, counted, then dropped.
    control = events.filter(~kind.isin(*_PRODUCED_TYPES, *_HANDLED_TYPES, ev.OFFSETS_COMMITTED)).select(
        *(name for name in events.columns if name not in _RECORD_FIELDS))
    commits = events.filter(kind == ev.OFFSETS_COMMITTED).select(
        "run", "member", "ts_ns", "ts_ms", "seq", "generation", F.explode("offsets").alias("tp", "offset"))
    consumed, processed = (events.filter(kind == kind_of).select(
        "run", "member", tp().alias("tp"), "ts_ns", "ts_ms", "first_offset", "last_offset",
        F.coalesce("count", F.col("last_offset") - F.col("first_offset") + 1).alias("count"),
        F.col("produce_ts_ms").alias("produce_list"), F.col("processed_ts_ms").alias("done_list"))
        for kind_of in _HANDLED_TYPES)
    consumed = consumed.drop("done_list")
    produced = _batches(events.filter(kind == ev.RECORDS_PRODUCED), F.col("produce_ts_ms"))
    if any(types.get(ev.RECORD_PRODUCED) for types in types_by_run.values()):
        # An older log: its single-record lines carry a number where batches carry a list, read apart.
        single = tagged(reader.schema(SINGLE_RECORD_SCHEMA).json(list(files))).filter(
            F.col("type") == ev.RECORD_PRODUCED)
        produced = produced.unionByName(_batches(single, F.array(F.coalesce("produce_ts_ms", "ts_ms"))))
    # Control events and commits are cached on their own (flat, and read by many windows); record
    # batches are read straight from the parsed log, which stays cached until `unpersist`.
    control, commits = control.persist(), commits.persist()
    return EventTables(control, commits, produced, consumed, processed, types_by_run, (events,))


def read_events(spark: SparkSession, run_dir: Path) -> EventTables:
    """The frames of one run."""
    return read_runs(spark, [Path(run_dir)])


def _batches(frame: DataFrame, stamps: Column) -> DataFrame:
    """Produced records as batches (a single-record line is a batch of one)."""
    names = set(frame.columns)
    offset = F.col("offset") if "offset" in names else F.lit(None).cast("long")
    first, last = (F.coalesce(F.col(name), offset) if name in names else offset for name in ("first_offset", "last_offset"))
    records = last - first + 1
    return frame.filter(first.isNotNull()).select(
        "run", tp().alias("tp"), first.alias("first_offset"), last.alias("last_offset"), records.alias("records"),
        # Without one stamp per record, the batch's own time stands in for each record's.
        F.when(F.size(stamps) == records, stamps).otherwise(F.array_repeat("ts_ms", records.cast("int")))
        .alias("stamps"), "ts_ns", "ts_ms")


def tp(topic: str = "topic", partition: str = "partition") -> Column:
    """A partition as the events write it: "topic-N"."""
    return F.concat_ws("-", F.col(topic), F.col(partition).cast("string"))
