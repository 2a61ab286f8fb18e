"""The stages after a run, in one place: summary (Spark: checks and tables, summary/), the run's words
(summary.md), a campaign's statistics (statistics/), and the report (report.html and report.md).

Each stage writes its own files through the folders' owner (experiments.folders) and names itself to `step` as
it starts (the summary's own steps, then `statistics`, then `report`); the command line calls these and never wires
two stages by hand. A run already summarised is not summarised again unless asked,
so a resumed demo or campaign pays only for its new runs."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from experiments.folders.run_folder import RunFolder
from experiments.summary.check_queries import CheckConfig

Step = Callable[[str], None]
Progress = Callable[[int, int], None]   # (done, added): the summary's queries, as each finishes


def _silent(_: str) -> None:
    pass


@dataclass(frozen=True)
class Stages:
    """How the stages run: the Spark master, the checks' settings, and where a stage says what it is doing."""

    master: str = "local[*]"
    checks: CheckConfig = field(default_factory=CheckConfig)
    step: Step = _silent
    progress: Progress | None = None

    def summarise(self, run_dirs: Iterable[Path], *, again: bool = False) -> list:
        """Summarise the runs not summarised yet (all of them `again`), in one Spark pass, then write each
        one's summary.md. Returns the new summaries ([] when every run had one)."""
        from experiments.report.run_report import write_summary_markdown
        from experiments.summary import summarize

        pending = [Path(run) for run in run_dirs if again or not RunFolder(run).is_summarised()]
        if not pending:
            return []
        summaries = summarize(pending, master=self.master, config=self.checks, step=self.step,
                              progress=self.progress)
        write_summary_markdown(summaries)
        return summaries

    def campaign_statistics(self, folder: Path) -> Path:
        """Every completed run of a campaign summarised, then its statistics/; returns statistics.md."""
        from experiments.campaign import completed_run_dirs
        from experiments.folders.campaign_folder import CampaignFolder
        from experiments.statistics.campaign_stats import write_statistics

        self.summarise(completed_run_dirs(folder))
        self.step("statistics")
        write_statistics(folder)
        return CampaignFolder(folder).statistics_markdown

    def campaign_report(self, folder: Path):
        """The campaign's statistics, then its report (experiments.report.campaign_report.Report)."""
        from experiments.report.campaign_report import write_campaign_report

        self.campaign_statistics(folder)
        self.step("report")
        return write_campaign_report(folder)

    def runs_report(self, run_dirs: list[Path], out: Path, *, again: bool = False):
        """The runs summarised where they are not, then one report of them side by side in `out`."""
        from experiments.report.run_report import write_report

        self.summarise(run_dirs, again=again)
        self.step("report")
        return write_report(run_dirs, out)
