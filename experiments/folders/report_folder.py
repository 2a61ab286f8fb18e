"""A report's folder: where the report stage writes one page in two forms and its charts. A report goes into a
run's own folder, a comparison's, a folder of its own beside several runs, or a campaign's report/.

    DIR/report.md      the page in Markdown
    DIR/report.html    the same page, self-contained
    DIR/*.png          its charts
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ReportFolder:
    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @property
    def markdown(self) -> Path:
        return self.path / "report.md"

    @property
    def html(self) -> Path:
        return self.path / "report.html"

    def image(self, name: str) -> Path:
        """NAME.png (a name given with its suffix keeps it)."""
        return self.path / (name if name.endswith(".png") else f"{name}.png")
