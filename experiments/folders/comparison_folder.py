"""A comparison's folder: the runs `compare` made side by side, one run folder per backend, and
compare.json, which says what was compared.

    DIR/compare.json      the scenario, the backends and the settings the comparison ran with
    DIR/<backend>/        one run folder each (experiments.folders.run_folder)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from experiments.folders import Folder
from experiments.folders.run_folder import RunFolder

COMPARISON_FILE = "compare.json"


@dataclass(frozen=True)
class ComparisonFolder(Folder):
    @property
    def record_file(self) -> Path:
        return self.path / COMPARISON_FILE

    def run(self, backend: str) -> RunFolder:
        return RunFolder(self.path / backend)

    def runs(self) -> list[RunFolder]:
        """The run folders in it that hold a run's record, in name order."""
        if not self.path.is_dir():
            return []
        return [RunFolder(child) for child in sorted(self.path.iterdir())
                if child.is_dir() and RunFolder(child).lock.is_file()]

    def write_record(self, record: dict) -> Path:
        self.path.mkdir(parents=True, exist_ok=True)
        self.record_file.write_text(json.dumps(record, indent=2) + "\n")
        return self.record_file

    def read_record(self) -> dict | None:
        """compare.json, None when the folder has none or it cannot be read."""
        try:
            document = json.loads(self.record_file.read_text())
        except (OSError, ValueError):
            return None
        return document if isinstance(document, dict) else None


def runs_held(folder: Path) -> str:
    """What the runs in a folder are, in words (`a completed run of herd on classic`, `the runs of a compare:
    legacy, classic, kip848`), or "" when it holds none."""
    folder = Path(folder)
    if RunFolder(folder).lock.is_file():
        return RunFolder(folder).described()
    comparison = ComparisonFolder(folder)
    runs = [run.path.name for run in comparison.runs()]
    if runs or comparison.record_file.is_file():
        return f"the runs of a compare: {', '.join(runs) or 'none completed'}"
    return ""
