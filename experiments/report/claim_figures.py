"""The opening of docs/results.md: each declared claim in figures, the cells it compares side by side as
`median [min-max], n`, with its verdict, before the statistics that decide it; and the figures drawn from the
same data (docs/figures/<campaign>/, `./lab results ... --figures docs/figures`) where they were drawn."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from experiments.campaign.model import declared_claims
from experiments.report.results_data import CampaignData
from experiments.statistics.campaign_stats import spread
from experiments.statistics.claims import ClaimResult, claim_pairs
from experiments.statistics.measure_names import measure_name
from experiments.summary import markdown_table

FIGURES_ROOT = Path("docs") / "figures"   # as the page's own command draws them; the page links them from docs/
# The figures worth a reader's first screen, by file name (experiments.report.campaign_report.draw_figures)
OPENING_FIGURES = {"herd.png": "requests per membership change against the group's size, each generation",
                   "utilisation.png": "seed 002's records over 3 s or never handled against utilisation"}


def claim_figures_section(campaigns: list[CampaignData], results: list[ClaimResult]) -> list[str]:
    """A row per claim: its verdict, then each pair of cells it compares, higher against lower, at every size."""
    declared = [(data, claim) for data in campaigns for claim in declared_claims(data.text)]
    if not declared:
        return []
    rows = []
    for (data, claim), result in zip(declared, results, strict=True):
        pairs = sorted(claim_pairs(data.runs, claim), key=lambda pair: _natural(pair.sweep))
        shown = [f"{_where(pair.sweep)}{'/'.join(pair.higher)} {_spread(pair.higher_values)} against "
                 f"{'/'.join(pair.lower)} {_spread(pair.lower_values)}" for pair in pairs]
        rows.append({"campaign": data.name, "claim": claim.says, "measure": measure_name(claim.metric),
                     "verdict": f"**{result.verdict}**", "higher against lower": "; ".join(shown) or "-"})
    lines = ["## The claims in figures\n",
             "Each claim the campaign files declared before their runs, with the cells it compares: the higher "
             "side's runs against the lower side's, `median [min-max], n = runs`, at every size both ran. The "
             "verdicts are decided below (\"Claims declared before the runs\"): \"not supported\" means these "
             "runs do not show the claimed order to the page's standard, even where every run lies the "
             "claimed way.\n", markdown_table(pd.DataFrame(rows))]
    return lines + figure_lines(campaigns)


def figure_lines(campaigns: list[CampaignData]) -> list[str]:
    """The opening figures drawn for these campaigns, as images the page (in docs/) links."""
    lines = []
    for data in campaigns:
        for name, what in OPENING_FIGURES.items():
            if (FIGURES_ROOT / data.name / name).is_file():
                lines.append(f"![{data.name}: {what}](figures/{data.name}/{name})\n")
    return lines


def _natural(text: str) -> list:
    """`group.members=25` before `group.members=100`."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def _where(sweep: str) -> str:
    return "" if sweep in ("", "-") else f"{sweep}: "


def _spread(values) -> str:
    series = pd.Series(values, dtype=float)
    whole = bool((series == series.round()).all()) and float(series.median()).is_integer()
    return spread(float(series.median()), float(series.min()), float(series.max()), len(series),
                  digits=0 if whole else 1)
