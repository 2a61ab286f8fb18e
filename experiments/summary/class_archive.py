"""A class-data sharing archive for the summary's JVM: the classes a summary loads, mapped at start.

A Spark session loads some twenty thousand classes from the jars of the pyspark package, which took
about 2 of the 4 seconds of a session's start on 2 cores, and more again in its first query. The JVM
can record the classes an application loaded into an archive (`-XX:ArchiveClassesAtExit`) and map
them at the next start (`-XX:SharedArchiveFile`). `./lab setup` records one by summarising a small
synthetic run; `start_spark` uses it when it exists. The archive is only valid for the same JVM and
the same jars, so its name carries the pyspark version and the Java binary; with none, or a stale
one, the JVM simply loads classes as usual.

    python -m experiments.summary.class_archive          record the archive if it is missing
    python -m experiments.summary.class_archive --check  exit 1 if it is missing
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyspark

_RECORD = "--record"
# The JVM's class-sharing messages (a stale archive refused, classes it cannot archive) go to stdout.
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def _java() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def archive_path() -> Path | None:
    """Where this interpreter's archive lives, for this pyspark and this Java (None without Java)."""
    java = _java()
    if java is None:
        return None
    key = hashlib.sha256(f"{java}:{java.stat().st_mtime_ns}:{pyspark.__version__}".encode()).hexdigest()[:12]
    return Path(sys.prefix) / "share" / "rebalance-lab" / f"spark-classes-{pyspark.__version__}-{key}.jsa"


def java_options() -> str:
    """The JVM options that map the archive, or nothing when there is none."""
    path = archive_path()
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} {_QUIET}"


def _record(target: Path) -> None:
    """Summarise a small synthetic run in a JVM that writes the classes it loaded to `target` at exit."""
    from experiments.summary import summarize_run
    from experiments.summary.session import start_spark
    from experiments.synthetic import Anomaly, SyntheticRun, write_run

    with tempfile.TemporaryDirectory() as scratch:
        run_dir = Path(scratch) / "run"
        write_run(run_dir, SyntheticRun(name="class-archive", anomalies=frozenset(Anomaly)))
        spark = start_spark("local[2]", java_options=f"-XX:ArchiveClassesAtExit={target} {_QUIET}")
        summarize_run(spark, run_dir, write=False)
        jvm = spark.sparkContext._gateway.proc   # the JVM writes the archive as it exits: wait for that
        spark.stop()
        jvm.stdin.close()
        jvm.wait(timeout=300)


def ensure() -> Path | None:
    """Record the archive unless it exists; its JVM writes it when the recording process exits."""
    path = archive_path()
    if path is None or path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.partial")
    try:
        subprocess.run([sys.executable, "-m", "experiments.summary.class_archive", _RECORD, str(partial)], check=True)
        if partial.is_file() and partial.stat().st_size:
            partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)
    return path if path.is_file() else None


def main(argv: list[str]) -> None:
    if argv[:1] == [_RECORD]:
        _record(Path(argv[1]))
        return
    if argv[:1] == ["--check"]:
        path = archive_path()
        sys.exit(0 if path is None or path.is_file() else 1)
    path = ensure()
    print(f"Spark class archive: {path}" if path else "Spark class archive: none (no Java found)")


if __name__ == "__main__":
    main(sys.argv[1:])
