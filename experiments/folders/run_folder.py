"""A run's folder: where each of a run's files lives, and the one rule for what state the folder is in.

    RUN_DIR/
      lock.json            the run's record (experiments.folders.run_record): written at the start, rewritten at the end
      events/*.jsonl       one event log per process
      logs/                the processes' own output (broker, producer, member hosts)
      brokers/data/        the brokers' partitions
      members/HOST.json    each member host's settings; advertise.json, the links' addresses
      runner-notes.txt     what the runner noticed; runner-error.txt, its traceback when it failed
      conditions.json      whether the machine carried the run (experiments.run.conditions), written at its end
      summary/             what the summary stage wrote: *.parquet, evidence/, summary.md, and run.json
                           (its record, written last)
      report.md, .html     the run's page, when the report stage writes it here (experiments.folders.report_folder)

A folder made by `compare` holds one run folder per backend and `compare.json` beside them
(experiments.folders.comparison_folder). Every stage asks this package for a path instead of spelling a
file name, so the layout is written once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from experiments.folders import Folder
from experiments.folders.report_folder import ReportFolder
from experiments.folders.run_record import NoRunRecord, RunRecord, read_record, write_record
from rebalance.backends import canonical_name

LOCK_FILE = "lock.json"


@dataclass(frozen=True)
class RunFolder(Folder):
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

    def evidence_table(self, check: str) -> Path:
        """summary/evidence/CHECK.parquet"""
        return self.evidence / f"{check}.parquet"

    @property
    def summary_record(self) -> Path:
        """summary/run.json: what the summary found, for the report to read back without Spark."""
        return self.summary / "run.json"

    @property
    def summary_markdown(self) -> Path:
        return self.summary / "summary.md"

    @property
    def report(self) -> ReportFolder:
        """The run's own report, when the report stage wrote it here (report.md, report.html, charts)."""
        return ReportFolder(self.path)

    # -- the folder's state ------------------------------------------------------------------------

    def is_run(self) -> bool:
        """A run's folder (it has an event log directory), as opposed to a folder of runs."""
        return self.events.is_dir()

    def record(self) -> RunRecord | None:
        """The run's record (lock.json) as a RunRecord; None without a lock.json. A lock that cannot be read
        raises ValueError naming the file (experiments.folders.run_record, the record's one reader)."""
        return read_record(self.lock)

    def write_record(self, record: RunRecord) -> Path:
        """lock.json, written whole."""
        return write_record(self.lock, record)

    def glance(self) -> RunRecord | None:
        """The record for a glance at the folder's state (keys it does not know left out): None when it is
        missing or unreadable."""
        try:
            return read_record(self.lock, strict=False)
        except ValueError:
            return None

    def status(self) -> str | None:
        """The lock's status (running, completed, failed, interrupted), None without a readable lock."""
        record = self.glance()
        return record.status if record is not None else None

    def reason(self) -> str:
        """Why the run failed, as its lock says ("" when it does not)."""
        record = self.glance()
        return record.reason if record is not None else ""

    def described(self) -> str:
        """The run in words: `a completed run of herd on classic`."""
        record = self.glance()
        if record is None:
            return f"a run (its {LOCK_FILE} unreadable)"
        return (f"a {record.status or 'recorded'} run of {record.name or '?'} on "
                f"{canonical_name(record.backend) if record.backend else '?'}")

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


def record_to_summarise(folder: RunFolder) -> RunRecord:
    """The record a summary starts from. Every run the lab makes writes one (the runner and the synthetic
    generator alike), so the summary guesses nothing from events; the name falls back to the folder's."""
    record = folder.record()
    if record is None:
        raise NoRunRecord(f"{folder.path}: no {folder.lock.name}, so nothing says which backend, strategy and "
                          "topics the run had; summarise folders the lab's runner (or its synthetic generator) wrote")
    if not record.topics:
        raise NoRunRecord(f"{folder.lock}: names no topics")
    return replace(record, name=record.name or folder.path.name, backend=record.backend or "unknown",
                   strategy=record.strategy or "unknown")
