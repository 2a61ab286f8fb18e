"""Which runs are summarised: their metadata (lock.json) and what a summary of one holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from experiments.run.runmeta import read_run_meta
from experiments.summary.checker import CheckResult
from rebalance.backends import canonical_name


def read_lock(run_dir: Path) -> dict:
    """The run's lock.json (the runner's record of the resolved scenario), or {} when it wrote none.
    The summary reads run metadata through this function only."""
    meta = read_run_meta(run_dir)
    return {} if meta is None else meta.to_json()


@dataclass(frozen=True, kw_only=True)
class RunInfo:
    """What a run was: from lock.json when the runner wrote one, else derived from its events."""

    run_dir: Path
    name: str
    backend: str
    strategy: str
    session_timeout_ms: int | None
    topics: dict[str, int]
    members: int | None


def run_info(run_dir: Path, lock: dict, *, usual_backend: str | None, usual_strategy: str | None) -> RunInfo:
    """lock.json's word first; the backend and strategy most events name otherwise. Without lock.json the
    group size is left open (the summary fills in the size the group spent most time at)."""
    session = lock.get("session_timeout_ms") or lock.get("session_timeout")
    return RunInfo(
        run_dir=run_dir,
        name=str(lock.get("name") or run_dir.name),
        backend=canonical_name(str(lock.get("backend") or usual_backend or "unknown")),   # older events: `modern`
        strategy=str(lock.get("strategy") or usual_strategy or "unknown"),
        session_timeout_ms=int(session) if session else None,
        topics=_topics(lock.get("topics")),
        members=_member_count(lock.get("members")),
    )


def _topics(value: object) -> dict[str, int]:
    """lock.json topics as {name: partitions}, or a list of {name, partitions} tables."""
    if isinstance(value, dict):
        return {str(name): int(n if not isinstance(n, dict) else n.get("partitions", 0)) for name, n in value.items()}
    if isinstance(value, list):
        return {str(t["name"]): int(t["partitions"]) for t in value if isinstance(t, dict) and "name" in t}
    return {}


def _member_count(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, (list, dict)):
        return len(value)
    return None


def run_columns(index: int, lock: dict) -> dict:
    """The columns that tell runs apart in the frames of one pass: `run` (its position in the pass) and
    what lock.json says of it; `campaign` and `repetition` stay empty until campaigns record them."""
    return {"run": index, "backend": lock.get("backend"), "strategy": lock.get("strategy"),
            "n": _member_count(lock.get("members")), "campaign": None, "repetition": None}


@dataclass
class RunSummary:
    info: RunInfo
    checks: list[CheckResult]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    facts: dict = field(default_factory=dict)

    def verdicts(self) -> pd.DataFrame:
        """One row per check: the checker's verdict, count and detail, and the same in words (`result`,
        e.g. `VIOLATED (3)`, and its one-line `meaning`; experiments.summary.verdicts)."""
        from experiments.summary.verdicts import read_result

        rows = []
        for check in self.checks:
            reading = read_result(check)
            rows.append({"run": self.info.name, "backend": self.info.backend, "check": check.check,
                         "verdict": check.verdict.value, "count": check.count, "detail": check.detail,
                         "result": reading.label, "meaning": reading.meaning})
        return pd.DataFrame(rows)
