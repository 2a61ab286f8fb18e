"""Many seeds of one scenario, checked for what must never happen: deterministic simulation testing, as
FoundationDB and TigerBeetle test themselves.

Every seed is played with its safety checks tallied as its events are emitted (`safety_tally`: no event file, no
Spark), the seeds spread over one process a core or over Spark. A seed the tally finds broken is played again with
its events written and summarised in Spark (`experiments.summary`, the checks real runs get), which confirms it: a
violation, kept with its summary and the command that replays it. Where the tally finds more than
`CONFIRMED_AT_MOST` seeds broken (0.8's split member moves offsets back in every seed), the first ones are confirmed
and the others kept as the tally found them, each with the command that replays it: a seed replays to the same
events. Asked to keep the clean seeds, every seed is written and summarised. Safety is what at-least-once delivery promises whatever the faults:
no record skipped, no committed offset moved back, and one owner for every partition in the end. Double ownership
and duplicates are the price split brain is expected to cost, measured, not violations."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from experiments.folders.run_record import NO_RECORD
from experiments.statistics import seed_pool
from experiments.statistics.safety_tally import SafetyTally, TalliedCheck
from experiments.summary.check_queries import CheckResult, Verdict
from experiments.summary.checks import CONVERGENCE, LOST_RECORDS, OFFSET_REGRESSIONS
from experiments.summary.output import write_summary
from experiments.summary.run_summary import RunSummary

SAFETY = (LOST_RECORDS.name, OFFSET_REGRESSIONS.name, CONVERGENCE.name)
VIOLATIONS_JSON = "violations.json"
CONFIRMED_AT_MOST = 20   # broken seeds written and summarised in Spark; the rest are listed as the tally found them


@dataclass(frozen=True)
class Violation:
    seed: int
    folder: Path
    broken: tuple[CheckResult, ...]

    def to_json(self, replay: str) -> dict:
        return {"seed": self.seed, "folder": str(self.folder), "replay": replay, "confirmed": True,
                "checks": {check.check: {"count": check.count, "detail": check.detail} for check in self.broken}}


def tallied_json(seed: int, checks: Sequence[TalliedCheck], replay: str) -> dict:
    """A broken seed beyond those confirmed: what the tally found, and how to play it again with its events."""
    return {"seed": seed, "folder": None, "replay": replay, "confirmed": False,
            "checks": {check.check: {"count": check.count, "detail": "found by the tally as the seed played; the "
                                     "replay writes its events and `summarize` confirms it"} for check in checks}}


def violations(seeds: Sequence[int], summaries: Sequence[RunSummary]) -> list[Violation]:
    """The seeds whose runs broke a safety check, in seed order."""
    found = []
    for seed, summary in zip(seeds, summaries, strict=True):
        broken = tuple(check for check in summary.checks if check.check in SAFETY and check.verdict is Verdict.FALSE)
        if broken:
            found.append(Violation(seed, summary.folder.path, broken))
    return found


def keep_violations(root: Path, seeds: Sequence[int], summaries: Sequence[RunSummary], *, replay: str,
                    keep_clean: bool = False, swept: Sequence[int] | None = None,
                    tallied: dict[int, list[TalliedCheck]] | None = None, interrupted: bool = False) -> list[Violation]:
    """Write each violating run's summary and `root/violations.json` (every violation with the command that replays
    its seed: `replay` with "{seed}" replaced); remove the clean seeds' folders unless `keep_clean`. `swept`: every
    seed of the sweep, when `seeds` (the summarised ones) are fewer. `tallied`: broken seeds beyond those confirmed,
    with the checks the tally found broken. `interrupted`: the sweep was stopped before its last seed (`swept` holds
    the seeds it tallied)."""
    swept = seeds if swept is None else swept
    tallied = tallied or {}
    found = violations(seeds, summaries)
    broken = {violation.seed for violation in found}
    for seed, summary in zip(seeds, summaries, strict=True):
        if seed in broken:
            write_summary(summary)
        elif not keep_clean:
            shutil.rmtree(summary.folder.path, ignore_errors=True)
    (root / VIOLATIONS_JSON).write_text(json.dumps(
        {"seeds": len(swept), "first_seed": min(swept), "safety": list(SAFETY),
         "confirmed_at_most": CONFIRMED_AT_MOST, **({"interrupted": True} if interrupted else {}),
         "violations": [violation.to_json(replay.replace("{seed}", str(violation.seed))) for violation in found]
         + [tallied_json(seed, checks, replay.replace("{seed}", str(seed))) for seed, checks in sorted(tallied.items())]},
        indent=2) + "\n")
    return found


@dataclass(frozen=True)
class SafetySeed:
    """One seed of a sweep, as a worker process or a Spark task plays it."""

    source: str                   # the scenario file
    overrides: tuple[str, ...]
    backend: str
    seed: int
    warm_start: bool
    records: bool


def tally_seed(task: SafetySeed) -> tuple[int, list[TalliedCheck]]:
    """One seed played with no event written: its safety checks as the tally judges them."""
    from experiments.scenario import load
    from experiments.sim.play import simulate

    tally = SafetyTally()
    scratch = Path(tempfile.mkdtemp(prefix="safety-"))
    try:
        folder = simulate(load(Path(task.source), overrides=list(task.overrides)), task.backend, scratch / "run",
                          seed=task.seed, warm_start=task.warm_start, records=task.records, events=False,
                          tap=tally.feed)
        return task.seed, tally.safety(folder.record() or NO_RECORD)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def tally_seeds(tasks: Sequence[SafetySeed], *, master: str | None = None, workers: int | None = None,
                done: Callable[[], None] = lambda: None) -> tuple[dict[int, list[TalliedCheck]], bool]:
    """Every seed's tallied checks, spread over `workers` processes (default one a core) or, with `master`, over
    Spark (one task a seed); and whether Ctrl-C stopped it (over processes: the seeds tallied until then)."""
    if master is not None:
        from experiments.summary.session import start_spark

        spark = start_spark(master)
        found = dict(spark.sparkContext.parallelize(list(tasks), max(len(tasks), 1)).map(tally_seed).collect())
        for _ in tasks:
            done()
        return found, False
    found = {}
    with seed_pool.played(tally_seed, tasks, workers=workers) as results:
        try:
            for _, (seed, checks) in results:
                found[seed] = checks
                done()
        except KeyboardInterrupt:
            return found, True
    return found, False
