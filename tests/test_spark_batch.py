"""A batch of per-run queries: each run's rows, in order, with the dtypes Spark gives them."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def frame(spark):
    rows = [(0, "b", 2, 1.5, True, ["x"]), (0, "a", None, float("nan"), False, []), (2, "c", 7, None, None, ["y", "z"]),
            (0, "c", 1, float("inf"), True, ["w"])]
    return spark.createDataFrame(rows, "run int, name string, count long, seconds double, flag boolean, "
                                       "owners array<string>")


def test_tables_are_split_per_run_in_order_with_each_runs_dtypes(frame):
    from experiments.summary.spark_batch import Batch

    with Batch([0, 1, 2]) as batch:
        tables = batch.tables(frame, ["name"])
        batch.collect()
    first, empty, last = (tables.value[run] for run in (0, 1, 2))
    assert list(first["name"]) == ["a", "b", "c"]
    assert list(first.columns) == ["name", "count", "seconds", "flag", "owners"]
    assert first["count"].dtype == "float64" and math.isnan(first["count"][0])   # a null: floats, as toPandas
    assert last["count"].dtype == "int64" and list(last["count"]) == [7]          # none in this run: integers
    assert math.isnan(first["seconds"][0]) and first["seconds"][2] == math.inf
    assert first["flag"].dtype == bool and last["flag"].dtype == object
    assert list(first["owners"]) == [[], ["x"], ["w"]]
    assert empty.empty and list(empty.columns) == list(first.columns) and empty["count"].dtype == "int64"


def test_first_rows_values_and_every_query_of_a_batch(frame):
    from pyspark.sql import functions as F

    from experiments.summary.spark_batch import Batch

    with Batch([0, 2]) as batch:
        evidence = batch.first_rows(frame, ["name"], limit=2)
        totals = batch.values(frame.groupBy("run").agg(F.count("*").alias("n"), F.max("count").alias("most")))
        batch.collect()
    assert list(evidence.value[0]["name"]) == ["a", "b"] and list(evidence.value[2]["name"]) == ["c"]
    assert totals.value == {0: {"n": 3, "most": 2}, 2: {"n": 1, "most": 7}}


def test_progress_counts_each_query_as_it_finishes_against_those_added(frame):
    from experiments.summary.spark_batch import Batch

    seen = []
    with Batch([0, 2], progress=lambda done, added: seen.append((done, added))) as batch:
        for _ in range(3):
            batch.tables(frame)
        batch.collect()
    assert [done for done, _ in seen] == [1, 2, 3]
    assert all(done <= added <= 3 for done, added in seen) and seen[-1] == (3, 3)


def test_a_result_read_before_its_batch_is_collected_is_an_error(frame):
    from experiments.summary.spark_batch import Batch

    with Batch([0]) as batch:
        pending = batch.tables(frame)
        with pytest.raises(RuntimeError, match="before its batch was collected"):
            _ = pending.value
        batch.collect()
    assert len(pending.value[0]) == 3


def test_a_failing_query_raises_at_collect(spark, frame):
    from pyspark.errors import PySparkException
    from pyspark.sql import functions as F

    from experiments.summary.spark_batch import Batch

    broken = frame.select("run", F.assert_true(F.col("run") > 5, "run too small").alias("checked"))
    with Batch([0]) as batch:
        batch.tables(broken)
        with pytest.raises(PySparkException, match="run too small"):
            batch.collect()


def test_small_inputs_get_the_latency_settings_and_the_session_gets_its_own_back(spark):
    from experiments.summary.session import SMALL_INPUT_BYTES, tuned_for

    before = spark.conf.get("spark.sql.adaptive.enabled")
    with tuned_for(spark, 10_000_000):
        assert spark.conf.get("spark.sql.adaptive.enabled") == "false"
        assert spark.conf.get("spark.sql.shuffle.partitions") == str(spark.sparkContext.defaultParallelism)
    assert spark.conf.get("spark.sql.adaptive.enabled") == before
    with tuned_for(spark, SMALL_INPUT_BYTES):
        assert spark.conf.get("spark.sql.adaptive.enabled") == before


def test_the_class_archive_is_named_for_its_java_and_pyspark_and_used_only_when_present(tmp_path, monkeypatch):
    import pyspark

    from experiments.summary import class_archive

    monkeypatch.setattr(class_archive.sys, "prefix", str(tmp_path))
    path = class_archive.archive_path()
    assert path is not None and pyspark.__version__ in path.name and path.is_relative_to(tmp_path)
    assert class_archive.java_options() == ""
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    assert f"-XX:SharedArchiveFile={path}" in class_archive.java_options()


def test_a_command_that_started_spark_leaves_no_jvm_behind_when_it_exits():
    """The session's JVM is stopped and waited for at exit, not left to notice its closed stdin later
    (a caller waiting on the command's process group would find it still there)."""
    import subprocess
    import sys
    import uuid

    marker = f"-Dlab.test.marker={uuid.uuid4().hex}"
    code = ("from experiments.summary.session import start_spark\n"
            f"start_spark('local[1]', driver_memory='512m', java_options={marker!r}).range(3).count()\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)   # a pipe would wait for the JVM too
    left = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                left.append(int(entry.name))
    assert left == [], "the Spark JVM outlived the command"
