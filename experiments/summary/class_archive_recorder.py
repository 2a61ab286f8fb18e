"""Record the summary JVM's class archive: summarise a small synthetic run in a JVM that writes the
classes it loaded to the given file as it exits. Run by `experiments.summary.class_archive.ensure`.

    python -m experiments.summary.class_archive_recorder TARGET
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from experiments.summary.class_archive import QUIET
from experiments.summary.pipeline import summarize_run
from experiments.summary.session import start_spark
from experiments.synthetic.anomalies import Anomaly
from experiments.synthetic.simulation import SyntheticRun, write_run


def record(target: Path) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        run_dir = Path(scratch) / "run"
        write_run(run_dir, SyntheticRun(name="class-archive", anomalies=frozenset(Anomaly)))
        spark = start_spark("local[2]", java_options=f"-XX:ArchiveClassesAtExit={target} {QUIET}")
        summarize_run(spark, run_dir, write=False)
        jvm = spark.sparkContext._gateway.proc   # the JVM writes the archive as it exits: wait for that
        spark.stop()
        jvm.stdin.close()
        jvm.wait(timeout=300)


if __name__ == "__main__":
    record(Path(sys.argv[1]))
