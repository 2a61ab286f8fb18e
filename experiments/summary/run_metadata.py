"""What a summarised run was (its record, by named fields) and what its summary holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from experiments.run.folder import RunFolder
from experiments.run.runmeta import read_run_meta
from experiments.summary.checker import CheckResult
from rebalance.backends import canonical_name


class NoRunRecord(ValueError):
    """The folder has events but no lock.json: nothing says what the run was."""


@dataclass(frozen=True, kw_only=True)
class RunInfo:
    """What a run was, as its record (lock.json, read through experiments.run.runmeta) says."""

    run_dir: Path
    name: str
    backend: str
    strategy: str
    session_timeout_ms: int | None
    topics: dict[str, int]
    members: int | None     # the group's size when the timeline starts (None: an older record did not say)

    def partitions(self) -> list[str]:
        """Every partition of the run's topics, `topic-p`."""
        return [f"{topic}-{p}" for topic, n in sorted(self.topics.items()) for p in range(n)]


def run_info(run_dir: Path) -> RunInfo:
    """The run's record, by its named fields. Every run the lab makes writes one (the runner and the
    synthetic generator alike), so the summary guesses nothing from events."""
    meta = read_run_meta(run_dir)
    if meta is None:
        raise NoRunRecord(f"{run_dir}: no {RunFolder(run_dir).lock.name}, so nothing says which backend, strategy "
                          "and topics the run had; summarise folders the lab's runner (or its synthetic "
                          "generator) wrote")
    if not meta.topics:
        raise NoRunRecord(f"{RunFolder(run_dir).lock}: names no topics")
    return RunInfo(run_dir=Path(run_dir), name=meta.name or Path(run_dir).name,
                   backend=canonical_name(meta.backend or "unknown"), strategy=meta.strategy or "unknown",
                   session_timeout_ms=meta.session_timeout_ms, topics=dict(meta.topics), members=meta.members)


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
