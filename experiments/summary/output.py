"""A run's summary on disk: Parquet tables, evidence and run.json (its summary.md is the report's:
`experiments.report.run_report.write_summary_markdown`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from experiments.summary.run_summary import RunSummary, write_summary_record


def write_summary(summary: RunSummary) -> Path:
    folder = summary.folder
    out, evidence_dir = folder.summary, folder.evidence
    evidence_dir.mkdir(parents=True, exist_ok=True)
    summary.verdicts().to_parquet(folder.summary_table("verdicts"), index=False)
    for name, table in summary.tables.items():
        table.to_parquet(folder.summary_table(name), index=False)
    for check in summary.checks:
        path = folder.evidence_table(check.check)
        if len(check.evidence):
            check.evidence.to_parquet(path, index=False)
        elif path.exists():
            path.unlink()
    write_summary_record(summary)   # last: a folder with run.json is summarised (RunFolder.is_summarised)
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
