"""A run's summary on disk: Parquet tables, evidence, run.json and summary.md."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from experiments.checker import Verdict
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
    info, facts = summary.info, summary.facts
    parts = [
        f"# Summary of {info.name}\n",
        f"backend **{info.backend}**, strategy **{info.strategy}**, {info.members} members, "
        f"{facts['partitions']} partitions, {facts['events']:,} events over {facts['duration_s']:.1f} s"
        + (f", {facts['unreadable_lines']} unreadable lines skipped" if facts["unreadable_lines"] else "") + "\n",
        "## Checks\n", markdown_table(summary.verdicts()[["check", "result", "meaning"]]),
        "## Phases\n", markdown_table(summary.tables["phases"]),
        "## Rebalance metrics (Kafka names, ms)\n", markdown_table(summary.tables["rebalance_metrics"], limit=20),
        "## Membership changes (herd cost)\n", markdown_table(summary.tables["herd"], digits=3, limit=40),
    ]
    for check in summary.checks:
        if check.verdict is Verdict.FALSE and len(check.evidence):   # violated or protected: where and when
            parts += [f"## Evidence: {check.check}\n", markdown_table(check.evidence, digits=3, limit=20)]
    return "\n".join(parts)
