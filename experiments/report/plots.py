"""The report's pictures (matplotlib, Agg backend): each function takes summarised runs and a path.

- throughput: processed records per second with fault windows shaded (seed 002's chart: a stall, then a
  spike above the produced rate while the backlog drains);
- lag: consumer lag per second (the largest partition's, Kafka's records-lag-max, and the group's total);
- utilisation_curve: records over the latency limit against the group's utilisation, the article's marked;
- ownership: who owned which partition when, double ownership marked;
  on both, members joining and leaving are membership changes (teal dashed lines), not faults;
- herd: coordination requests per membership change against group size, log-log; the members' count
  and, where recorded, the server's own (ZooKeeper's packets, the broker's group-API requests); a line
  per backend and strategy, each named `backend (strategy)`.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402

from experiments.scenario.actions import is_membership_phase  # noqa: E402
from experiments.scenario.labels import fault_label, is_membership_change  # noqa: E402
from experiments.statistics.measure_names import LATE  # noqa: E402
from experiments.summary.read_back import RunData  # noqa: E402
from rebalance.backends import BackendProfile, profile  # noqa: E402

FAULT_COLOR = "#f4a6a6"
INSTANT_COLOR = "#b22222"
PHASE_COLOR = "#555555"
MEMBERSHIP_COLOR = "#1b7f79"
DOUBLE_COLOR = "#d62728"
OTHER_STYLES = [("#9467bd", "D"), ("#8c564b", "v"), ("#e377c2", "P")]   # names no profile answers to


def backend_style(backend: str, others: list[str] | None = None) -> tuple[str, str]:
    """A backend's colour and marker, as its profile gives them; a name no profile answers to (an old
    run's "unknown") takes the next free style of `OTHER_STYLES`."""
    known = _profile_of(backend)
    if known is not None:
        return known.colour, known.marker
    unlisted = sorted(b for b in (others or [backend]) if _profile_of(b) is None)
    return OTHER_STYLES[unlisted.index(backend) % len(OTHER_STYLES)] if backend in unlisted else OTHER_STYLES[0]


def _profile_of(backend: str) -> BackendProfile | None:
    try:
        return profile(backend)
    except ValueError:
        return None
LABEL_POINTS = 7     # font size of the phase and fault labels


def _title(text: str, width: int = 110) -> str:
    return "\n".join(textwrap.wrap(text, width))


def _is_instant(start: float, end: float, span_s: float) -> bool:
    """A fault too short to be seen as a window on this chart is drawn as a marker."""
    return end - start < max(0.25, 0.005 * span_s)


def _fault_name(fault) -> str:
    """`m001 cut off (coord)`, `crash m002`, `m004 leaves` (experiments/scenario/labels.py); a long list of
    targets shortened."""
    target = fault.target if isinstance(fault.target, str) and fault.target else ""
    if len(target) > 24:
        target = target[:22] + "..."
    return fault_label(fault.kind, target, getattr(fault, "link", None))


def _draw_timeline(ax, run: RunData, span_s: float) -> list[tuple[float, str, str]]:
    """Phase starts as dotted lines, membership changes (joins, scaling, leaves) as dashed teal lines,
    fault windows shaded, instant faults as markers on the top edge; returns the labels to place (x, text,
    colour). A leave is written as a fault that the final heal closes, but the member is gone from its
    start: it is drawn at its start, not as a window."""
    labels = []
    for phase in run.phases.itertuples():
        membership = is_membership_phase(phase.phase)
        color = MEMBERSHIP_COLOR if membership else PHASE_COLOR
        if phase.start_s > 0:
            ax.axvline(phase.start_s, color=color, ls="--" if membership else ":", lw=1)
        labels.append((phase.start_s, phase.phase, color))
    for fault in run.faults.itertuples():
        if is_membership_change(fault.kind):
            ax.axvline(fault.start, color=MEMBERSHIP_COLOR, ls="--", lw=1)
            labels.append((fault.start, _fault_name(fault), MEMBERSHIP_COLOR))
            continue
        if _is_instant(fault.start, fault.end, span_s):
            ax.axvline(fault.start, color=INSTANT_COLOR, lw=0.8, alpha=0.7)
            ax.plot([fault.start], [1.0], marker="v", ms=8, color=INSTANT_COLOR, clip_on=False,
                    transform=ax.get_xaxis_transform())
        else:
            ax.axvspan(fault.start, fault.end, color=FAULT_COLOR, alpha=0.45, lw=0)
        labels.append((fault.start, _fault_name(fault), INSTANT_COLOR))
    return labels


def _place_labels(ax, labels: list[tuple[float, str, str]]) -> float:
    """Writes the labels in rows along the top of the axes, each in the first row where it overlaps no
    other; returns the fraction of the axes' height the rows take. Call after the figure's layout."""
    renderer = ax.figure.canvas.get_renderer()
    row_ends: list[float] = []    # right edge, in pixels, of the last label in each row
    row_height = 0.0
    for x, text, color in sorted(labels, key=lambda label: label[0]):
        label = ax.annotate(text, (x, 1.0), xycoords=("data", "axes fraction"), xytext=(2, -3),
                            textcoords="offset points", va="top", fontsize=LABEL_POINTS, color=color,
                            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.75, "pad": 0.5})
        box = label.get_window_extent(renderer)
        row = next((i for i, end in enumerate(row_ends) if box.x0 > end + 4), len(row_ends))
        if row == len(row_ends):
            row_ends.append(0.0)
        row_ends[row] = box.x1
        row_height = max(row_height, box.height)
        label.xyann = (2, -3 - row * (box.height + 2) * 72 / ax.figure.dpi)
    band = len(row_ends) * (row_height + 2) + 6
    return min(band / ax.bbox.height, 0.6) if row_ends else 0.0



def _legend_beside(ax, run: RunData) -> None:
    """The series' legend and the timeline's marks, to the right of the axes."""
    handles, names = ax.get_legend_handles_labels()
    marks = _timeline_handles(run)
    ax.legend(handles + [handle for handle, _ in marks], names + [name for _, name in marks], fontsize=7,
              loc="upper left", bbox_to_anchor=(1.01, 1.0))

def throughput(runs: list[RunData], path: Path) -> Path:
    fig, axes = plt.subplots(len(runs), 1, figsize=(12, 2.9 * len(runs) + 0.9), sharex=True, squeeze=False)
    span_s = max((float(run.throughput["second"].max()) + 1 for run in runs if len(run.throughput)), default=1.0)
    placed = []
    for ax, run in zip(axes[:, 0], runs, strict=True):
        series = run.throughput
        if not series.empty:
            ax.plot(series["second"], series["processed"], color="#1f77b4", lw=1.4, label="processed / s")
            ax.plot(series["second"], series["produced"], color="#7f7f7f", lw=1, ls="--", label="produced / s")
            late = series["over_limit"] + series["never_processed"]
            if late.sum() > 0:
                ax.bar(series["second"], late, width=1.0, align="edge", color="#ff7f0e", alpha=0.8,
                       label=f"over {run.latency_limit_ms / 1000:g} s or never handled (by produce second)")
        placed.append((ax, _draw_timeline(ax, run, span_s)))
        ax.set_ylabel("records / s")
        ax.set_title(run.label, fontsize=10, loc="left")
        ax.grid(alpha=0.3)
        _legend_beside(ax, run)
    axes[-1, 0].set_xlabel("seconds since the run started")
    limit = runs[0].latency_limit_ms / 1000 if runs else 3
    fig.suptitle(_title("Records processed per second: a dip under a fault (shaded window or red marker) or after "
                        "a membership change (teal dashed line) is the group not consuming, and orange bars are "
                        f"records handled over {limit:g} s late or never handled."),
                 fontsize=11)
    fig.tight_layout()
    for ax, labels in placed:
        band = _place_labels(ax, labels)
        top = max(ax.get_ylim()[1], 1.0)
        ax.set_ylim(0, top / (1 - band))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def lag(runs: list[RunData], path: Path) -> Path | None:
    """Consumer lag per second, a row per run, with the phases and faults marked as on the throughput chart."""
    runs = [run for run in runs if len(run.lag)]
    if not runs:
        return None
    fig, axes = plt.subplots(len(runs), 1, figsize=(12, 2.6 * len(runs) + 0.9), sharex=True, squeeze=False)
    span_s = max(float(run.lag["second"].max()) + 1 for run in runs)
    placed = []
    for ax, run in zip(axes[:, 0], runs, strict=True):
        series = run.lag
        ax.plot(series["second"], series["lag_total"], color="#9467bd", lw=1.4, label="all partitions")
        ax.plot(series["second"], series["lag_max"], color="#d62728", lw=1.2,
                label="largest partition (records-lag-max)")
        placed.append((ax, _draw_timeline(ax, run, span_s)))
        ax.set_ylabel("records behind")
        ax.set_title(run.label, fontsize=10, loc="left")
        ax.grid(alpha=0.3)
        _legend_beside(ax, run)
    axes[-1, 0].set_xlabel("seconds since the run started")
    fig.suptitle(_title("Consumer lag: records produced but not yet taken (log end offset minus position), summed "
                        "over the partitions and for the partition that lags most; it grows while the group "
                        "stalls and falls as the backlog drains."), fontsize=11)
    fig.tight_layout()
    for ax, labels in placed:
        band = _place_labels(ax, labels)
        ax.set_ylim(0, max(ax.get_ylim()[1], 1.0) / (1 - band))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


STRATEGY_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2")


def _span(low: int, high: int) -> str:
    return str(low) if low == high else f"{low}-{high}"


def _short_settings(cell: str) -> str:
    """A cell's label with each setting's key cut to its last three parts, so the legend fits the figure
    ("group.kip848.group.consumer.session.timeout.ms=10000" reads "session.timeout.ms=10000")."""
    return re.sub(r"(?:[\w-]+\.)+(?=[\w-]+\.[\w-]+\.[\w-]+=)", "", cell)


def utilisation_curve(points: pd.DataFrame, path: Path, *, article: dict[str, float] | None = None,
                      assumed: float | None = None, metric: str = LATE) -> Path | None:
    """Each cell's median (min-max bars) of `value` against `utilisation`, a line per `cell`; the article's
    figures as horizontal dashed lines, in the colour of the cell whose `strategy` they belong to, and the
    utilisation a scenario assumes as a dotted vertical line."""
    if points.empty:
        return None
    fig, ax = plt.subplots(figsize=(8, 5))
    cells = list(dict.fromkeys(points["cell"]))
    colors = {cell: STRATEGY_COLORS[index % len(STRATEGY_COLORS)] for index, cell in enumerate(cells)}
    for cell in cells:
        by_load = points[points["cell"] == cell].groupby("utilisation")["value"]
        loads = np.array(sorted(by_load.groups), dtype=float)
        median = by_load.median().reindex(loads).to_numpy()
        low, high = by_load.min().reindex(loads).to_numpy(), by_load.max().reindex(loads).to_numpy()
        runs = by_load.count().reindex(loads).to_numpy()
        ax.errorbar(loads, median, yerr=[median - low, high - median], marker="o", capsize=4, color=colors[cell],
                    label=f"{_short_settings(cell)} (n = {_span(int(runs.min()), int(runs.max()))} a point)")
    for strategy, figure in (article or {}).items():
        owner = next((cell for cell in cells if cell.endswith(f"/{strategy}")), None)
        ax.axhline(figure, color=colors.get(owner, "#555555"), ls="--", lw=1,
                   label=f"the article: {strategy}, {figure:,.0f}")
    if assumed is not None:
        ax.axvline(assumed, color="#555555", ls=":", lw=1, label=f"seed002's utilisation ({assumed:.2f})")
    ax.set_yscale("symlog", linthresh=10)
    ax.set_ylim(bottom=0)   # a count: symlog would otherwise mirror its ticks below zero
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
    ax.set_xlabel("utilisation of the 50 members (offered load / capacity)")
    ax.set_ylabel(metric)
    ax.set_title(_title(f"{metric} over the whole run against utilisation (median, bars min-max): where the "
                        "article's figures (dashed) meet a strategy's curve is the load they imply.", 80),
                 fontsize=10)
    ax.grid(which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _timeline_handles(run: RunData) -> list[tuple[object, str]]:
    """Legend entries for the marks `_draw_timeline` makes: the fault window and the instant fault always,
    the membership change when the run has one."""
    marks = [(Patch(facecolor=FAULT_COLOR, alpha=0.45), "fault window"),
             (Line2D([], [], color=INSTANT_COLOR, marker="v", ms=7, lw=0.8), "instant fault")]
    if any(map(is_membership_phase, run.phases.get("phase", []))) or \
            any(map(is_membership_change, run.faults.get("kind", []))):
        marks.append((Line2D([], [], color=MEMBERSHIP_COLOR, ls="--", lw=1), "member joins or leaves"))
    return marks


def ownership(run: RunData, path: Path) -> Path:
    """One lane per partition; a bar per ownership interval, coloured by member."""
    intervals = run.ownership
    partitions = sorted(set(intervals["tp"]) | set(run.double["tp"] if len(run.double) else []),
                        key=_tp_key)
    lane = {tp: i for i, tp in enumerate(partitions)}
    members = sorted(set(intervals["member"]))
    palette = plt.get_cmap("tab20")
    color = {m: palette(i % 20) for i, m in enumerate(members)}
    height = max(3.4, min(0.28 * len(partitions) + 2.2, 16))
    fig, ax = plt.subplots(figsize=(12, height))
    span_s = float(intervals["end"].max()) if len(intervals) else 1.0
    labels = _draw_timeline(ax, run, span_s)
    for row in intervals.itertuples():
        ax.barh(lane[row.tp], row.end - row.start, left=row.start, height=0.7, color=color[row.member], lw=0)
    for row in run.double.itertuples():
        ax.barh(lane[row.tp], max(row.end - row.start, 0.05), left=row.start, height=0.95, fill=False,
                edgecolor=DOUBLE_COLOR, hatch="xxx", lw=1.5)
    ax.set_yticks(range(len(partitions)))
    ax.set_yticklabels(partitions, fontsize=7 if len(partitions) > 20 else 9)
    ax.set_xlabel("seconds since the run started")
    ax.set_ylabel("partition")
    ax.grid(axis="x", alpha=0.3)
    handles = [Patch(color=color[m], label=m) for m in members[:12]]
    if len(members) > 12:
        handles.append(Patch(color="white", label=f"... {len(members) - 12} more members"))
    handles += [Patch(fill=False, edgecolor=DOUBLE_COLOR, hatch="xxx", label="double ownership")]
    for handle, name in _timeline_handles(run):
        handle.set_label(name)
        handles.append(handle)
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    seconds = float(run.double["duration_s"].sum()) if len(run.double) else 0.0
    ax.set_xlim(left=0)
    ax.set_title(_title("Who owned each partition when: a gap in a lane is a partition nobody consumed, red "
                        "hatching two members owning it at once.", 130) +
                 f"\n{run.label}: {len(run.double)} double-ownership windows, {seconds:.2f} s in total",
                 fontsize=10, loc="left")
    ax.set_ylim(len(partitions) - 0.5, -0.5)
    fig.tight_layout()
    band = _place_labels(ax, labels)
    lanes = len(partitions) / (1 - band)
    ax.set_ylim(len(partitions) - 0.5, len(partitions) - 0.5 - lanes)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _tp_key(tp: str) -> tuple[str, int]:
    topic, _, number = tp.rpartition("-")
    return (topic, int(number)) if number.isdigit() else (tp, -1)


def herd(points: pd.DataFrame, path: Path, runs: list[RunData] | None = None) -> Path | None:
    """The herd curve, one colour per backend: each run's join (filled) and leave (hollow), the fitted
    model of the join over them where the runs allow one (`runs`), the server's own count where recorded."""
    if points.empty:
        return None
    fig = herd_figure(points, runs)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def herd_lines(points: pd.DataFrame) -> list[tuple[str, str]]:
    """The herd plot's lines: (backend, strategy) pairs, a backend's default strategy first."""
    points = points if "strategy" in points else points.assign(strategy="")
    pairs = {(str(backend), str(strategy)) for backend, strategy in zip(points["backend"], points["strategy"],
                                                                           strict=True)}

    def default_first(pair: tuple[str, str]) -> tuple:
        known = _profile_of(pair[0])
        default = known.default_strategy if known is not None else ""
        return (pair[0], pair[1] != default, pair[1])

    return sorted(pairs, key=default_first)


SECOND_STRATEGY_MARKERS = ("v", "X", "P")


def herd_figure(points: pd.DataFrame, runs: list[RunData] | None = None):
    from experiments.summary.herd_model import HerdModel, change_rows, curve, fit_models, line_label

    fig, ax = plt.subplots(figsize=(7.5, 5.4))
    points = points if "strategy" in points else points.assign(strategy="")
    rows = change_rows(runs) if runs else pd.DataFrame()
    models = {(model.backend, model.strategy): model for model in fit_models(rows, kinds=("join",))
              if isinstance(model, HerdModel)} if not rows.empty else {}
    backends = sorted(points["backend"].unique())
    lines = herd_lines(points)
    for backend, strategy in lines:
        group = points[(points["backend"] == backend) & (points["strategy"] == strategy)].sort_values("N")
        color, marker = backend_style(backend, backends)
        rank = [line for line in lines if line[0] == backend].index((backend, strategy))
        if rank:   # a backend's second strategy: its colour, another marker, dashed
            marker = SECOND_STRATEGY_MARKERS[(rank - 1) % len(SECOND_STRATEGY_MARKERS)]
        dashes = "--" if rank else "-"
        name = line_label(backend, strategy)
        changes = rows[(rows["backend"] == backend) & (rows["strategy"] == strategy)] if not rows.empty else rows
        if not changes.empty:    # each run's join and leave, as measured
            for kind, filled in (("join", True), ("leave", False)):
                measured = changes[changes["kind"] == kind].groupby(["N", "run"])["requests"].median().reset_index()
                if measured.empty:
                    continue
                ax.plot(measured["N"], measured["requests"].clip(lower=0.5), ls="none", marker=marker,
                        color=color, mfc=color if filled else "none", ms=6 if filled else 5,
                        label=f"{name}: {kind}, measured" + ("" if filled else " (hollow)"))
        else:
            ax.plot(group["N"], group["requests_per_change"].clip(lower=0.5), marker=marker, color=color, lw=1.6,
                    ls=dashes, label=f"{name}: requests per change")
        model = models.get((backend, strategy))
        if model is not None:    # the fitted join model, over the sizes measured
            joins = changes[(changes["kind"] == "join") & ~changes["overlapped"]]
            label = f"{name} model: {model.formula}"
            if "moved" in model.terms:   # M is measured per run, not a function of N: the model at those points
                at = joins.groupby("N")["M"].median()
                ax.plot(at.index, curve(model, at.index.to_numpy(dtype=float), moved=at.to_numpy()).clip(0.5),
                        color=color, lw=1.4, ls=dashes, label=label)
            elif "P" in model.terms:     # a grid of fixed partition counts: one curve per P, over its sizes
                for index, (partitions, cell) in enumerate(joins.groupby("P")):
                    sizes = np.geomspace(cell["N"].min(), max(cell["N"].max(), cell["N"].min() * 1.01), 60)
                    ax.plot(sizes, curve(model, sizes, partitions=float(partitions)).clip(0.5), color=color, lw=1.4,
                            ls=("-", "--", ":")[index % 3], label=f"{label} (P = {partitions})")
            else:                        # P in step with N (folded into the N term), or a constant
                sizes = np.geomspace(joins["N"].min(), joins["N"].max(), 60)
                ax.plot(sizes, curve(model, sizes).clip(0.5), color=color, lw=1.4, ls=dashes, label=label)
        witnessed = group.dropna(subset=["server_requests_per_change"]) \
            if "server_requests_per_change" in group else group.iloc[0:0]
        if not witnessed.empty:   # the server's own count, beside the members' (a line only with one run a size)
            one_per_size = witnessed["N"].is_unique
            ax.plot(witnessed["N"], witnessed["server_requests_per_change"].clip(lower=0.5), marker=marker,
                    color=color, lw=1.0, ls="-." if one_per_size else "none", mfc="none", alpha=0.7,
                    label=f"{name}: as the server counted them")
    ax.set_xscale("log")
    ax.set_yscale("log")

    def label(value: float, _=None) -> str:
        return f"{value:,.0f}" if value >= 1 else f"{value:g}"

    def two_and_five(value: float, _=None) -> str:   # minor ticks between decades: only 2x and 5x labelled
        return label(value) if f"{value:e}"[0] in "25" else ""

    plain = FuncFormatter(label)
    sizes = sorted(points["N"].unique())
    if len(sizes) <= 12:     # tick the group sizes measured, when they fit
        ax.set_xticks(sizes)
    ax.xaxis.set_major_formatter(plain)
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(FuncFormatter(two_and_five))
    ax.set_xlabel("group size N (members before the change)")
    ax.set_ylabel("requests per membership change")
    ax.set_title(_title("Herd effect: what one member joining (filled) or leaving (hollow) costs as the group "
                        "grows; lines: the fitted cost model of a join (N: members, P: partitions, M: members "
                        "whose assignment changed).", 72), fontsize=10)
    ax.grid(which="both", alpha=0.3)
    # Below the axes: inside, a dozen entries would cover whichever curve runs along the top.
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, frameon=False)
    fig.set_figheight(5.4 + 0.16 * -(-len(ax.get_legend_handles_labels()[1]) // 2))
    fig.tight_layout()
    return fig
