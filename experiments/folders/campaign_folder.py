"""A campaign's folder: where each of its files lives, and the one rule for whether it is summarised.

    DIR/manifest.json          the campaign's record (experiments.campaign.manifest)
    DIR/campaign.toml          the campaign file as it ran
    DIR/runs/<run>/            one run folder each (experiments.folders.run_folder)
    DIR/logs/<run>.log         each run's own output
    DIR/incomplete/<run>-<t>/  a run folder its run left unfinished, set aside when the run starts again
    DIR/replaced/<run>-<k>/    a run whose conditions were invalid, kept for the record and run again
    DIR/statistics/            runs, cells, comparisons and claims (*.parquet) and statistics.md
    DIR/report/                the campaign's page and its plots
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from experiments.folders import Folder
from experiments.folders.report_folder import ReportFolder
from experiments.folders.run_folder import RunFolder

MANIFEST_FILE = "manifest.json"
CAMPAIGN_FILE = "campaign.toml"
GRID_TABLE_FILE = "compare.md"   # a compare grid's per-phase table (experiments.report.compare_table)


@dataclass(frozen=True)
class CampaignFolder(Folder):
    @property
    def manifest(self) -> Path:
        return self.path / MANIFEST_FILE

    @property
    def campaign_file(self) -> Path:
        return self.path / CAMPAIGN_FILE

    @property
    def runs_folder(self) -> Path:
        """runs/: one run folder each."""
        return self.path / "runs"

    def run(self, name: str) -> RunFolder:
        return RunFolder(self.runs_folder / name)

    @property
    def incomplete(self) -> Path:
        """incomplete/: the run folders set aside when their runs started again."""
        return self.path / "incomplete"

    def set_aside(self, name: str, stamp: str) -> Path:
        """Where an unfinished run's folder goes before its run starts again: incomplete/<run>-<stamp>."""
        return self.incomplete / f"{name}-{stamp}"

    def replaced(self, name: str, attempt: int) -> Path:
        """Where an invalid run's folder goes before its run is made again: replaced/<run>-<attempt>."""
        return self.path / "replaced" / f"{name}-{attempt}"

    def log(self, name: str) -> Path:
        return self.path / "logs" / f"{name}.log"

    @property
    def statistics(self) -> Path:
        return self.path / "statistics"

    def statistics_table(self, name: str) -> Path:
        """statistics/NAME.parquet (runs, cells, comparisons, claims)"""
        return self.statistics / f"{name}.parquet"

    @property
    def statistics_markdown(self) -> Path:
        return self.statistics / "statistics.md"

    @property
    def grid_table(self) -> Path:
        return self.path / GRID_TABLE_FILE

    @property
    def report(self) -> ReportFolder:
        return ReportFolder(self.path / "report")

    def is_campaign(self) -> bool:
        return self.manifest.is_file()

    def is_summarised(self) -> bool:
        """The statistics were written: runs.parquet is what every later stage reads first."""
        return self.statistics_table("runs").is_file()
