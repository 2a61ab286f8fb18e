"""What a lab's checks read from its run folders: the summaries the report shows and the events behind them.

The checks read the Parquet tables `summarize` writes (RUN_DIR/summary/), which are the numbers the report,
the terminal and summary.md print, and the raw event lines where a lab points the student at events.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from experiments.folders.run_folder import RunFolder


def runs_of(folder: Path) -> dict[str, Path]:
    """A comparison's runs by backend (a run folder is one with events/ in it)."""
    found = {}
    for child in sorted(folder.iterdir()):
        if RunFolder(child).events.is_dir():
            backend = json.loads(RunFolder(child).lock.read_text())["backend"]
            found[backend] = child
    assert found, f"{folder} holds no runs"
    return found


def verdicts(run: Path) -> dict[str, dict]:
    """check -> {verdict, count, result, detail}: result is the word the report prints ("VIOLATED (3)")."""
    table = pd.read_parquet(RunFolder(run).summary_table("verdicts"))
    return {row.check: {"verdict": row.verdict, "count": int(row.count), "result": row.result,
                        "detail": row.detail} for row in table.itertuples()}


def word(result: str) -> str:
    """The verdict's word without its count: VIOLATED, protected, ok or unknown."""
    return result.split(" (")[0]


def herd(run: Path) -> pd.DataFrame:
    return pd.read_parquet(RunFolder(run).summary_table("herd"))


def events(run: Path, *types: str) -> list[dict]:
    """Every event of those types in the run's event files, in time order."""
    found = []
    for path in sorted(RunFolder(run).events.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue      # a torn last line
            if not types or event.get("type") in types:
                found.append(event)
    return sorted(found, key=lambda event: event.get("ts_ns", 0))
