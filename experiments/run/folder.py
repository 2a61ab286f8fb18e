"""A run's folder: where each of a run's files lives, and the one rule for what state the folder is in.

    RUN_DIR/
      lock.json            the run record (experiments.run.runmeta): written at the start, rewritten at the end
      events/*.jsonl       one event log per process
      logs/                the processes' own output (broker, producer, member hosts)
      brokers/data/        the brokers' partitions
      members/HOST.json    each member host's settings; advertise.json, the links' addresses
      runner-notes.txt     what the runner noticed; runner-error.txt, its traceback when it failed
      conditions.json      whether the machine carried the run (experiments.run.conditions), written at its end
      summary/             what the summary stage wrote: *.parquet, evidence/, summary.md, and run.json
                           (its record, written last)
      report.html          the run's page (the report stage)

A folder made by `compare` holds one run folder per backend and `compare.json` beside them.
Every stage asks this module for a path instead of spelling a file name, so the layout is written once.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from rebalance.backends import canonical_name

LOCK_FILE = "lock.json"
RUNS_DIR = "runs"            # where runs go by default, under the working directory (the checkout's, for ./lab)
COMPARISON_FILE = "compare.json"


@dataclass(frozen=True)
class RunFolder:
    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    # -- what the run itself writes ----------------------------------------------------------------

    @property
    def lock(self) -> Path:
        return self.path / LOCK_FILE

    @property
    def events(self) -> Path:
        return self.path / "events"

    def event_files(self) -> list[Path]:
        return sorted(self.events.glob("*.jsonl"))

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    def log(self, process: str) -> Path:
        return self.logs / f"{process}.log"

    @property
    def broker_data(self) -> Path:
        return self.path / "brokers" / "data"

    def member_settings(self, host: str) -> Path:
        """members/HOST.json: the MemberConfigs a member host is started with."""
        return self.path / "members" / f"{host}.json"

    @property
    def advertised(self) -> Path:
        """advertise.json: the addresses the members' links advertise (experiments.run.member_links)."""
        return self.path / "advertise.json"

    @property
    def runner_error(self) -> Path:
        """runner-error.txt: the traceback of a runner that failed."""
        return self.path / "runner-error.txt"

    @property
    def conditions(self) -> Path:
        """conditions.json: the run's conditions check, written when the run ends."""
        return self.path / "conditions.json"

    @property
    def runner_notes(self) -> Path:
        """runner-notes.txt: what the runner noticed while it ran (a slow stop, a process left behind)."""
        return self.path / "runner-notes.txt"

    # -- what the summary and the report write -----------------------------------------------------

    @property
    def summary(self) -> Path:
        return self.path / "summary"

    def summary_table(self, name: str) -> Path:
        """summary/NAME.parquet"""
        return self.summary / f"{name}.parquet"

    @property
    def evidence(self) -> Path:
        """summary/evidence/CHECK.parquet: the rows behind each check that found something."""
        return self.summary / "evidence"

    @property
    def summary_record(self) -> Path:
        """summary/run.json: what the summary found, for the report to read back without Spark."""
        return self.summary / "run.json"

    @property
    def summary_markdown(self) -> Path:
        return self.summary / "summary.md"

    @property
    def report(self) -> Path:
        return self.path / "report.html"

    # -- the folder's state ------------------------------------------------------------------------

    def is_run(self) -> bool:
        """A run's folder (it has an event log directory), as opposed to a folder of runs."""
        return self.events.is_dir()

    def _lock_field(self, name: str) -> str | None:
        """One top-level field of the lock, None without a readable lock (a glance: the run record's reader
        is experiments.run.runmeta)."""
        try:
            document = json.loads(self.lock.read_text())
        except (OSError, ValueError):
            return None
        value = document.get(name) if isinstance(document, dict) else None
        return None if value is None else str(value)

    def status(self) -> str | None:
        """The lock's status (running, completed, failed, interrupted), None without a readable lock."""
        return self._lock_field("status")

    def reason(self) -> str:
        """Why the run failed, as its lock says ("" when it does not)."""
        return self._lock_field("reason") or ""

    def described(self) -> str:
        """The run in words: `a completed run of herd on classic`."""
        if self.status() is None:
            return f"a run (its {LOCK_FILE} unreadable)"
        backend = self._lock_field("backend")
        return (f"a {self.status() or 'recorded'} run of {self._lock_field('name') or '?'} on "
                f"{canonical_name(backend) if backend else '?'}")

    def is_completed(self) -> bool:
        return self.status() == "completed"

    def is_summarised(self) -> bool:
        """The summary stage finished here: its record is written last, after every table."""
        return self.summary_record.is_file() and self.summary_table("verdicts").is_file()


def runs_below(folder: Path) -> list[RunFolder]:
    """Run folders at or below `folder` (a run, a comparison, a campaign's runs/), in name order."""
    top = RunFolder(folder)
    if top.is_run():
        return [top]
    if not Path(folder).is_dir():
        return []
    found: list[RunFolder] = []
    for child in sorted(Path(folder).iterdir()):
        if child.is_dir():
            found.extend(runs_below(child))
    return found




# -- claiming a folder for a new run ---------------------------------------------------------------

class FolderRefused(Exception):
    """A run may not write into this folder; the message says why and what to do instead."""


def claim(folder: Path, *, force: bool) -> str:
    """Make sure a run writes into a folder of its own, before anything is started; returns what was
    deleted ("" when nothing was).

    A new or empty folder is taken as it is. A folder with anything in it is refused: a second run there
    would find the first one's broker data (its topics exist already) and append to its event files.
    With `force`, a folder that holds a run (its lock.json) or the runs of a compare (a lock.json one
    level down) is deleted first; any other folder, or one a run is still writing to, is refused even
    then."""
    from experiments.faults.process import processes_with_marker

    folder = Path(folder)
    if not folder.exists():
        return ""
    if not folder.is_dir():
        raise FolderRefused(f"--out {folder} is a file; give a folder")
    if not any(folder.iterdir()):
        return ""
    held = runs_held(folder)
    if not force:
        what = f"holds {held}" if held else "is not empty"
        raise FolderRefused(f"--out {folder} {what}; choose another --out, or add --force to delete it and run again")
    if not held:
        raise FolderRefused(f"--out {folder} is not empty and holds no run (no {LOCK_FILE}); --force deletes only "
                            "a run's folder, so choose another --out")
    cwd = Path.cwd().resolve()
    if cwd == folder.resolve() or folder.resolve() in cwd.parents:
        raise FolderRefused(f"--out {folder} contains the current directory; run from elsewhere to replace it")
    candidates = [folder, *(child for child in folder.iterdir() if child.is_dir())]
    live = sorted({pid for candidate in candidates for pid in processes_with_marker(str(candidate.resolve()))})
    if live:
        raise FolderRefused(f"--out {folder}: a run is still writing there (processes {', '.join(map(str, live[:5]))}); "
                            "stop it first, or choose another --out")
    shutil.rmtree(folder)
    return held


def runs_held(folder: Path) -> str:
    """What the runs in a folder are, in words (`a completed run of herd on classic`, `the runs of a compare:
    legacy, classic, kip848`), or "" when it holds none."""
    folder = Path(folder)
    if (folder / LOCK_FILE).is_file():
        return RunFolder(folder).described()
    runs = sorted(child.name for child in folder.iterdir() if (child / LOCK_FILE).is_file())
    if runs or (folder / COMPARISON_FILE).is_file():
        return f"the runs of a compare: {', '.join(runs) or 'none completed'}"
    return ""
