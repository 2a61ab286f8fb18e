"""docs/results.md from the campaigns' data folders (`rebalance-lab results docs/results-data/NAME ...`, see
`results_data`) or from campaign folders: the claims the campaign files declared, each with its verdict, its
exact p and Holm's over the k declared claims; the power the files ask for; every figure as
`median [min-max], n`; and the differences between cells that survive the page's false discovery rate, each
with both cells' values.

Several folders are pooled run by run: the statistics are computed again over every folder's runs, so a
campaign that adds a backend or a size (`kip848`) extends the same tables and comparisons. The page is a
function of the folders' contents alone (no clock, no paths other than the data folders' names and the notes
file as given), so the data folders in the repository make it again byte for byte."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from experiments.campaign.model import declared_claims, declared_detections
from experiments.report.claim_figures import claim_figures_section
from experiments.report.conditions_page import conditions_lines
from experiments.report.looks import (
    RULE,
    Current,
    Look,
    earlier_looks,
    latest_only,
    looks_csv,
    looks_markdown,
    new_looks,
    read_looks,
    same_code_looks,
)
from experiments.report.results_data import CampaignData, read
from experiments.report.seed002_table import load_sweep_section, seed002_section
from experiments.statistics.campaign_stats import (
    COORDINATOR_GAP,
    GAP_LOOKUPS,
    cell_statistics,
    comparisons,
    differences_table,
    page_counts,
    spread,
)
from experiments.statistics.claims import SUPPORTED, claims_markdown, evaluate_family
from experiments.statistics.inference import CLAIM_TEST
from experiments.statistics.load_sweep import sweep_label
from experiments.statistics.measure_names import LATE_OR_LOST, measure_name
from experiments.statistics.power import amount, claim_powers, power_markdown
from experiments.summary import markdown_table
from experiments.summary.herd_model import TERM_MEANING

DATA_ROOT = "docs/results-data"

HERD = ("requests per change", "notifications per change", "stable after (s)", "stop-the-world (s)",
        "partition-seconds unowned")
ANOMALIES = ("double-ownership (s)", "duplicates", "offset regressions", "fenced commits")
# Split brain adds the time without a coordinator, where a scenario kills the coordinator's broker or cuts
# a member's coordination link (split-brain-d), and the lookups the members made meanwhile.
SPLIT_BRAIN = (*ANOMALIES, COORDINATOR_GAP, GAP_LOOKUPS)


def results_markdown(folders: list[Path], notes: Path | None = None, looks: Path | None = None) -> str:
    """The results page from data folders (`results_data`) or summarised campaign folders (read as their
    data folders would be). `notes`: a Markdown file of readings written by hand (which differences held
    up, and why), placed after the header; `looks`: the ledger of every look at a declared claim
    (docs/results-data/looks.csv, `experiments.report.looks`)."""
    campaigns = [read(folder) for folder in folders]
    paths = [page_path(data.name, folder) for data, folder in zip(campaigns, folders, strict=True)]
    return results_page(campaigns, notes, paths, looks)


def page_path(name: str, folder: Path | None = None) -> str:
    """How the page names a campaign's data folder: from `docs/results-data` on when the folder lies under it
    (so a superseded one, `docs/results-data/earlier/NAME`, is named where it is), else DATA_ROOT/NAME."""
    parts = folder.resolve().parts if folder is not None else ()
    for at in range(len(parts) - 1):
        if "/".join(parts[at:at + 2]) == DATA_ROOT:
            return "/".join(parts[at:])
    return f"{DATA_ROOT}/{name}"


def page_claims(campaigns: list[CampaignData], paths: list[str], ledger: list[Look]) -> tuple[list, list[Current]]:
    """The page's claims, each tested on its own campaign's runs, in a family of the declared claims and the
    ledger's looks that count (`looks.same_code_looks`); and where each claim's current look stands."""
    claims = [(data.name, data.runs, declared_claims(data.text)) for data in campaigns]
    currents = [Current(data.name, claim.says, path, _claim_code(data, claim))
                for data, path in zip(campaigns, paths, strict=True) for claim in declared_claims(data.text)]
    return evaluate_family(claims, earlier=len(same_code_looks(currents, ledger))), currents


def _claim_code(data: CampaignData, claim) -> str:
    """The commit whose code made a claim's runs: the campaign's, unless the runs of one of the claim's backends
    were withdrawn and made again (`results_data.withdraw`); then the commit that made them again, so a look at
    the changed runs is a new look, on new code."""
    backends = {cell.split("/")[0] for cell in (*claim.higher, *claim.lower)}
    remade = {item["backend"] for item in data.info.get("withdrawn") or []} & backends
    commits = set(data.runs.loc[(data.runs["scenario"] == claim.scenario) & data.runs["backend"].isin(remade),
                                "commit"].dropna())
    return commits.pop() if len(commits) == 1 else data.info.get("commit") or ""


def append_looks(folders: list[Path], ledger_path: Path, date: str) -> list[Look]:
    """Add to the ledger the page's current looks it lacks (`./lab looks DATA... --looks FILE --date D`);
    returns the rows added."""
    campaigns = [read(folder) for folder in folders]
    paths = [page_path(data.name, folder) for data, folder in zip(campaigns, folders, strict=True)]
    ledger = read_looks(ledger_path)
    results, currents = page_claims(campaigns, paths, ledger)
    added = new_looks(currents, ledger, results, test=CLAIM_TEST, date=date)
    if added:
        ledger_path.write_text(looks_csv([*ledger, *added]))
    return added


def results_page(campaigns: list[CampaignData], notes: Path | None = None,
                 paths: list[str] | None = None, looks: Path | None = None) -> str:
    runs = pd.concat([data.runs for data in campaigns], ignore_index=True)
    cells, compared = cell_statistics(runs), comparisons(runs)
    names = [data.name for data in campaigns]
    paths = paths or [page_path(name) for name in names]
    ledger = read_looks(looks)
    results, currents = page_claims(campaigns, paths, ledger)
    k = results[0].k if results else 0
    same = same_code_looks(currents, ledger)
    family = (RULE.format(ledger=looks, rows=len(ledger), first=min((look.date for look in ledger), default="-"),
                          same=len(same), declared=len(currents), k=k) if looks else "")
    latest = {index: latest_only(earlier_looks(current, ledger, CLAIM_TEST), current)
              for index, (current, result) in enumerate(zip(currents, results, strict=True))
              if result.verdict == SUPPORTED}
    powers = [power for data in campaigns
              for power in claim_powers(data.name, data.runs, declared_claims(data.text),
                                        declared_detections(data.text), k)]
    parts = [
        "# Results measured on this machine\n",
        "What the campaigns decided, claim by claim in figures first; then the statistics that decide them, and "
        "every cell's figures by design (the herd, split brain, seed 002). Regenerate this page from the data in "
        "the repository alone (`--figures docs/figures` draws its figures again):\n",
        "```sh\n./lab results " + " ".join(paths)
        + (f" --notes {notes}" if notes else "") + (f" --looks {looks}" if looks else "") + " > docs/results.md\n```\n",
        *claim_figures_section(campaigns, results),
        claims_markdown(results, family=family, notes={index: note for index, note in latest.items() if note}),
        *([power_markdown(powers, k, model_lines(campaigns))] if powers else []),
        *(_folded_under_heading(looks_markdown(currents, ledger, results, test=CLAIM_TEST), "every look at every claim")
          if looks else []),
        "Every figure is `median [min-max], n = runs`. Counts the schedule fixes (requests, notifications, "
        f"offset regressions) vary little between runs; measures timing can move (durations, duplicates, "
        f"{LATE_OR_LOST}, fenced commits) vary more on two shared cores, and more when a campaign runs "
        "two cells at a time (`--parallel 2`): from such runs they are shown and never compared "
        "(docs/campaigns.md).\n",
        *(_campaign_line(data.info) for data in campaigns),
        *_provenance(campaigns),
        *conditions_lines(campaigns),
        "\nHow the data was made (`runs/` is not in the repository; the data folders are):\n",
        "```sh\n" + "".join(f"./lab campaign {name} --out runs/{name} --data {path}{_parallel(data.info)}\n"
                            for name, path, data in zip(names, paths, campaigns, strict=True)) + "```\n",
        "A campaign longer than a session runs in parts: the same command again resumes it, leaving out the runs "
        "its data folder holds and adding the new ones when the part stops. For a campaign made in one go, "
        "`./lab results-data runs/NAME --out FOLDER` writes the same data folder from its run folder.\n",
    ]
    if notes:
        parts.append(notes.read_text().rstrip() + "\n")
    parts += _herd_section(cells)
    parts += cost_model_section(campaigns)
    parts += _per_cell_section(cells, "split-brain", "Split brain", SPLIT_BRAIN)
    parts += _per_cell_section(cells, "churn", "Strategies under churn (seed 002, scenario 2)", None)
    parts += seed002_section(cells)
    parts += load_sweep_section(cells)
    parts += _per_cell_section(cells, OTHER, "Other scenarios", ANOMALIES)
    parts += _differences(compared)
    return "\n".join(parts)


def model_lines(campaigns: list[CampaignData]) -> list[str]:
    """What each campaign file's model assumes, beside what its runs show."""
    return [_model_line(data, detect) for data in campaigns for detect in declared_detections(data.text)]


def _model_line(data: CampaignData, detect) -> str:
    rows = data.runs[(data.runs["metric"] == detect.metric)
                     & ((data.runs["scenario"] == detect.scenario) if detect.scenario else True)]
    groups = [group["value"].to_numpy(dtype=float) for _, group in rows.groupby(["scenario", "backend", "strategy",
                                                                                  "sweep"])]
    constant = [values[0] for values in groups if np.all(values == values[0])]
    varying = [float(np.std(values, ddof=1)) for values in groups if len(values) > 1 and not np.all(values == values[0])]
    where = f" in {detect.scenario}" if detect.scenario else ""
    said = (f"`{data.name}`, {measure_name(detect.metric)}{where}: the file's model is normal with sd "
            f"{amount(detect.sd)} in every cell; its runs: ")
    parts = []
    if constant:
        values = ", ".join(amount(value) for value in sorted(set(constant)))
        parts.append(f"{len(constant)} of {len(groups)} cells gave one value in every run ({values})")
    if varying:
        parts.append(f"{len(varying)} of {len(groups)} varied, sd {amount(min(varying))}"
                     + (f" to {amount(max(varying))}" if max(varying) != min(varying) else ""))
    return said + "; ".join(parts) + "."


def _seeds(seeds: list[int]) -> str:
    if not seeds:
        return "-"
    return f"{seeds[0]}-{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) else ", ".join(map(str, seeds))


def _campaign_line(info: dict) -> str:
    machine = info.get("machine") or {}
    commit = info.get("commit") or "?"
    later = {other: count for other, count in (info.get("commits") or {}).items() if other != commit}
    resumed = "".join(f", {count} runs from commit `{other[:12]}`" for other, count in sorted(later.items()))
    resumed += "".join(
        f"; {item['runs']} earlier runs of {item['backend']} (commit "
        + ", ".join(f"`{other[:12]}` {count}" for other, count in item["commits"].items())
        + f") withdrawn and made again: {item['reason']}" for item in info.get("withdrawn") or [])
    return (f"- campaign `{info['campaign']}`: {info['runs_completed']} of {info['runs_planned']} runs completed, "
            f"{info['repetitions']} repetitions per cell, seeds {_seeds(info.get('seeds') or [])}, --parallel "
            f"{info.get('parallel', 1)}; commit `{commit[:12]}`{resumed}, {machine.get('cores')} cores, "
            f"{(machine.get('memory_bytes') or 0) / 2**30:.0f} GiB")


def _provenance(campaigns: list[CampaignData]) -> list[str]:
    lines = [f"- `{data.name}`: {data.info['runs_beside_another']} of {data.info['runs_completed']} runs ran beside "
             "another run (`--parallel` > 1); the counts the schedule fixes are compared, the measures timing can "
             "move are shown but never compared." for data in campaigns if data.info.get("runs_beside_another")]
    return [*lines, ""] if lines else []


def _parallel(info: dict) -> str:
    """The `--parallel` the campaign's runs were made with, when more than one at a time."""
    most = info.get("parallel") or 1
    return f" --parallel {most}" if most > 1 else ""


def _cell_label(row, strategies: int = 1) -> str:
    """The backend, the strategy when it is not range or when the scenario ran several, and the sweep's point
    when the cell has one (`u = 0.60` for a service time, else the sweep's settings)."""
    swept = sweep_label(row.scenario, row.sweep)
    return (f"{row.backend}" + (f" {row.strategy}" if row.strategy != "range" or strategies > 1 else "")
            + (f" ({swept})" if swept else ""))


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
    herd = herd.assign(P=herd["sweep"].map(_partitions))
    designs = [(f"P = 2N, every member has work ({', '.join(sorted(set(herd[herd['P'] == '2N']['scenario'])))})",
                herd[herd["P"] == "2N"]),
               (f"P fixed whatever N (the legacy grid: {', '.join(sorted(set(herd[herd['P'] != '2N']['P']), key=int))})",
                herd[herd["P"] != "2N"])]
    for kind in sorted(kinds):
        for design, chosen in designs:
            if chosen.empty:
                continue
            rows = []
            for (_order, size, backend, strategy), group in chosen.assign(P_order=chosen["P"].map(_p_order)).groupby(
                    ["P_order", "group_size", "backend", "strategy"], sort=True):
                row = {"N": int(size) if pd.notna(size) else "-", "P": group["P"].iloc[0], "backend": backend,
                       "strategy": strategy}
                for metric in HERD:
                    match = group[group["metric"] == f"{kind}: {metric}"]
                    row[measure_name(metric)] = spread(*_stats(match)) if len(match) else "-"
                rows.append(row)
            lines += [f"### {kind}: {design}\n", markdown_table(pd.DataFrame(rows))]
    return lines


def _p_order(partitions: str) -> int:
    """A table of one design lists its fixed P in order, each P's rows by N."""
    return 0 if partitions == "2N" else int(partitions)


def _partitions(sweep: str) -> str:
    """A herd cell's partition count as its sweep sets it, else the scenario's (2N): cells of one N and
    different P are different cells, never pooled."""
    for setting in str(sweep).split(", "):
        if setting.startswith("topics.") and setting.split("=")[0].endswith(".partitions"):
            return setting.split("=", 1)[1]
    return "2N"


def cost_model_section(campaigns: list[CampaignData]) -> list[str]:
    """Each herd campaign's cost model (experiments.summary.herd_model), fitted per repetition from its
    data folder's changes.csv: the terms of each backend's profile, each coefficient median [min-max] over
    the fits, n = fits."""
    from experiments.summary.herd_model import HerdModel, fit_models

    rows = []
    for data in campaigns:
        for model in fit_models(data.changes) if len(data.changes) else []:
            if not isinstance(model, HerdModel):
                rows.append({"campaign": data.name, "line": model.label, "change": model.kind,
                             "fitted requests": f"no fit: {model.reason}", "coefficients": "-", "fits": 0,
                             "largest residual": "-", "N": "-", "P": "-"})
                continue
            coefficients = "; ".join(
                f"{TERM_MEANING[c.term]} {_coefficient(c.median)} [{_coefficient(c.low)}, {_coefficient(c.high)}]"
                for c in model.coefficients)
            rows.append({"campaign": data.name, "line": model.label, "change": model.kind,
                         "fitted requests": model.formula + (f" ({model.folded})" if model.folded else ""),
                         "coefficients": coefficients, "fits": model.fits,
                         "largest residual": f"{model.worst_residual:.0%}",
                         "N": ", ".join(f"{n:,}" for n in model.sizes),
                         "P": ", ".join(f"{p:,}" for p in model.partitions)})
    if not rows:
        return []
    return ["## The herd's cost model\n",
            "What one change costs, fitted by least squares once per repetition (the r-th run of every cell) "
            "with the terms each protocol's steps make it grow with (docs/analysis.md): legacy a·N² + b·N + c·P "
            "+ d, classic a·N + d, kip848 a·M + d (M: members whose assignment changed). Each coefficient is the "
            "median [min, max] over the fits, n = fits; a fit needs four group sizes. Changes that overlapped "
            "the next are left out. When P is 2N in every run, the P term is part of the N term.\n",
            markdown_table(pd.DataFrame(rows))]


def _coefficient(value: float) -> str:
    """A fitted coefficient; one within 1e-9 of zero is the least squares' rounding (it differs from one
    BLAS to the next, -2e-16 here, -8e-16 there) and is printed 0, so the page is the same bytes on both."""
    if abs(value) < 1e-9:
        return "0"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


WIDEST = 6  # cells side by side in a per-cell table; more are listed one a row
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
        table.index = [measure_name(metric) for metric in table.index]
        table.index.name = "metric"
        if len(columns) > WIDEST:   # many cells (a sweep): a row a cell reads better than a column a cell
            table = table.T.rename_axis("cell")
        lines += [f"### {scenario}\n", markdown_table(table.reset_index().fillna("-"))]
    return lines


def _differences(compared: pd.DataFrame) -> list[str]:
    lines = ["## Which differences hold up\n",
             "Each pair of cells of one scenario and size on each metric (backends at the same strategy, "
             "strategies on the same backend, and cells that differ in both), by the exact two-sided Mann-Whitney "
             "test, only with at least 5 runs a side. Its null, in words: the two cells' runs come from one "
             "distribution. A difference listed says they do not, in place, spread or shape; the difference of "
             "their medians (b - a) says which median is higher, with an interval from each cell's "
             "order-statistic interval of its median and the coverage it has for any distributions (\"≥\": a "
             "bound). A difference is listed, with both cells' values, only if it survives Benjamini-Hochberg "
             "over every test on this page. A pair not listed is not shown to differ, which is not the same as "
             "equal.\n"]
    if compared.empty:
        return [*lines, "_(no pairs of cells to compare)_\n"]
    lines.append(page_counts(compared) + " Each campaign folder's `statistics/comparisons.parquet` lists every "
                 "comparison with its reading.\n")
    held = compared[compared["difference"]]
    if held.empty:
        return lines
    return [*lines, *_folded(markdown_table(differences_table(held)),
                             f"the {len(held):,} differences that hold up, each with both cells' values")]


def _folded_under_heading(text: str, what: str) -> list[str]:
    """A section whose heading stays in view and whose body is folded."""
    heading, _, body = text.partition("\n")
    return [heading + "\n", *_folded(body, what)]


def _folded(text: str, what: str) -> list[str]:
    """A long table behind a click: the page's reader meets the claims and their figures first."""
    return [f"<details>\n<summary>Show {what}</summary>\n", text.rstrip() + "\n", "</details>\n"]


def _stats(rows: pd.DataFrame) -> tuple[float, float, float, int]:
    row = rows.iloc[0]
    return row["median"], row["min"], row["max"], int(row["runs"])
