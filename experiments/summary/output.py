"""A run's summary on disk: Parquet tables, evidence, run.json and summary.md."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from experiments.summary.runs import RunSummary


def write_summary(summary: RunSummary) -> Path:
    out = summary.info.run_dir / "summary"
    evidence_dir = out / "evidence"
    evidence_dir.mkdir(parents=True, exist_ok=True)
    summary.verdicts().to_parquet(out / "verdicts.parquet", index=False)
    for name, table in summary.tables.items():
        table.to_parquet(out / f"{name}.parquet", index=False)
    for check in summary.checks:
        path = evidence_dir / f"{check.check}.parquet"
        if len(check.evidence):
            check.evidence.to_parquet(path, index=False)
        elif path.exists():
            path.unlink()
    info = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(summary.info).items()}
    (out / "run.json").write_text(json.dumps({"info": info, "facts": summary.facts}, indent=2, default=str) + "\n")
    (out / "summary.md").write_text(summary_markdown(summary))
    return out


def markdown_table(frame: pd.DataFrame, *, digits: int = 1, limit: int | None = None) -> str:
    """A GitHub Markdown table; floats rounded, long tables cut with a note."""
    if frame.empty:
        return "_(none)_\n"
    shown = frame if limit is None else frame.head(limit)

    def cell(value: object) -> str:
        if value is None or (isinstance(value, float) and pd.isna(value)):
            return ""
        if isinstance(value, float):
            return f"{value:,.{digits}f}"
        if isinstance(value, (list, tuple)) or hasattr(value, "tolist"):
            return ", ".join(map(str, list(value)))
        return str(value).replace("|", "\\|")

    lines = ["| " + " | ".join(map(str, shown.columns)) + " |", "|" + "---|" * len(shown.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in shown.itertuples(index=False)]
    if limit is not None and len(frame) > limit:
        lines.append(f"\n_{len(frame) - limit} more rows in the Parquet file_")
    return "\n".join(lines) + "\n"


def summary_markdown(summary: RunSummary) -> str:
    """summary.md: what the run shows, its checks and key numbers, then the detail (the report's order)."""
    from experiments.report import run_summary_markdown
    from experiments.rundata import from_summary

    info, facts = summary.info, summary.facts
    line = (f"backend **{info.backend}**, strategy **{info.strategy}**, {info.members} members, "
            f"{facts['partitions']} partitions, {facts['events']:,} events over {facts['duration_s']:.1f} s"
            + (f", {facts['unreadable_lines']} unreadable lines skipped" if facts["unreadable_lines"] else ""))
    return run_summary_markdown(from_summary(summary), line)
