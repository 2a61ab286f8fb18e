"""What a run's lock.json records about where it ran: the commit, the software versions, and values made JSON-ready."""

from __future__ import annotations

import contextlib
import functools
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def versions() -> dict[str, str]:
    """The versions of Python and of the packages a run uses, as this process first read them: the packages it
    imported then are the ones it runs, whatever is installed later."""
    return dict(_versions())


@functools.cache
def _versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for dist in ("rebalance-lab", "kazoo", "kafka-python", "confluent-kafka", "pyspark"):
        with contextlib.suppress(PackageNotFoundError):
            found[dist] = version(dist)
    return found


def git_commit() -> str | None:
    """The checkout's commit (HEAD) now, None outside a git checkout. A campaign asks at each run's start, whose
    process runs the code checked out then."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, text=True,
                             capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


@functools.cache
def process_commit() -> str | None:
    """The checkout's commit when this process first asked: the code a simulation plays in this process. Asked once:
    a sweep's thousand seeds start one `git`, not a thousand."""
    return git_commit()


# What a run never executes: a change there leaves a campaign's parts on the same code.
NOT_RUN = tuple(f":(top,exclude){path}" for path in ("docs", "tests", "benchmarks", "labs", "*.md"))


def same_code(first: str, second: str, repository: Path | None = None) -> bool:
    """Whether two commits hold the same code: they differ at most in what no run executes (the docs, where
    a campaign's data and pages are committed between its parts, the tests, the benchmarks, the labs and
    Markdown files). False when either commit is unknown to the repository (this checkout's by default)."""
    if first == second:
        return True
    try:
        out = subprocess.run(["git", "diff", "--quiet", first, second, "--", ":(top)", *NOT_RUN],
                             cwd=repository or Path(__file__).resolve().parent, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0


def jsonable(value: object) -> object:
    """Dictionaries with string keys, lists for tuples, and enums by their value."""
    if isinstance(value, dict):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    if hasattr(value, "value") and not isinstance(value, (int, float, str)):
        return value.value
    return value
