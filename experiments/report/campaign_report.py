"""A campaign's report: the spread of every metric across repetitions, drawn and tabulated.

    herd.png        requests per change against group size, log-log, median with a min-max bar per N
    utilisation.png records over the limit against utilisation, for a sweep of the service time (seed002-load)
    <metric>.png    strip plots: one dot per run, a bar at the median, per cell (split brain, churn)
    report.md/.html what the runs show, then a section per scenario (experiments.report.campaign_page)

The figures come from the per-run metrics alone (`draw_figures`), so `rebalance-lab results DATA --figures DIR`
draws the same ones from a results-data folder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from experiments.folders.campaign_folder import CampaignFolder
from experiments.report.plots import backend_style  # noqa: E402

STRIP_METRICS = ("double-ownership (s)", "duplicates", "offset regressions", "fenced commits")


@dataclass
class CampaignReport:
    markdown: Path
    html: Path
    images: list[Path]


def write_campaign_report(folder: Path) -> CampaignReport:
    place = CampaignFolder(folder)
    runs = pd.read_parquet(place.statistics_table("runs"))
    cells = pd.read_parquet(place.statistics_table("cells"))
    out = place.report.path
    out.mkdir(exist_ok=True)
    images = draw_figures(runs, out)
    from experiments.report.campaign_page import write_campaign_pages

    text = place.statistics_markdown.read_text()
    lines = text.splitlines()
    markdown, page = write_campaign_pages(out, title=lines[0].lstrip("# "), meta=lines[2] if len(lines) > 2 else "",
                                          cells=cells, compared=pd.read_parquet(place.statistics_table("comparisons")),
                                          images=images)
    return CampaignReport(markdown=markdown, html=page, images=images)


def draw_figures(runs: pd.DataFrame, out: Path) -> list[Path]:
    """Every figure the runs have data for, written to `out`. `runs`: per-run metrics, as a campaign's
    statistics or a results-data folder hold them (so the docs' figures are drawn again from the repository)."""
    out.mkdir(parents=True, exist_ok=True)
    metrics = [*STRIP_METRICS, *sorted(m for m in runs["metric"].unique() if m.endswith(": records lost"))]
    images = [_herd_plot(runs, out), *(_strip_plot(runs, metric, out) for metric in metrics),
              _utilisation_plot(runs, out)]
    return [image for image in images if image is not None]


def _herd_plot(runs: pd.DataFrame, out: Path) -> Path | None:
    wanted = runs[runs["metric"].str.endswith(": requests per change") & runs["n"].notna()]
    if wanted.empty or wanted["n"].nunique() < 2:
        return None
    figure, axis = plt.subplots(figsize=(7, 4.5))
    backends = sorted(wanted["backend"].unique())
    kinds = sorted({metric.split(":")[0] for metric in wanted["metric"]})
    for (backend, metric), rows in wanted.groupby(["backend", "metric"]):
        color, marker = backend_style(backend, backends)
        dashes = ("-", "--", ":", "-.")[kinds.index(metric.split(":")[0]) % 4]    # join and leave apart
        by_n = rows.groupby("n")["value"]
        ns = np.array(sorted(by_n.groups), dtype=float)
        median = by_n.median().reindex(ns).to_numpy()
        low, high = by_n.min().reindex(ns).to_numpy(), by_n.max().reindex(ns).to_numpy()
        counts = by_n.count().reindex(ns).to_numpy()
        slope = np.polyfit(np.log(ns), np.log(np.maximum(median, 1e-9)), 1)[0]
        slope = round(slope, 2) + 0.0   # a flat line is 0.00, not -0.00
        axis.errorbar(ns, median, yerr=[median - low, high - median], marker=marker, color=color, ls=dashes, capsize=4,
                      label=f"{backend}, {metric.split(':')[0]} (slope {slope:.2f}, n = {int(counts.min())}-{int(counts.max())})")
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("group size N")
    axis.set_ylabel("coordination requests per change")
    axis.set_title("Herd effect: how one change's cost grows with N, per backend (the steeper line grows faster)\n"
                   "(median of the repetitions, bars from min to max)", fontsize=10)
    axis.legend(fontsize=8)
    axis.grid(True, which="both", alpha=0.3)
    path = out / "herd.png"
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _utilisation_plot(runs: pd.DataFrame, out: Path) -> Path | None:
    """Records over the limit against utilisation, with seed 002's totals marked, where the campaign swept the
    workload's service time over two utilisations or more."""
    from experiments.report.plots import utilisation_curve
    from experiments.statistics.load_sweep import ARTICLE_TOTALS, scenario_utilisation, utilisation_points

    points = utilisation_points(runs)
    if points.empty or points["utilisation"].nunique() < 2:
        return None
    scenario = str(runs.loc[runs["sweep"].str.contains("workload.", regex=False), "scenario"].iloc[0])
    return utilisation_curve(points, out / "utilisation.png", article=ARTICLE_TOTALS,
                             assumed=scenario_utilisation(scenario))


def _strip_plot(runs: pd.DataFrame, metric: str, out: Path) -> Path | None:
    rows = runs[runs["metric"] == metric]
    if rows.empty or not rows["value"].any():   # nothing to see where every run has zero
        return None
    rows = rows.assign(cell=rows["scenario"] + "\n" + rows["backend"] + "/" + rows["strategy"]
                       + rows["sweep"].map(lambda s: "" if s == "-" else f"\n{s}"))
    cells = list(dict.fromkeys(rows["cell"]))
    figure, axis = plt.subplots(figsize=(max(5, 1.3 * len(cells) + 2), 4))
    rng = np.random.default_rng(0)
    labels = []
    for index, cell in enumerate(cells):
        values = rows[rows["cell"] == cell]["value"].to_numpy(dtype=float)
        axis.scatter(index + rng.uniform(-0.12, 0.12, len(values)), values, s=22, alpha=0.8)
        axis.hlines(np.median(values), index - 0.3, index + 0.3, color="black", linewidth=2)
        labels.append(f"{cell}\nn = {len(values)}")
    axis.set_xticks(range(len(cells)), labels, fontsize=7)
    axis.set_ylabel(metric)
    axis.set_title(f"{metric} in each run (dots) and the median (bar): where the cells' dots do not overlap, "
                   "the difference is real", fontsize=9, wrap=True)
    axis.grid(True, axis="y", alpha=0.3)
    path = out / (re.sub(r"[^A-Za-z0-9]+", "-", metric).strip("-").lower() + ".png")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
