"""`rebalance-lab demo --publish DIR`: the demo's result as files a README can show.

Writes DIR/herd.png (the report's herd plot) and DIR/demo.md (what the runs show, as the report's
findings say it, with the fitted herd model; the plot, the herd table; the split-brain checks in Markdown). When ./README.md has the two marker lines below, the part between
them is replaced by the same without the herd table, with the plot linked from DIR, so the project's
first screen shows the latest demo without hand editing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from experiments.summary import markdown_table
from experiments.summary.verdict_words import Reading, Word, question

BEGIN = "<!-- demo:begin (written by `./lab demo --publish docs/demo`) -->"
END = "<!-- demo:end -->"


def demo_markdown(*, points: pd.DataFrame, split: Mapping[str, Mapping[str, Reading]], image: str,
                  herd_table: bool = True, findings: Sequence = ()) -> str:
    """What the runs show (the report's generated findings), then the herd plot, its table (unless not
    wanted), then the split-brain checks (`split`: per backend, each check's reading): compact words, a
    column per backend, the checks ok on every backend in one line, and what each shown check looks for
    under the table."""
    points = points if "server_requests_per_change" in points else points.assign(server_requests_per_change=None)
    points = points if "strategy" in points else points.assign(strategy="")
    herd = points.sort_values(["backend", "strategy", "N"])[
        ["backend", "strategy", "N", "requests_per_change", "server_requests_per_change", "notifications_per_change",
         "last_assignment_s"]].rename(columns={
            "requests_per_change": "requests / change", "server_requests_per_change": "server's count",
            "notifications_per_change": "notifications / change",
            "last_assignment_s": "last assignment after (s)"})
    readings = {backend: dict(checks) for backend, checks in split.items()}
    checks = list(dict.fromkeys(name for column in readings.values() for name in column))
    clean = [name for name in checks if all(column.get(name) is not None and column[name].word is Word.OK
                                            for column in readings.values())]
    shown = [name for name in checks if name not in clean]
    verdicts = pd.DataFrame([{"check": name, **{backend: _cell(column.get(name)) for backend, column in
                                                readings.items()}} for name in shown])
    meanings = "\n".join(f"- `{name}`: {question(name)}" for name in shown if question(name))
    folded = (f"Ok on every backend: {', '.join(f'`{name}`' for name in clean)}.\n" if clean else "")
    lines = [f"{backend} ({strategy})" if strategy else backend
             for backend, strategy in zip(points["backend"], points["strategy"], strict=True)]
    alt = f"Herd effect: requests per membership change against group size, {_names(lines)}"
    picture = (f"![{alt}]({image})\n" if herd_table   # the README's first screen: a smaller picture
               else f'<img src="{image}" width="560" alt="{alt}">\n')
    lead = ["**What these runs show** (generated from the runs' summaries):\n",
            *[f"- **{finding.scenario}** ({finding.ran}): {finding.text}" for finding in findings], ""] if findings else []
    return "\n".join([
        *lead,
        picture,
        *([markdown_table(herd, digits=1)] if herd_table else []),
        "**Split brain**: one member crashed, another's coordination link cut past its session timeout, "
        f"the same schedule on {_names(readings)} (one demo run per backend, n = 1; the spread over repeated runs is in "
        "`docs/results.md`):\n",
        markdown_table(verdicts) if shown else "",
        *([meanings + "\n"] if meanings else []),
        folded,
    ])


def _names(backends) -> str:
    """The backends in words: "classic and legacy", "classic, kip848 and legacy"."""
    names = sorted(set(backends))
    return " and ".join(names) if len(names) < 3 else ", ".join(names[:-1]) + " and " + names[-1]


def _cell(reading) -> str:
    """The compact word, bold where something was found."""
    if reading is None:
        return "-"
    return reading.label if reading.word is Word.OK else f"**{reading.label}**"


def publish_demo(folder: Path, *, report, points: pd.DataFrame, split: Mapping[str, Mapping[str, Reading]],
                 readme: Path = Path("README.md")) -> list[Path]:
    """Copy and write the files; returns what was written (README.md only when it has the markers)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    herd_png = next((path for path in report.images if path.name == "herd.png"), None)
    if herd_png is not None:
        shutil.copyfile(herd_png, folder / "herd.png")
        written.append(folder / "herd.png")
    findings = getattr(report, "findings", ())
    text = demo_markdown(points=points, split=split, image="herd.png", findings=findings)
    (folder / "demo.md").write_text(text)
    written.append(folder / "demo.md")
    if readme.exists() and replace_block(readme, demo_markdown(
            points=points, split=split, herd_table=False, findings=findings,
            image=Path(os.path.relpath(folder / "herd.png", readme.parent)).as_posix())):
        written.append(readme)
    return written


def replace_block(path: Path, body: str) -> bool:
    """Put `body` between the markers in `path`; False (nothing written) when either marker is missing."""
    text = path.read_text()
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        return False
    path.write_text(text[:start + len(BEGIN)] + "\n" + body.rstrip("\n") + "\n" + text[end:])
    return True
