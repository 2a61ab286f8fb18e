"""A quiet Spark session for the summary, tuned for the size of what it reads.

A summary of a few megabytes of events (a demo, a campaign of small runs) is almost all fixed cost:
on 2 cores, the JVM's optimising compiler, the code Spark generates and compiles for each stage,
and adaptive re-planning after each stage took more time than the work itself. Below
`SMALL_INPUT_BYTES` the session therefore runs its JVMs (the driver, and a cluster's executors) with their quick compiler only, interprets
expressions instead of generating code, plans each query once, shuffles into as many partitions as
there are cores and caches frames without compressing them. Above it, Spark's defaults stand: they
pay off on big logs (docs/analysis.md, "Performance").
"""

from __future__ import annotations

import atexit
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from pyspark.sql import SparkSession

from experiments.folders.run_folder import RunFolder
from experiments.summary import class_archive

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


SMALL_INPUT_BYTES = 256 * 1024 * 1024
# Only C1, the quick compiler (which also needs more room for the code it keeps).
_QUICK_JIT = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m"


def small_input_settings(parallelism: int) -> dict[str, str]:
    """The SQL settings of a summary of small logs."""
    return {
        "spark.sql.adaptive.enabled": "false",
        "spark.sql.codegen.wholeStage": "false",
        "spark.sql.codegen.factoryMode": "NO_CODEGEN",   # expressions interpreted, not compiled
        "spark.sql.shuffle.partitions": str(max(parallelism, 1)),
        "spark.sql.inMemoryColumnarStorage.compressed": "false",   # cached frames of a few MB
    }


def input_bytes(run_dirs: list[Path]) -> int:
    return sum(path.stat().st_size for run_dir in run_dirs for path in RunFolder(run_dir).event_files())


@contextmanager
def tuned_for(spark: SparkSession, size: int, enabled: bool = True) -> Iterator[None]:
    """The small-input SQL settings while summarising `size` bytes of events, if that is small (and
    `enabled`); the session's own settings again afterwards."""
    if size >= SMALL_INPUT_BYTES or not enabled:
        yield
        return
    wanted = small_input_settings(spark.sparkContext.defaultParallelism)
    before = {key: spark.conf.get(key, None) for key in wanted}
    for key, value in wanted.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def start_spark(master: str = "local[*]", *, driver_memory: str = "4g", shuffle_partitions: int = 8,
                small_input: bool = True, java_options: str | None = None) -> SparkSession:
    """A quiet session: no UI, no console progress bars, warnings only. `small_input`: the JVM's quick
    compiler only (a JVM option, so it holds for the session's life). `java_options`: instead of the
    class archive's (experiments.summary.class_archive)."""
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
        .config("spark.driver.extraJavaOptions", " ".join(filter(None, (
            f"-Dlog4j2.configurationFile={log_config}", _QUICK_JIT if small_input else "",
            class_archive.java_options() if java_options is None else java_options))))
    )
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no "hostname resolves to loopback" warning
        builder = builder.config("spark.driver.memory", driver_memory)
    elif small_input:   # a cluster's executors are JVMs of their own: the quick compiler there too
        builder = builder.config("spark.executor.extraJavaOptions", _QUICK_JIT)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    atexit.register(_stop_and_wait, spark)
    return spark


def _stop_and_wait(spark: SparkSession, timeout_s: float = 15.0) -> None:
    """At exit: stop the session and wait for its JVM, which otherwise outlives the command by a few
    seconds while it notices its closed stdin, and is left behind in the caller's process group."""
    gateway = getattr(spark.sparkContext, "_gateway", None)
    jvm = getattr(gateway, "proc", None)
    with suppress(Exception):
        spark.stop()
    if jvm is None:
        return
    with suppress(Exception):
        if jvm.stdin is not None:
            jvm.stdin.close()   # the gateway server exits when its stdin closes
        jvm.wait(timeout_s)
