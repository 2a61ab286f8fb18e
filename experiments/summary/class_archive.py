"""A class-data sharing archive for the summary's JVM: the classes a summary loads, mapped at start.

A Spark session loads some twenty thousand classes from the jars of the pyspark package, which took
about 2 of the 4 seconds of a session's start on 2 cores, and more again in its first query. The JVM
can record the classes an application loaded into an archive (`-XX:ArchiveClassesAtExit`) and map
them at the next start (`-XX:SharedArchiveFile`). `./lab setup` and the first `./lab test` record one
by summarising a small synthetic run (the demo does not wait for it: recording costs more than it
saves there); `start_spark` uses it when it exists. The archive is only valid for the same JVM and
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
from pathlib import Path

import pyspark

# The JVM's class-sharing messages (a stale archive refused, classes it cannot archive) go to stdout.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


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
    return f"-XX:SharedArchiveFile={path} {QUIET}"


def ensure() -> Path | None:
    """Record the archive unless it exists; its JVM writes it when the recording process exits."""
    path = archive_path()
    if path is None or path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.partial")
    try:
        subprocess.run([sys.executable, "-m", "experiments.summary.class_archive_recorder", str(partial)], check=True)
        if partial.is_file() and partial.stat().st_size:
            partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)
    return path if path.is_file() else None


def main(argv: list[str]) -> None:
    if argv[:1] == ["--check"]:
        path = archive_path()
        sys.exit(0 if path is None or path.is_file() else 1)
    path = ensure()
    print(f"Spark class archive: {path}" if path else "Spark class archive: none (no Java found)")


if __name__ == "__main__":
    main(sys.argv[1:])
