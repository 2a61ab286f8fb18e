"""What a run's lock.json records about where it ran: the commit, the software versions, and values made JSON-ready."""

from __future__ import annotations

import contextlib
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for dist in ("rebalance-lab", "kazoo", "kafka-python", "confluent-kafka", "pyspark"):
        with contextlib.suppress(PackageNotFoundError):
            found[dist] = version(dist)
    return found


def git_commit() -> str | None:
    """The checkout's commit (HEAD), None outside a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, text=True,
                             capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def jsonable(value: object) -> object:
    """Dictionaries with string keys, lists for tuples, and enums by their value."""
    if isinstance(value, dict):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    if hasattr(value, "value") and not isinstance(value, (int, float, str)):
        return value.value
    return value
