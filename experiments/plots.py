"""The report's pictures (matplotlib, Agg backend): each function takes summarised runs and a path.

- throughput: processed records per second with fault windows shaded (seed 002's chart);
- ownership: who owned which partition when, double ownership marked;
- herd: coordination requests per membership change against group size, log-log.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402

from experiments.rundata import RunData  # noqa: E402

FAULT_COLOR = "#f4a6a6"
DOUBLE_COLOR = "#d62728"
BACKEND_STYLE = {"legacy": ("#d62728", "o"), "modern": ("#1f77b4", "s")}


def _shade_faults(ax, run: RunData, *, label: bool) -> None:
    for index, fault in enumerate(run.faults.itertuples()):
        ax.axvspan(fault.start, max(fault.end, fault.start + 0.05), color=FAULT_COLOR, alpha=0.45, lw=0,
                   label="fault window" if label and index == 0 else None)
        if label:
            ax.annotate(f"{fault.kind}" + (f" {fault.target}" if fault.target else ""), (fault.start, 1.0),
                        xycoords=("data", "axes fraction"), fontsize=7, rotation=90, va="top", ha="right",
                        color="#8b0000")


def _mark_phases(ax, run: RunData) -> None:
    for phase in run.phases.itertuples():
        if phase.start_s > 0:
            ax.axvline(phase.start_s, color="#555555", ls=":", lw=1)
        ax.annotate(phase.phase, (phase.start_s, 0.0), xycoords=("data", "axes fraction"), fontsize=7,
                    xytext=(2, 2), textcoords="offset points", color="#333333")


def throughput(runs: list[RunData], path: Path) -> Path:
    fig, axes = plt.subplots(len(runs), 1, figsize=(11, 2.8 * len(runs) + 0.6), sharex=True, squeeze=False)
    for ax, run in zip(axes[:, 0], runs, strict=True):
        series = run.throughput
        if not series.empty:
            ax.plot(series["second"], series["processed"], color="#1f77b4", lw=1.4, label="processed / s")
            ax.plot(series["second"], series["produced"], color="#7f7f7f", lw=1, ls="--", label="produced / s")
            late = series["over_limit"] + series["never_processed"]
            if late.sum() > 0:
                ax.bar(series["second"], late, width=1.0, align="edge", color="#ff7f0e", alpha=0.8,
                       label=f"lost or > {run.latency_limit_ms / 1000:g} s (by produce second)")
        _shade_faults(ax, run, label=True)
        _mark_phases(ax, run)
        ax.set_ylabel("records / s")
        ax.set_title(run.label, fontsize=10, loc="left")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("seconds since the run started")
    fig.suptitle("Processed records per second (fault windows shaded)", fontsize=12)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def ownership(run: RunData, path: Path) -> Path:
    """One lane per partition; a bar per ownership interval, coloured by member."""
    intervals = run.ownership
    partitions = sorted(set(intervals["tp"]) | set(run.double["tp"] if len(run.double) else []),
                        key=_tp_key)
    lane = {tp: i for i, tp in enumerate(partitions)}
    members = sorted(set(intervals["member"]))
    palette = plt.get_cmap("tab20")
    color = {m: palette(i % 20) for i, m in enumerate(members)}
    height = max(3.0, min(0.28 * len(partitions) + 1.6, 16))
    fig, ax = plt.subplots(figsize=(11, height))
    _shade_faults(ax, run, label=True)
    for row in intervals.itertuples():
        ax.barh(lane[row.tp], row.end - row.start, left=row.start, height=0.7, color=color[row.member], lw=0)
    for row in run.double.itertuples():
        ax.barh(lane[row.tp], max(row.end - row.start, 0.05), left=row.start, height=0.95, fill=False,
                edgecolor=DOUBLE_COLOR, hatch="xxx", lw=1.5)
    ax.set_yticks(range(len(partitions)))
    ax.set_yticklabels(partitions, fontsize=7 if len(partitions) > 20 else 9)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the run started")
    ax.set_ylabel("partition")
    ax.grid(axis="x", alpha=0.3)
    handles = [Patch(color=color[m], label=m) for m in members[:12]]
    if len(members) > 12:
        handles.append(Patch(color="white", label=f"... {len(members) - 12} more members"))
    handles.append(Patch(facecolor=FAULT_COLOR, label="fault window"))
    handles.append(Patch(fill=False, edgecolor=DOUBLE_COLOR, hatch="xxx", label="double ownership"))
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    seconds = float(run.double["duration_s"].sum()) if len(run.double) else 0.0
    ax.set_title(f"Partition ownership: {run.label}\n"
                 f"{len(run.double)} double-ownership windows, {seconds:.2f} s in total", fontsize=11, loc="left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _tp_key(tp: str) -> tuple[str, int]:
    topic, _, number = tp.rpartition("-")
    return (topic, int(number)) if number.isdigit() else (tp, -1)


def herd(points: pd.DataFrame, path: Path) -> Path | None:
    if points.empty:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 5.2))
    for backend, group in points.groupby("backend"):
        group = group.sort_values("N")
        color, marker = BACKEND_STYLE.get(backend, ("#2ca02c", "^"))
        ax.plot(group["N"], group["requests_per_change"].clip(lower=0.5), marker=marker, color=color, lw=1.6,
                label=f"{backend}: coordination requests per change")
        first = group.iloc[0]
        span = np.array([group["N"].min(), max(group["N"].max(), group["N"].min() * 2)], dtype=float)
        base = max(first["requests_per_change"], 0.5)
        ax.plot(span, base * span / first["N"], color=color, ls=":", lw=1, alpha=0.7)
        ax.plot(span, base * (span / first["N"]) ** 2, color=color, ls="--", lw=1, alpha=0.5)
    ax.plot([], [], color="#555555", ls=":", label="guide: grows as N")
    ax.plot([], [], color="#555555", ls="--", label="guide: grows as N squared")
    ax.set_xscale("log")
    ax.set_yscale("log")
    def label(value: float, _=None) -> str:
        return f"{value:,.0f}" if value >= 1 else f"{value:g}"

    def two_and_five(value: float, _=None) -> str:   # minor ticks between decades: only 2x and 5x labelled
        return label(value) if f"{value:e}"[0] in "25" else ""

    plain = FuncFormatter(label)
    ax.xaxis.set_major_formatter(plain)
    ax.xaxis.set_minor_formatter(plain if points["N"].max() / points["N"].min() < 20 else NullFormatter())
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(FuncFormatter(two_and_five))
    ax.set_xlabel("group size N (members before the change)")
    ax.set_ylabel("requests per membership change")
    ax.set_title("Herd effect: cost of one member joining or leaving", fontsize=11)
    ax.grid(which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
