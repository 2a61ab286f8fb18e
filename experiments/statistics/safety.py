"""Many seeds of one scenario, checked for what must never happen: deterministic simulation testing, as
FoundationDB and TigerBeetle test themselves.

Every seed's run is summarised in one Spark pass (`experiments.summary`, the checks real runs get). A seed whose run
breaks a safety check is a violation, kept with its summary and the command that replays it; the other seeds'
folders are removed unless asked to be kept. Safety is what at-least-once delivery promises whatever the faults:
no record skipped, no committed offset moved back, and one owner for every partition in the end. Double ownership
and duplicates are the price split brain is expected to cost, measured, not violations."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from experiments.summary.check_queries import CheckResult, Verdict
from experiments.summary.checks import CONVERGENCE, LOST_RECORDS, OFFSET_REGRESSIONS
from experiments.summary.output import write_summary
from experiments.summary.run_summary import RunSummary

SAFETY = (LOST_RECORDS.name, OFFSET_REGRESSIONS.name, CONVERGENCE.name)
VIOLATIONS_JSON = "violations.json"


@dataclass(frozen=True)
class Violation:
    seed: int
    folder: Path
    broken: tuple[CheckResult, ...]

    def to_json(self, replay: str) -> dict:
        return {"seed": self.seed, "folder": str(self.folder), "replay": replay,
                "checks": {check.check: {"count": check.count, "detail": check.detail} for check in self.broken}}


def violations(seeds: Sequence[int], summaries: Sequence[RunSummary]) -> list[Violation]:
    """The seeds whose runs broke a safety check, in seed order."""
    found = []
    for seed, summary in zip(seeds, summaries, strict=True):
        broken = tuple(check for check in summary.checks if check.check in SAFETY and check.verdict is Verdict.FALSE)
        if broken:
            found.append(Violation(seed, summary.folder.path, broken))
    return found


def keep_violations(root: Path, seeds: Sequence[int], summaries: Sequence[RunSummary], *, replay: str,
                    keep_clean: bool = False) -> list[Violation]:
    """Write each violating run's summary and `root/violations.json` (every violation with the command that replays
    its seed: `replay` with "{seed}" replaced); remove the clean seeds' folders unless `keep_clean`."""
    found = violations(seeds, summaries)
    broken = {violation.seed for violation in found}
    for seed, summary in zip(seeds, summaries, strict=True):
        if seed in broken:
            write_summary(summary)
        elif not keep_clean:
            shutil.rmtree(summary.folder.path, ignore_errors=True)
    (root / VIOLATIONS_JSON).write_text(json.dumps(
        {"seeds": len(seeds), "first_seed": min(seeds), "safety": list(SAFETY),
         "violations": [violation.to_json(replay.replace("{seed}", str(violation.seed))) for violation in found]}, indent=2) + "\n")
    return found
