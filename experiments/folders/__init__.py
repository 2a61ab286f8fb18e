"""The lab's folders and every file name in them, one module each: a run's (`run_folder`), a comparison's
(`comparison_folder`), a campaign's (`campaign_folder`), and the run's record that lock.json holds
(`run_record`, its one reader and writer). Every stage asks here for a path instead of spelling one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

RUNS_DIR = "runs"   # where runs, and reports of several, go by default: under the working directory (the checkout's, for ./lab)


@dataclass(frozen=True)
class Folder:
    """One of the lab's folders, by its path (a string is taken as a Path)."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))
