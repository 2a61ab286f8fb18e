"""Results of a Spark pass over many runs, grouped by `run`, split per run in pandas.

Every query of the summary is grouped by the `run` column; its small result is collected once and
split here, so the number of Spark jobs does not depend on the number of runs."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

_INTEGRAL = {T.LongType: "int64", T.IntegerType: "int32", T.ShortType: "int16", T.ByteType: "int8",
             T.BooleanType: "bool"}


def split_by_run(frame: DataFrame, runs: Iterable[int]) -> dict[int, pd.DataFrame]:
    """Collect `frame` (one job) and cut it into one pandas frame per run, without the `run` column,
    in the frame's row order. A run's part has the dtypes Spark gives that run's rows alone (an
    integer column is float only in a run that has nulls in it)."""
    table = frame.toPandas()
    columns = [name for name in table.columns if name != "run"]
    wanted = {field.name: _INTEGRAL[type(field.dataType)] for field in frame.schema.fields
              if type(field.dataType) in _INTEGRAL and field.name in columns}
    parts = {}
    groups = dict(iter(table.groupby("run", sort=False))) if len(table) else {}
    for run in runs:
        part = groups.get(run)
        if part is None:
            parts[run] = table.iloc[0:0][columns].reset_index(drop=True)
            continue
        part = part[columns].reset_index(drop=True)
        for name, dtype in wanted.items():
            if part[name].dtype != dtype and part[name].notna().all():
                part[name] = part[name].astype(dtype)
        parts[run] = part
    return parts


def first_rows_by_run(frame: DataFrame, order: list[str], limit: int, runs: Iterable[int]) -> dict[int, pd.DataFrame]:
    """Each run's first `limit` rows in `order` (evidence)."""
    ranked = frame.withColumn("_rank", F.row_number().over(Window.partitionBy("run").orderBy(*order)))
    return split_by_run(ranked.filter(F.col("_rank") <= limit).orderBy("run", "_rank").drop("_rank"), runs)


def values_by_run(frame: DataFrame) -> dict[int, dict]:
    """A frame of one row per run (run plus aggregates) as {run: {column: value}}."""
    return {row["run"]: row.asDict() for row in frame.collect()}
