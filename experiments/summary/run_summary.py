"""One summarised run: its record, its checks, its tables and its facts, and how run.json holds them.

The facts are what the summary learnt beside its tables (events, duration, the convergence window) and the
check settings it judged with, so a later reader never guesses the latency limit a run was judged by."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import pandas as pd

from experiments.folders.run_folder import RunFolder
from experiments.folders.run_record import RunRecord
from experiments.summary.check_queries import CheckConfig, CheckResult


@dataclass(frozen=True, kw_only=True)
class SummaryFacts:
    """What one Spark pass learnt about a run beside its tables."""

    checks: CheckConfig = field(default_factory=CheckConfig)   # the settings the run was judged by
    events: int = 0
    events_by_type: dict[str, int] = field(default_factory=dict)
    produced_records: int = 0
    unreadable_lines: int = 0
    duration_s: float = 0.0
    t0_ns: int | None = None
    t0_ms: int | None = None
    partitions: int = 0
    convergence_since_t: float | None = None   # convergence is awaited from here (the last fault or join) ...
    convergence_bound_s: float | None = None   # ... for at most this long
    coordinator_gap_s: float | None = None
    memory_slope_mb_per_min: float | None = None
    memory_steepest_process: str | None = None

    def __post_init__(self) -> None:
        # Spark and pandas hand back numpy numbers: kept as Python's, run.json holds them as numbers
        for name, kind in _NUMBERS.items():
            value = getattr(self, name)
            if value is not None and not isinstance(value, kind):
                object.__setattr__(self, name, kind(value))
        object.__setattr__(self, "events_by_type", {str(k): int(v) for k, v in self.events_by_type.items()})

    @property
    def latency_limit_ms(self) -> int:
        return self.checks.latency_limit_ms

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, document: dict) -> SummaryFacts:
        """Facts as run.json holds them; one written before the check settings were kept says only its
        latency limit, and keys it no longer knows are left out."""
        known = {f.name for f in fields(cls)} - {"checks"}
        checks = document.get("checks")
        if isinstance(checks, dict):
            config = CheckConfig(**{k: v for k, v in checks.items() if k in {f.name for f in fields(CheckConfig)}})
        else:
            config = CheckConfig(latency_limit_ms=int(document.get("latency_limit_ms") or CheckConfig().latency_limit_ms))
        return cls(checks=config, **{key: value for key, value in document.items() if key in known})


_NUMBERS = {"events": int, "produced_records": int, "unreadable_lines": int, "duration_s": float, "t0_ns": int,
            "t0_ms": int, "partitions": int, "convergence_since_t": float, "convergence_bound_s": float,
            "coordinator_gap_s": float, "memory_slope_mb_per_min": float}


@dataclass
class RunSummary:
    folder: RunFolder
    record: RunRecord
    checks: list[CheckResult]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    facts: SummaryFacts = field(default_factory=SummaryFacts)

    def verdicts(self) -> pd.DataFrame:
        """One row per check: the checker's verdict, count and detail, and the same in words (`result`,
        e.g. `VIOLATED (3)`, and its one-line `meaning`; experiments.summary.verdict_words)."""
        from experiments.summary.verdict_words import read_result

        rows = []
        for check in self.checks:
            reading = read_result(check)
            rows.append({"run": self.record.name, "backend": self.record.backend, "check": check.check,
                         "verdict": check.verdict.value, "count": check.count, "detail": check.detail,
                         "result": reading.label, "meaning": reading.meaning})
        return pd.DataFrame(rows)


def write_summary_record(summary: RunSummary) -> Path:
    """summary/run.json, written last: the record as summarised and the facts, for the report to read back
    without Spark."""
    path = summary.folder.summary_record
    path.write_text(json.dumps({"record": summary.record.to_json(), "facts": summary.facts.to_json()},
                               indent=2, default=str) + "\n")
    return path


def read_summary_record(folder: RunFolder) -> tuple[RunRecord, SummaryFacts]:
    """summary/run.json back as its record and facts. One written before the record was kept whole holds
    the run at a glance under `info`, which the record's reader takes as it takes an old lock.json."""
    document = json.loads(folder.summary_record.read_text())
    if not isinstance(document, dict):
        raise ValueError(f"{folder.summary_record}: not a JSON object")
    record = document.get("record")
    if record is None:   # the run at a glance, as run.json held it before
        known = {f.name for f in fields(RunRecord)}
        record = {key: value for key, value in (document.get("info") or {}).items() if key in known}
    try:
        return RunRecord.from_json(record), SummaryFacts.from_json(document.get("facts") or {})
    except (TypeError, ValueError) as error:
        raise ValueError(f"{folder.summary_record}: {error}") from None
