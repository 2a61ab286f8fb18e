"""A report's folder: where the report stage writes one page in two forms and its charts. A report goes into a
run's own folder, a comparison's, a folder of its own beside several runs, or a campaign's report/.

    DIR/report.md      the page in Markdown
    DIR/report.html    the same page, self-contained
    DIR/*.png          its charts
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from experiments.folders import RUNS_DIR, Folder


@dataclass(frozen=True)
class ReportFolder(Folder):
    @property
    def markdown(self) -> Path:
        return self.path / "report.md"

    @property
    def html(self) -> Path:
        return self.path / "report.html"

    def image(self, name: str) -> Path:
        """NAME.png (a name given with its suffix keeps it)."""
        return self.path / (name if name.endswith(".png") else f"{name}.png")


def report_dir(run_dirs: list[Path]) -> Path:
    """Where a report of `run_dirs` goes when no --out is given: a run's own folder for one run; for
    several, a folder of its own beside them, named for them (`report-<first>+<n>-more`), so that one
    report never overwrites another's files."""
    if len(run_dirs) == 1:
        return run_dirs[0]
    resolved = [Path(p).absolute() for p in run_dirs]
    common = Path(*[parts[0] for parts in zip(*(p.parts for p in resolved), strict=False) if len(set(parts)) == 1])
    if common == Path(common.anchor) or common in resolved:   # nothing shared but the root; or one is inside another
        common = Path(RUNS_DIR).absolute()
    labels = [p.relative_to(common).as_posix() if p.is_relative_to(common) else p.name for p in resolved]
    slug = "+".join(re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-") for label in labels)
    if len(slug) > 60:
        slug = f"{re.sub(r'[^A-Za-z0-9._-]+', '-', labels[0]).strip('-')}+{len(labels) - 1}-more"
    out = common / f"report-{slug}"
    return out.relative_to(Path.cwd()) if out.is_relative_to(Path.cwd()) else out
