"""docs/results.md from campaign folders (`rebalance-lab results DIR [DIR ...]`): the claims the campaign
files declared, each with its verdict; every figure as `median [min-max], n`; and the differences between
backends and strategies that survive the page's false discovery rate.

Several folders are pooled run by run: the statistics are computed again over every folder's runs, so a
campaign that adds a backend or a size (`kip848`) extends the same tables and comparisons."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pandas as pd

from experiments.campaign.manifest import COMPLETED, Manifest
from experiments.campaign.model import declared_claims
from experiments.summary import markdown_table
from experiments.summary.campaign_stats import (
    COORDINATOR_GAP,
    GAP_LOOKUPS,
    cell_statistics,
    comparisons,
    number,
    page_counts,
    provenance_lines,
    run_metrics,
    spread,
)
from experiments.summary.claims import claims_markdown, evaluate

HERD = ("requests per change", "notifications per change", "stable after (s)", "stop-the-world (s)",
        "partition-seconds unowned")
ANOMALIES = ("double-ownership (s)", "duplicates", "offset regressions", "fenced commits")
# Split brain adds the time without a coordinator, where a scenario kills the coordinator's broker or cuts
# a member's coordination link (split-brain-d), and the lookups the members made meanwhile.
SPLIT_BRAIN = (*ANOMALIES, COORDINATOR_GAP, GAP_LOOKUPS)


def results_markdown(folders: list[Path], notes: Path | None = None) -> str:
    """The results page from one or more campaign folders whose runs are summarised (the metrics are read
    from the runs' summaries again, so the page follows the current definitions). `notes`: a Markdown file
    of readings written by hand (which differences held up, and why), placed after the header."""
    runs = pd.concat([run_metrics(folder) for folder in folders], ignore_index=True)
    cells, compared = cell_statistics(runs), comparisons(runs)
    manifests = [Manifest.read(folder) for folder in folders]
    claims = [claim for folder in folders for claim in declared_claims((folder / "campaign.toml").read_text())]
    parts = [
        "# Results measured on this machine\n",
        claims_markdown(evaluate(runs, claims)),
        "Every figure is `median [min-max], n = runs`. Request and anomaly counts vary little between runs; "
        "timings vary a lot on two shared cores, and more when a campaign runs two cells at a time "
        "(`--parallel 2`, see docs/campaigns.md).\n",
        *(_campaign_line(manifest) for manifest in manifests),
        *provenance_lines(manifests),
        "\nRegenerate this page from the campaign folders:\n",
        "```sh\n" + "".join(f"./lab campaign {m.campaign['name']} --out runs/{m.campaign['name']}{_parallel(m)}\n"
                            for m in manifests)
        + "./lab results " + " ".join(f"runs/{m.campaign['name']}" for m in manifests)
        + (f" --notes {notes}" if notes else "") + " > docs/results.md\n```\n",
    ]
    if notes:
        parts.append(notes.read_text().rstrip() + "\n")
    parts += _herd_section(cells)
    parts += _per_cell_section(cells, "split-brain", "Split brain", SPLIT_BRAIN)
    parts += _per_cell_section(cells, "churn", "Strategies under churn (seed 002, scenario 2)", None)
    parts += _per_cell_section(cells, OTHER, "Other scenarios", ANOMALIES)
    parts += _differences(compared)
    return "\n".join(parts)


def _campaign_line(manifest: Manifest) -> str:
    machine = manifest.machine
    completed = sum(entry.status == COMPLETED for entry in manifest.runs.values())
    later = Counter(entry.git_commit for entry in manifest.runs.values()
                    if entry.status == COMPLETED and entry.git_commit not in (None, machine.get("git_commit")))
    resumed = "".join(f", {count} runs from commit `{commit[:12]}`" for commit, count in sorted(later.items()))
    return (f"- campaign `{manifest.campaign['name']}`: {completed} of {len(manifest.runs)} runs completed, "
            f"{manifest.campaign['repetitions']} repetitions per cell, seeds from {manifest.campaign['seed']}; "
            f"commit `{(machine.get('git_commit') or '?')[:12]}`{resumed}, {machine.get('cores')} cores, "
            f"{(machine.get('memory_bytes') or 0) / 2**30:.0f} GiB")


def _parallel(manifest: Manifest) -> str:
    """The `--parallel` the campaign's runs were made with, when more than one at a time."""
    most = max((entry.parallel or 1 for entry in manifest.runs.values() if entry.status == COMPLETED), default=1)
    return f" --parallel {most}" if most > 1 else ""


def _cell_label(row, strategies: int = 1) -> str:
    """The backend, and the strategy when it is not range or when the scenario ran several."""
    return f"{row.backend}" + (f" {row.strategy}" if row.strategy != "range" or strategies > 1 else "")


def _herd_section(cells: pd.DataFrame) -> list[str]:
    herd = cells[cells["scenario"].str.contains("herd") & cells["metric"].str.contains(": ")]
    if herd.empty:
        return []
    lines = ["## Herd effect: cost of one membership change\n",
             "A stable group of N, then one member joins and later one leaves. Per change: coordination "
             "requests, watch notifications, time until the last assignment, stop-the-world time and "
             "partition-seconds without an owner. Only the changes the scenario's timeline makes count, not "
             "the warm-up's first joins nor the teardown. A request is a ZooKeeper operation (legacy), a group "
             "request other than Heartbeat and OffsetCommit (classic), or a FindCoordinator, OffsetFetch or "
             "ConsumerGroupHeartbeat that joined, left, acknowledged or changed an assignment (kip848; "
             "docs/analysis.md). Each cell's topic size is its scenario's (the herd scenarios give every member "
             "work: P = 2N).\n"]
    kinds = {metric.split(": ")[0] for metric in herd["metric"] if metric.split(": ", 1)[1] in HERD}
    for kind in sorted(kinds):
        rows = []
        for (size, backend, strategy), group in herd.groupby(["group_size", "backend", "strategy"], sort=True):
            row = {"N": int(size) if pd.notna(size) else "-", "backend": backend, "strategy": strategy}
            for metric in HERD:
                match = group[group["metric"] == f"{kind}: {metric}"]
                row[metric] = spread(*_stats(match)) if len(match) else "-"
            rows.append(row)
        lines += [f"### {kind}\n", markdown_table(pd.DataFrame(rows))]
    return lines


OTHER = ""   # the prefix of `_per_cell_section` for every scenario that the sections above leave out


def _per_cell_section(cells: pd.DataFrame, prefix: str, title: str, metrics) -> list[str]:
    if prefix == OTHER:
        chosen = cells[~cells["scenario"].str.contains("herd") & ~cells["scenario"].str.startswith(("split-brain", "churn"))]
    else:
        chosen = cells[cells["scenario"].str.startswith(prefix)]
    if chosen.empty:
        return []
    lines = [f"## {title}\n"]
    for scenario, group in chosen.groupby("scenario", sort=True):
        wanted = metrics or [m for m in dict.fromkeys(group["metric"]) if ": records lost" in m
                             or ": max latency" in m] + ["duplicates", "double-ownership (s)"]
        columns, strategies = {}, group["strategy"].nunique()
        for row in group.itertuples():
            if row.metric in wanted:
                columns.setdefault(_cell_label(row, strategies), {})[row.metric] = spread(row.median, row.min,
                                                                                           row.max, row.runs)
        table = pd.DataFrame(columns).reindex([m for m in wanted if any(m in c for c in columns.values())])
        table.index.name = "metric"
        lines += [f"### {scenario}\n", markdown_table(table.reset_index().fillna("-"))]
    return lines


def _differences(compared: pd.DataFrame) -> list[str]:
    lines = ["## Which differences hold up\n",
             "Each pair of cells (backends at the same strategy and size, strategies on the same backend) on each "
             "metric, by the exact Mann-Whitney test, only with at least 5 runs a side; the shift is the "
             "Hodges-Lehmann estimate (b - a) with its distribution-free interval and that interval's coverage. "
             "A difference is listed only if it survives Benjamini-Hochberg over every test on this page. A pair "
             "not listed is not shown to differ, which is not the same as equal.\n"]
    if compared.empty:
        return [*lines, "_(no pairs of cells to compare)_\n"]
    lines.append(page_counts(compared) + " Each campaign folder's `statistics/comparisons.parquet` lists every "
                 "comparison with its reading.\n")
    held = compared[compared["difference"]]
    if held.empty:
        return lines
    table = held.assign(
        where=held["scenario"] + held["sweep"].map(lambda s: "" if s == "-" else f" ({s})"),
        pair=held["a"] + " vs " + held["b"],
        shift_interval=[f"{number(r.shift, 1)} [{number(r.ci_low, 1)}, {number(r.ci_high, 1)}] ({r.coverage:.0%})"
                        for r in held.itertuples()])
    return [*lines, markdown_table(table[["where", "metric", "pair", "shift_interval", "reading"]])]


def _stats(rows: pd.DataFrame) -> tuple[float, float, float, int]:
    row = rows.iloc[0]
    return row["median"], row["min"], row["max"], int(row["runs"])
