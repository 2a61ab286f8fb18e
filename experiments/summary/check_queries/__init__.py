"""Jepsen-style checks over runs' events, as PySpark DataFrame queries grouped by run.

Every check answers one question about a whole run and returns, per run, a `CheckResult`: a
verdict (true: nothing found, false: found, unknown: the log cannot tell) and evidence rows
saying where and when. `CHECKS` lists them once: name, the event types a run needs for the
check to tell anything, and the function. The inputs (`CheckInputs`) are the frames
`experiments.summary` derives from the events, each with a `run` column (times `t` in seconds
since the run's first event):

- `segments`: per partition, the spans between ownership changes with the set of owners
  (tp, start, end, owners);
- `never` processed records (with `unseen` ones flagged), `repeats` (offset ranges consumed
  again) and `deliveries` (one row per processed record with its latency: from its produce time to the end
  of its handling where the run reports it, `records_processed`, else to its delivery by poll()), all
  derived from offset ranges;
- `commits` (one row per partition per offsets_committed) and the `control` events.

The checks live by what they look at: `group` (ownership and convergence), `records` (records and
offsets), `servers` (the servers as witnesses); `model` holds what they share. A check is planned, then
read: it adds its queries to a `Batch` (experiments.summary.spark_batch) and returns a function that builds
its results once the batch is collected. The batch runs the queries of every check while later ones are
still being planned, and their number does not depend on the number of runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from experiments.summary import checks
from experiments.summary.check_queries.group import (
    awaited_from,
    bound_source,
    consumption_outside_ownership,
    convergence,
    convergence_detail,
    double_ownership,
    warmup,
)
from experiments.summary.check_queries.model import CheckConfig, CheckInputs, CheckResult, Reader, Verdict
from experiments.summary.check_queries.records import (
    duplicates,
    fenced_commits,
    lost_records,
    offset_regressions,
    slow_records,
)
from experiments.summary.check_queries.servers import (
    server_stall,
    server_witness,
    stall_result,
    witness_result,
)
from experiments.summary.spark_batch import Batch
from rebalance import events as ev

__all__ = ["CHECKS", "Check", "CheckConfig", "CheckInputs", "CheckResult", "Verdict", "awaited_from", "bound_source",
           "convergence_detail", "offset_regressions", "plan_checks", "stall_result", "witness_result"]


@dataclass(frozen=True, kw_only=True)
class Check:
    """One check's Spark side: its row of `experiments.summary.checks` (name, question, words) and its queries.
    A run without any of the event types it `needs` gets `unknown` with `missing` as detail."""

    spec: checks.CheckSpec
    needs: tuple[str, ...]
    missing: str
    plan: Callable[[CheckInputs, CheckConfig, Batch], Reader]

    @property
    def name(self) -> str:
        return self.spec.name


_OWNERSHIP = (ev.PARTITIONS_ASSIGNED, ev.REBALANCE_COMPLETED)
CHECKS: tuple[Check, ...] = (
    Check(spec=checks.WARMUP, needs=(ev.PHASE,), missing="no phase events (the runner did not mark its phases)",
          plan=warmup),
    Check(spec=checks.DOUBLE_OWNERSHIP, needs=_OWNERSHIP, missing="no ownership events", plan=double_ownership),
    Check(spec=checks.CONSUMED_WITHOUT_OWNERSHIP, needs=(ev.RECORDS_CONSUMED,), missing="no records consumed",
          plan=consumption_outside_ownership),
    Check(spec=checks.LOST_RECORDS, needs=(ev.RECORD_PRODUCED, ev.RECORDS_PRODUCED),
          missing="no records_produced (or record_produced) events", plan=lost_records),
    Check(spec=checks.DUPLICATES, needs=(ev.RECORDS_CONSUMED,), missing="no records consumed", plan=duplicates),
    Check(spec=checks.OFFSET_REGRESSIONS, needs=(ev.OFFSETS_COMMITTED,), missing="no offsets_committed events",
          plan=offset_regressions),
    Check(spec=checks.SLOW_RECORDS, needs=(), missing="", plan=slow_records),
    Check(spec=checks.CONVERGENCE, needs=_OWNERSHIP, missing="no partitions or no ownership events", plan=convergence),
    Check(spec=checks.FENCED_COMMITS, needs=(), missing="", plan=fenced_commits),
    Check(spec=checks.SERVER_WITNESS, needs=(ev.SERVER_COUNTERS,), missing="no server samples (the servers' counters "
          "were not recorded)", plan=server_witness),
    Check(spec=checks.SERVER_STALL, needs=(ev.BROKER_LIVENESS,), missing="no broker liveness events (the brokers did not "
          "sample their own liveness: a log from before they did)", plan=server_stall),
)


def plan_checks(inputs: CheckInputs, config: CheckConfig, batch: Batch) -> Callable[[], dict[int, list[CheckResult]]]:
    """Every check of `CHECKS` over every run, planned into `batch`; the returned function gives each
    run's results in registry order once the batch is collected."""
    readers = [(check, check.plan(inputs, config, batch)) for check in CHECKS]

    def read() -> dict[int, list[CheckResult]]:
        results: dict[int, list[CheckResult]] = {run: [] for run in inputs.runs}
        for check, reader in readers:
            found = reader()
            for run in inputs.runs:
                counts = inputs.counts[run]
                if check.needs and not any(counts.get(kind) for kind in check.needs):
                    results[run].append(CheckResult(check.name, Verdict.UNKNOWN, 0, check.missing))
                else:
                    results[run].append(found[run])
        return results

    return read
