"""The campaign folder's manifest: what was asked (the campaign file), on what (commit, packages, machine),
and every run's seed, scenario hash, status, start and end. One writer (the campaign process), rewritten
atomically after every change, so a SIGKILL leaves the last consistent state on disk.

    DIR/manifest.json   this record
    DIR/campaign.toml   the campaign file as it was run
    DIR/runs/<run>/     one run folder each (events/, lock.json, summary/)
    DIR/logs/<run>.log  each run's own output
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from experiments.campaign.model import Campaign, PlannedRun
from experiments.folders.campaign_folder import CampaignFolder
from experiments.run.provenance import git_commit, versions
from rebalance.backends import canonical_name

PENDING, RUNNING, COMPLETED, FAILED, INTERRUPTED = "pending", "running", "completed", "failed", "interrupted"
# A run that completed but whose machine did not carry it, every replacement too (experiments.run.conditions):
# kept on disk, left out of the statistics.
INVALID = "invalid"


@dataclass(kw_only=True)
class RunEntry:
    run: str
    cell: str
    scenario: str
    scenario_sha256: str
    backend: str
    strategy: str
    sweep: dict[str, object]
    overrides: list[str]
    repetition: int
    seed: int
    status: str = PENDING
    reason: str = ""
    started_ms: int | None = None
    ended_ms: int | None = None
    git_commit: str | None = None     # the code that made this run (a resumed folder may mix commits)
    parallel: int | None = None       # runs at once when it ran: above 1, its timings are stretched
    conditions: str | None = None     # ok | suspect | invalid: whether the machine carried it
    conditions_reason: str = ""
    replaced: list[dict] = field(default_factory=list)   # earlier attempts judged invalid: reason, folder

    @property
    def seconds(self) -> float | None:
        if self.started_ms is None or self.ended_ms is None:
            return None
        return (self.ended_ms - self.started_ms) / 1000


@dataclass(kw_only=True)
class Manifest:
    campaign: dict
    machine: dict
    runs: dict[str, RunEntry] = field(default_factory=dict)

    @classmethod
    def new(cls, campaign: Campaign) -> Manifest:
        manifest = cls(campaign={"name": campaign.name, "source": campaign.source, "sha256": campaign.sha256,
                                 "repetitions": campaign.repetitions, "seed": campaign.seed,
                                 "cells": len(campaign.cells)},
                       machine=machine_facts())
        for planned in campaign.plan():
            manifest.runs[planned.name] = entry_for(planned)
        return manifest

    def write(self, folder: Path) -> None:
        path = CampaignFolder(folder).manifest
        temporary = path.with_suffix(".tmp")
        data = {"campaign": self.campaign, "machine": self.machine,
                "runs": [asdict(entry) for entry in self.runs.values()]}
        temporary.write_text(json.dumps(data, indent=2, default=str) + "\n")
        temporary.replace(path)

    @classmethod
    def read(cls, folder: Path) -> Manifest:
        data = json.loads(CampaignFolder(folder).manifest.read_text())
        # an older folder's backend may be an earlier name of one (`modern`): read as its backend's name
        runs = {row["run"]: RunEntry(**{**row, "backend": canonical_name(row["backend"])}) for row in data["runs"]}
        return cls(campaign=data["campaign"], machine=data["machine"], runs=runs)


def entry_for(planned: PlannedRun) -> RunEntry:
    cell = planned.cell
    return RunEntry(run=planned.name, cell=cell.key, scenario=cell.scenario,
                    scenario_sha256=hashlib.sha256(cell.scenario_path.read_bytes()).hexdigest(),
                    backend=cell.backend, strategy=cell.strategy, sweep=dict(cell.sweep),
                    overrides=cell.overrides(planned.seed), repetition=planned.repetition, seed=planned.seed)


def is_campaign_dir(path: Path) -> bool:
    return CampaignFolder(path).is_campaign()


def machine_facts() -> dict:
    return {"git_commit": git_commit(), "versions": versions(), "cores": os.cpu_count(),
            "memory_bytes": _memory_bytes(), "platform": platform.platform(), "created_ms": int(time.time() * 1000)}


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None
