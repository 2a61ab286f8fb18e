"""Results of a Spark pass over many runs, grouped by `run`, collected as a batch and split per run.

Every query of the summary is grouped by the `run` column and its result is small (counts, evidence,
tables of a few thousand rows), so the number of Spark jobs does not depend on the number of runs.
On logs of a few megabytes a Spark job costs more in fixed overhead (planning on the driver, then
scheduling and running its stages) than in work. A `Batch` therefore starts each query as soon as it
is added, on a small pool of threads, so that the driver plans the next query while the executors run
the previous ones; `collect()` waits for them all and hands out the results."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

import pandas as pd
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

_INTEGRAL = {T.LongType: "int64", T.IntegerType: "int32", T.ShortType: "int16", T.ByteType: "int8"}
_RANK = "_rank"
QUERIES_AT_ONCE = 2   # one planning on the driver while one runs: more only queue up on 2 cores

V = TypeVar("V")


class Pending(Generic[V]):
    """What a query gives once its batch is collected."""

    def __init__(self, describe: str) -> None:
        self._describe = describe
        self._value: V | None = None
        self._ready = False

    def set(self, value: V) -> None:
        self._value, self._ready = value, True

    @property
    def value(self) -> V:
        if not self._ready:
            raise RuntimeError(f"{self._describe}: read before its batch was collected")
        return self._value  # type: ignore[return-value]


@dataclass
class _Query:
    rows: Future
    finish: Callable[[list[dict]], object]
    pending: Pending


class Batch:
    """Queries over frames with a `run` column, started as they are added, read after `collect()`.

    - `tables(frame, order)`: each run's rows as a pandas frame, in `order`;
    - `first_rows(frame, order, limit)`: each run's first `limit` rows in `order` (evidence);
    - `values(frame)`: a frame of one row per run as {run: {column: value}}.

    A run's table has the frame's columns without `run`, with the dtypes Spark would give that run's
    rows alone (an integer column is float only in a run that has nulls in it). Rows travel as JSON
    text, so every query has the same one-column result whatever its schema."""

    def __init__(self, runs: Iterable[int], progress: Callable[[int, int], None] | None = None) -> None:
        """`progress(done, added)` as each query finishes, from the thread that ran it: the queries finished and
        those added so far (most finish while later ones are still being added)."""
        self.runs = list(runs)
        self._queries: list[_Query] = []
        self._pool = ThreadPoolExecutor(QUERIES_AT_ONCE, thread_name_prefix="summary-query")
        self._progress = progress
        self._added = self._done = 0
        self._count_lock = threading.Lock()

    def tables(self, frame: DataFrame, order: Iterable[str] = ()) -> Pending[dict[int, pd.DataFrame]]:
        order = list(order)
        schema = _without_run(frame.schema)
        return self._add(frame, lambda rows: self._split(rows, schema, order), "tables")

    def first_rows(self, frame: DataFrame, order: list[str], limit: int) -> Pending[dict[int, pd.DataFrame]]:
        ranked = frame.withColumn(_RANK, F.row_number().over(Window.partitionBy("run").orderBy(*order)))
        schema = _without_run(frame.schema)
        return self._add(ranked.filter(F.col(_RANK) <= limit),
                         lambda rows: self._split(rows, schema, [_RANK]), "first rows")

    def values(self, frame: DataFrame) -> Pending[dict[int, dict]]:
        return self._add(frame, lambda rows: {row.pop("run"): row for row in rows}, "values")

    def collect(self) -> None:
        """Wait for every query added since the last collect; a failed query raises its error here."""
        queries, self._queries = self._queries, []
        try:
            for query in queries:
                query.pending.set(query.finish([json.loads(row[0]) for row in query.rows.result()]))
        finally:
            for query in queries:
                query.rows.cancel()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _add(self, frame: DataFrame, finish: Callable[[list[dict]], object], describe: str) -> Pending:
        pending: Pending = Pending(describe)
        as_json = frame.select(F.to_json(F.struct(*(F.col(f"`{name}`") for name in frame.columns)),
                                         {"ignoreNullFields": "false"}))
        with self._count_lock:
            self._added += 1
        rows = self._pool.submit(as_json.collect)
        if self._progress is not None:
            rows.add_done_callback(self._finished)
        self._queries.append(_Query(rows, finish, pending))
        return pending

    def _finished(self, _: Future) -> None:
        with self._count_lock:
            self._done += 1
            done, added = self._done, self._added
        self._progress(done, added)  # type: ignore[misc]

    def _split(self, rows: list[dict], schema: T.StructType, order: list[str]) -> dict[int, pd.DataFrame]:
        by_run: dict[int, list[dict]] = {run: [] for run in self.runs}
        for row in rows:
            by_run.setdefault(row.pop("run"), []).append(row)
        names = [field.name for field in schema.fields]
        tables = {}
        for run in self.runs:
            table = pd.DataFrame(by_run[run], columns=names + [name for name in order if name not in names])
            if order and len(table):
                table = table.sort_values(order, kind="stable", na_position="first")
            tables[run] = _typed(table[names].reset_index(drop=True), schema)
        return tables


def _without_run(schema: T.StructType) -> T.StructType:
    return T.StructType([field for field in schema.fields if field.name != "run"])


def _typed(table: pd.DataFrame, schema: T.StructType) -> pd.DataFrame:
    """The dtypes `toPandas` gives: integers as integers unless they hold nulls (then floats), floats
    as floats (JSON carries NaN and infinities as text), booleans as bool unless they hold nulls."""
    for field in schema.fields:
        column, kind = table[field.name], type(field.dataType)
        has_nulls = bool(column.isna().any())
        if kind in _INTEGRAL:
            table[field.name] = column.astype("float64" if has_nulls else _INTEGRAL[kind])
        elif kind in (T.DoubleType, T.FloatType):
            table[field.name] = column.astype("float64")
        elif kind is T.BooleanType and not has_nulls:
            table[field.name] = column.astype("bool")
    return table
