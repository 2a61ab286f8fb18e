"""A quiet Spark session for the summary."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from pyspark.sql import SparkSession

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
