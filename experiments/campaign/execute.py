"""Run a campaign: every planned run not yet completed, K at a time, each in a runner process of its own.

Resumable: `campaign FILE --out DIR` again skips the runs the manifest records as completed (and whose
lock.json agrees), and with `--data DATA` those a results-data folder holds from earlier parts (on other
machines, say); a run that was going when the campaign stopped is moved aside to DIR/incomplete/ (its
events are kept) and run again. Each runner process dies with the campaign (parent-death signal), and
the runner's own reaper then removes its members, brokers, proxies and ZooKeeper, so a SIGKILLed campaign
leaves nothing running. SIGINT or SIGTERM stop the campaign cleanly: running runs get SIGTERM and tear
down, and are recorded as interrupted.

A run whose conditions are invalid (experiments.run.conditions: the machine did not carry it) is moved to
DIR/replaced/ and made again, at most MAX_REPLACEMENTS times; the manifest keeps each replaced attempt's reason.
One still invalid after that is recorded as `invalid` and left out of the statistics; a suspect one is kept,
and marked. A campaign that measures such a condition on purpose (`invalid_runs = "keep"`) keeps and marks them.

Parallel runs (`parallel` > 1) each start their own ZooKeeper, brokers (free ports) and chroot, so they
do not share state; on a 2-core machine they do share the CPU, which stretches timings (stable-after,
latencies, rebalance time) but not request or notification counts or anomaly counts.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from experiments.campaign.manifest import (
    COMPLETED,
    FAILED,
    INTERRUPTED,
    INVALID,
    PENDING,
    RUNNING,
    Manifest,
    RunEntry,
    entry_for,
    git_commit,
    is_campaign_dir,
)
from experiments.campaign.model import Campaign, PlannedRun
from experiments.faults.process import _die_with_parent
from experiments.folders.campaign_folder import MANIFEST_FILE, CampaignFolder
from experiments.folders.run_folder import RunFolder
from experiments.run.provenance import same_code

Say = Callable[[str], None]
MAX_REPLACEMENTS = 2    # an invalid run is made again at most this often: a machine that cannot carry a cell
                        # twice more will not a third time, and the campaign should say so rather than loop


class CampaignMismatch(ValueError):
    """The output folder holds another campaign (or another version of this one)."""


@dataclass
class Outcome:
    folder: Path
    manifest: Manifest
    interrupted: bool

    @property
    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for entry in self.manifest.runs.values():
            counts[entry.status] = counts.get(entry.status, 0) + 1
        return counts


def completed_run_dirs(folder: Path) -> list[Path]:
    manifest = Manifest.read(folder)
    return [CampaignFolder(folder).run(name).path for name, entry in manifest.runs.items() if entry.status == COMPLETED]


def open_folder(campaign: Campaign, folder: Path, *, allow_mixed_commits: bool = False) -> Manifest:
    """A new campaign folder, or the manifest of the same campaign run there before. One campaign, one
    code: a folder whose completed runs were made by other code (commits that differ outside docs/) is
    refused unless `allow_mixed_commits` (the pages then say which runs came from which commit)."""
    if is_campaign_dir(folder):
        manifest = Manifest.read(folder)
        if manifest.campaign["sha256"] != campaign.sha256:
            raise CampaignMismatch(f"{folder} holds campaign {manifest.campaign['name']!r} from a different "
                                   "campaign file; resume only with the same file, or choose another --out")
        commit = git_commit()
        others = sorted({entry.git_commit for entry in manifest.runs.values()
                         if entry.status == COMPLETED and entry.git_commit
                         and not (commit and same_code(entry.git_commit, commit))})
        if others and not allow_mixed_commits:
            raise CampaignMismatch(f"{folder} holds runs made by commit {', '.join(c[:12] for c in others)}, and "
                                   f"this is {(commit or '?')[:12]}: a campaign's runs come from one commit. "
                                   "Start a new --out, or pass --allow-mixed-commits (the pages will say so)")
        for entry in manifest.runs.values():
            if entry.status == COMPLETED and not CampaignFolder(folder).run(entry.run).is_completed():
                entry.status = PENDING   # the manifest is ahead of a run folder that was removed
        # The same file can plan more runs than before: a scenario without a `backends` list runs on every
        # registered backend, so a backend added since gives the folder new cells, run on the next resume.
        for planned in campaign.plan():
            if planned.name not in manifest.runs:
                manifest.runs[planned.name] = entry_for(planned)
        manifest.campaign["cells"] = len(campaign.cells)
        return manifest
    if folder.exists() and any(folder.iterdir()):
        raise CampaignMismatch(f"{folder} exists and is not a campaign folder (no {MANIFEST_FILE}); "
                               "choose another --out")
    folder.mkdir(parents=True, exist_ok=True)
    CampaignFolder(folder).campaign_file.write_text(campaign.text)
    manifest = Manifest.new(campaign)
    manifest.write(folder)
    return manifest


class _Executor:
    def __init__(self, campaign: Campaign, folder: Path, manifest: Manifest, *, zk_provider: str, say: Say,
                 recorded: frozenset[str] = frozenset()) -> None:
        self.campaign, self.folder, self.manifest = campaign, folder, manifest
        self.zk_provider, self.say, self.recorded = zk_provider, say, recorded
        self.lock = threading.Lock()
        self.children: dict[str, subprocess.Popen] = {}
        self.stopping = threading.Event()
        self.durations: list[float] = []
        self.total = len(set(manifest.runs) - recorded)

    def todo(self) -> list[PlannedRun]:
        return [planned for planned in self.campaign.plan()
                if self.manifest.runs[planned.name].status != COMPLETED and planned.name not in self.recorded]

    def run_one(self, planned: PlannedRun) -> None:
        """The run, and again while its conditions are invalid (at most MAX_REPLACEMENTS more times)."""
        while self.run_attempt(planned):
            pass

    def run_attempt(self, planned: PlannedRun) -> bool:
        """One attempt at a planned run; True when it was invalid and should be made again."""
        if self.stopping.is_set():
            return False
        entry = self.manifest.runs[planned.name]
        target = CampaignFolder(self.folder).run(planned.name).path
        if target.exists():
            aside = CampaignFolder(self.folder).set_aside(planned.name, time.strftime('%Y%m%d-%H%M%S'))
            aside.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(target), str(aside))
        log = CampaignFolder(self.folder).log(planned.name)
        log.parent.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "experiments.cli.app", "run", str(planned.cell.scenario_path),
                "--backend", planned.cell.backend, "--out", str(target), "--no-progress",
                "--zk-provider", self.zk_provider]
        for override in entry.overrides:
            argv += ["--set", override]
        with self.lock:
            entry.status, entry.reason = RUNNING, ""
            entry.started_ms, entry.ended_ms = int(time.time() * 1000), None
            entry.git_commit = git_commit()   # at each run's start: code changed mid-campaign shows
            entry.parallel = self.parallel
            self.manifest.write(self.folder)
        with open(log, "ab") as output:
            child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                                     preexec_fn=_die_with_parent)
            with self.lock:
                self.children[planned.name] = child
            code = child.wait()
        with self.lock:
            self.children.pop(planned.name, None)
            entry.ended_ms = int(time.time() * 1000)
            again = False
            if code == 0 and RunFolder(target).is_completed():
                entry.status = COMPLETED
                self.durations.append(entry.seconds or 0.0)
                entry.conditions, entry.conditions_reason = _conditions(target)
                if entry.conditions == "invalid" and self.campaign.invalid_runs == "replace":
                    again = len(entry.replaced) < MAX_REPLACEMENTS and not self.stopping.is_set()
                    if again:
                        self._replace(entry, target)
                    else:
                        entry.status = INVALID
            elif self.stopping.is_set() or code in (130, -signal.SIGTERM, -signal.SIGINT):
                entry.status, entry.reason = INTERRUPTED, "the campaign was stopped"
            else:
                entry.status, entry.reason = FAILED, _failure_reason(target, log, code)
            self.manifest.write(self.folder)
            self.say(self.progress_line(entry))
            return again

    def _replace(self, entry: RunEntry, target: Path) -> None:
        """Keep an invalid run's folder aside, with its reason in the manifest, before it is made again."""
        aside = CampaignFolder(self.folder).replaced(entry.run, len(entry.replaced) + 1)
        aside.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(target), str(aside))
        entry.replaced.append({"reason": entry.conditions_reason, "folder": str(aside.relative_to(self.folder)),
                               "ended_ms": entry.ended_ms})
        entry.status, entry.reason = PENDING, f"invalid conditions, made again ({len(entry.replaced)} of " \
                                              f"{MAX_REPLACEMENTS}): {entry.conditions_reason}"

    def progress_line(self, last: RunEntry) -> str:
        entries = [entry for name, entry in self.manifest.runs.items() if name not in self.recorded]
        statuses = [entry.status for entry in entries]
        done, failed, invalid = statuses.count(COMPLETED), statuses.count(FAILED), statuses.count(INVALID)
        replaced = sum(len(entry.replaced) for entry in entries)
        left = self.total - done - failed - invalid
        eta = ""
        if self.durations and left:
            eta = f", about {_minutes(sum(self.durations) / len(self.durations) * left / self.parallel)} left"
        what = f"{last.run} {last.status}" + (f" ({last.reason})" if last.reason else "")
        if last.status == COMPLETED and last.conditions and last.conditions != "ok":
            what += f" (conditions {last.conditions}: {last.conditions_reason})"
        also = "".join(f", {n} {word}" for n, word in ((invalid, "invalid"), (replaced, "replaced")) if n)
        return f"[{done + failed + invalid}/{self.total}] {what}; {done} completed, {failed} failed{also}{eta}"

    def stop(self) -> None:
        self.stopping.set()
        with self.lock:
            children = list(self.children.values())
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signal.SIGTERM)

    def execute(self, parallel: int) -> bool:
        self.parallel = parallel
        todo = self.todo()
        skipped = self.total - len(todo)
        elsewhere = f", {len(self.recorded)} recorded in the data folder" if self.recorded else ""
        self.say(f"campaign {self.campaign.name}: {len(self.manifest.runs)} runs ({len(self.campaign.cells)} cells, "
                 f"{_repetitions(self.campaign)} repetitions){elsewhere}, {skipped} already completed here, "
                 f"{parallel} at a time")
        previous = {sig: signal.signal(sig, lambda *_: self.stop()) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            with ThreadPoolExecutor(max_workers=parallel) as pool:
                for future in [pool.submit(self.run_one, planned) for planned in todo]:
                    future.result()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return self.stopping.is_set()


def execute(campaign: Campaign, folder: Path, *, parallel: int = 1, zk_provider: str = "auto",
            say: Say = print, allow_mixed_commits: bool = False, recorded: frozenset[str] = frozenset()) -> Outcome:
    """Run what is left of `campaign` in `folder`, leaving out the runs named in `recorded` (made in an
    earlier part and kept in a results-data folder); returns when every run ended or the campaign was stopped."""
    if parallel < 1:
        raise ValueError("parallel must be at least 1")
    manifest = open_folder(campaign, folder, allow_mixed_commits=allow_mixed_commits)
    executor = _Executor(campaign, folder, manifest, zk_provider=zk_provider, say=say, recorded=recorded)
    interrupted = executor.execute(parallel)
    return Outcome(folder=folder, manifest=manifest, interrupted=interrupted)


def _repetitions(campaign: Campaign) -> str:
    counts = sorted({cell.repetitions for cell in campaign.cells})
    return "-".join(map(str, (counts[0], counts[-1]) if len(counts) > 1 else counts))


def _failure_reason(target: Path, log: Path, code: int) -> str:
    if reason := RunFolder(target).reason():
        return reason
    with contextlib.suppress(OSError):
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
        if lines:
            return lines[-1][:200]
    return f"exit code {code}"


def _conditions(target: Path) -> tuple[str | None, str]:
    """The run's conditions as its runner judged them (None for a run that did not record them)."""
    from experiments.run.conditions import Conditions

    path = RunFolder(target).conditions
    try:
        conditions = Conditions.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError):
        return None, ""
    return conditions.grade.value, conditions.reason()


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"
