"""What every check takes and gives: the inputs (frames grouped by run), the configuration, the
verdicts and a run's result."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

import pandas as pd
from pyspark.sql import DataFrame

from experiments.scenario.model import LATENCY_LIMIT_MS

Counts = Mapping[str, int]   # events per type in a run

# Commit errors that mean "you are not (or no longer) a member of this generation".
# Refusals of a commit from a member the group has moved past: classic generations, KIP-848 member epochs.
class Verdict(StrEnum):
    TRUE = "true"        # checked, nothing found
    FALSE = "false"      # the anomaly happened: see the evidence
    UNKNOWN = "unknown"  # the log lacks what the check needs


@dataclass(frozen=True, kw_only=True)
class CheckConfig:
    latency_limit_ms: int = LATENCY_LIMIT_MS   # seed 002 counts a record slower than this as lost; here: over the limit
    convergence_bound_s: float | None = None  # default: 2 x session timeout + 5 s (Kafka's system tests)
    overlap_tolerance_s: float = 0.0       # double ownership shorter than this is ignored
    evidence_rows: int = 1000              # evidence kept per check (the count is always exact)
    # Server and members disagree on a window between two server samples when they differ by more
    # than the larger of these (docs/analysis.md, "The servers as witnesses").
    witness_tolerance_requests: int = 10
    witness_tolerance_fraction: float = 0.25
    stall_threshold_s: float = 2.0         # a broker answering nothing this long, requests held up: a stall

    def convergence_bound_for(self, session_timeout_ms: int) -> float:
        """How long after the last fault or join every partition must have one owner: the configured bound,
        else twice the session timeout and 5 s (Kafka's system tests allow as much for a group to settle)."""
        if self.convergence_bound_s is not None:
            return float(self.convergence_bound_s)
        return 2 * session_timeout_ms / 1000 + 5


@dataclass(frozen=True)
class CheckResult:
    check: str
    verdict: Verdict
    count: int                             # how many anomalies (windows, records, commits...)
    detail: str
    evidence: pd.DataFrame = field(default_factory=pd.DataFrame, compare=False)


@dataclass(frozen=True, kw_only=True)
class CheckInputs:
    """What the checks read, for every run of one pass. `context` has one row per run: partitions,
    since_t and bound_s (the convergence window), run_end."""

    runs: list[int]
    counts: Mapping[int, Counts]
    control: DataFrame
    commits: DataFrame
    consumed: DataFrame
    handled: DataFrame              # batches at the end of their handling (offset_ranges.handled_batches)
    segments: DataFrame
    never: DataFrame
    repeats: DataFrame
    deliveries: DataFrame
    context: DataFrame


Results = dict[int, CheckResult]
Reader = Callable[[], Results]   # a planned check's results, once its batch is collected


def result_of(name: str, count: int, found: str, clean: str, evidence: pd.DataFrame) -> CheckResult:
    return CheckResult(name, Verdict.FALSE if count else Verdict.TRUE, count, found if count else clean, evidence)

