"""A comparison: one scenario on each of its backends in turn, every run with the identical schedule (resolved
once, so each backend meets the same faults at the same times), into RUN_DIR/<backend>, and the comparison's
record beside them (experiments.folders.comparison_folder). Every backend's member settings are checked before
the first run starts, and an interrupted run ends the comparison."""

from __future__ import annotations

from pathlib import Path

from experiments.folders.comparison_folder import ComparisonFolder
from experiments.run.member_configs import check_member_settings
from experiments.run.runner import RunOptions, RunResult, run
from experiments.scenario import Scenario, resolve
from rebalance.backends import canonical_name, profile


def compare(scenario: Scenario, run_dir: Path, *, zk_provider: str = "auto", progress: bool = True,
            backends: tuple[str, ...] | None = None) -> list[RunResult]:
    """Each backend, one after the other, with the identical schedule, into RUN_DIR/<backend>."""
    schedule = resolve(scenario)
    backends = tuple(canonical_name(backend) for backend in backends or scenario.backends)
    for backend in backends:
        check_member_settings(scenario, profile(backend))   # all checked before any starts
    results = []
    folder = ComparisonFolder(run_dir)
    for backend in backends:
        result = run(scenario, RunOptions(backend=backend, run_dir=folder.run(backend).path, zk_provider=zk_provider,
                                          progress=progress), schedule=schedule)
        results.append(result)
        if result.status == "interrupted":
            break
    folder.write_record({
        "scenario": scenario.name, "seed": scenario.seed, "schedule": schedule.to_json(),
        "runs": [{"backend": result.run_dir.name, "status": result.status, "reason": result.reason}
                 for result in results],
    })
    return results
