"""The run's conditions (experiments.run.conditions) as the first of its checks.

The runner judges a run's conditions when the run ends and writes conditions.json; a run from before it did,
or one summarised with another latency limit, is judged here from its folder, by the same code. The result
reads ok, suspect or invalid (not the other checks' true / false), with its reasons as the detail.
"""

from __future__ import annotations

import json
from pathlib import Path

from experiments.folders.run_folder import RunFolder
from experiments.run.conditions import Conditions, Grade, judge
from experiments.run.run_evidence import gather
from experiments.summary import checks
from experiments.summary.check_queries import CheckResult


def run_conditions(run_dir: Path, *, latency_limit_ms: int) -> Conditions:
    path = RunFolder(run_dir).conditions
    if path.exists():
        try:
            recorded = Conditions.from_json(json.loads(path.read_text()))
        except (ValueError, KeyError, TypeError):
            recorded = None    # a file from a later version, or damaged: judge again
        if recorded is not None and recorded.figures.get("latency_limit_ms") == latency_limit_ms:
            return recorded
    return judge(gather(run_dir, latency_limit_ms=latency_limit_ms))


def conditions_check(conditions: Conditions) -> CheckResult:
    count = sum(finding.grade is not Grade.OK for finding in conditions.findings)
    return CheckResult(checks.CONDITIONS.name, conditions.grade, count, conditions.reason())
