"""What new data did to the page's claims: each declared claim's verdict, p, Holm's p and its two deciding cells,
on the page made from earlier data folders beside the page made from new ones (`./lab claims-change`).

Each side is judged exactly as its own page judges it (`results_doc.page_claims`: its own family of claims and
looks), so a verdict here is the verdict that page prints. A claim is matched by its campaign and its words; one
that only one side declares shows with a dash on the other. The cells shown are the claim's weakest pair (the
one that gives the claim its p), each as `median [min-max], n`."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from experiments.campaign.model import declared_claims
from experiments.report.looks import read_looks
from experiments.report.results_data import read
from experiments.report.results_doc import page_claims, page_path
from experiments.statistics.campaign_stats import spread
from experiments.statistics.claims import ClaimResult, Pair, claim_pairs
from experiments.statistics.measure_names import measure_name

Key = tuple[str, str]   # (campaign, the claim's words)


def judged(folders: list[Path], looks: Path | None) -> dict[Key, tuple[ClaimResult, Pair | None]]:
    """Every claim of the page made from `folders`, with its verdict and its weakest pair of cells."""
    campaigns = [read(folder) for folder in folders]
    paths = [page_path(data.name, folder) for data, folder in zip(campaigns, folders, strict=True)]
    results, _ = page_claims(campaigns, paths, read_looks(looks))
    runs = {data.name: data.runs for data in campaigns}
    found: dict[Key, tuple[ClaimResult, Pair | None]] = {}
    for result in results:
        pairs = claim_pairs(runs[result.campaign], result.claim)
        weakest = min(pairs, key=_shift, default=None)
        found[(result.campaign, result.claim.says)] = (result, weakest)
    return found


def _shift(pair: Pair) -> float:
    if not len(pair.higher_values) or not len(pair.lower_values):
        return math.inf
    return float(np.median(pair.higher_values) - np.median(pair.lower_values))


def _cell(values: np.ndarray) -> str:
    if not len(values):
        return "-"
    return spread(float(np.median(values)), float(values.min()), float(values.max()), len(values))


def _p(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2g}"


def _side(item: tuple[ClaimResult, Pair | None] | None) -> tuple[str, str, str, str]:
    """verdict, p / Holm p, the higher cell, the lower cell."""
    if item is None:
        return "-", "-", "-", "-"
    result, pair = item
    p = f"{_p(result.p)} / {_p(result.p_holm)} (k = {result.k})"
    if pair is None:
        return result.verdict, p, "-", "-"
    at = f" ({pair.sweep})" if pair.sweep not in ("", "-", "nan") else ""
    higher = f"{' '.join(pair.higher)}{at}: {_cell(pair.higher_values)}"
    lower = f"{' '.join(pair.lower)}{at}: {_cell(pair.lower_values)}"
    return result.verdict, p, higher, lower


def claims_change_markdown(before: list[Path], after: list[Path], looks: Path | None = None) -> str:
    """A Markdown table, one row per claim in either page's family: verdict before -> after, p and Holm's p, and
    the weakest pair's higher and lower cells on each side."""
    old, new = judged(before, looks), judged(after, looks)
    keys = list(new) + [key for key in old if key not in new]
    measures = {(data.name, claim.says): claim.metric for folder in (*before, *after)
                for data in [read(folder)] for claim in declared_claims(data.text)}
    lines = ["| campaign | claim | measure | verdict before -> after | p / Holm p before | p / Holm p after "
             "| higher cell before | higher cell after | lower cell before | lower cell after |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key in keys:
        v_old, p_old, high_old, low_old = _side(old.get(key))
        v_new, p_new, high_new, low_new = _side(new.get(key))
        verdict = v_new if v_old == v_new else f"{v_old} -> **{v_new}**"
        lines.append(f"| {key[0]} | {key[1]} | {measure_name(measures[key])} | {verdict} | {p_old} | {p_new} "
                     f"| {high_old} | {high_new} | {low_old} | {low_new} |")
    return "\n".join(lines) + "\n"
