"""The results page's account of its runs' conditions (experiments.run.conditions): whether the machine carried
each campaign's runs, how many were made again because it did not, and which are suspect.

A campaign made since runs judged their own conditions carries them in its data folder (campaign.json:
`conditions`, `suspect_runs`, `invalid_runs`, `replaced`). An older one did not record what most conditions
read (the machine's pressure, the producer's pace, the join waves); where its runs.csv allows, the page judges
the one condition it can, the members keeping up where nothing changed, from the phases its scenario declares
steady (a `steady...` phase: no membership change, no fault), by the same threshold.
"""

from __future__ import annotations

import tomllib
from typing import TYPE_CHECKING

from experiments.run.conditions import THRESHOLDS
from experiments.statistics.measure_names import LATE_OR_LOST, RECORDS_LOST

if TYPE_CHECKING:
    from experiments.report.results_data import CampaignData


def conditions_lines(campaigns: list[CampaignData]) -> list[str]:
    lines = ["## Run conditions\n",
             "Every run judges whether the machine carried it (docs/analysis.md, \"Run conditions\"): ok, suspect "
             "(kept, and named here) or invalid (made again, at most twice; one still invalid is left out of the "
             "statistics).\n"]
    for data in campaigns:
        lines.append(_recorded(data) if "conditions" in data.info else _judged_from_phases(data))
    return lines


def _recorded(data: CampaignData) -> str:
    counts = data.info["conditions"]
    parts = [f"{counts.get(grade, 0)} {grade}" for grade in ("ok", "suspect", "invalid") if counts.get(grade)]
    text = f"- `{data.name}`: " + (", ".join(parts) or "no run judged")
    if counts.get("not judged"):
        text += f", {counts['not judged']} not judged"
    replaced = data.info.get("replaced") or []
    if replaced:
        text += (f"; {len(replaced)} run{'s' if len(replaced) > 1 else ''} made again after invalid conditions ("
                 + "; ".join(f"{item['run']}: {item['reason']}" for item in replaced) + ")")
    for run, reason in sorted((data.info.get("invalid_runs") or {}).items()):
        text += f"; left out, invalid: {run} ({reason})"
    for run, reason in sorted((data.info.get("suspect_runs") or {}).items()):
        text += f"; suspect: {run} ({reason})"
    return text + "."


def _judged_from_phases(data: CampaignData) -> str:
    """An older campaign's runs: the quiet-window condition from its steady phases' counts, where it has any."""
    steady = sorted({metric for metric in data.runs["metric"]
                     if metric.startswith("steady") and metric.endswith(f": {RECORDS_LOST}")})
    unrecorded = (f"- `{data.name}`: made before runs judged their conditions (its runs recorded no CPU pressure, "
                  "producer pace or join waves)")
    if not steady:
        return unrecorded + "; it has no steady phase to judge the members by."
    expected = _steady_records(data, steady[0].split(": ")[0])
    rows = data.runs[data.runs["metric"].isin(steady)]
    late = rows[rows["value"] > 0]
    threshold = THRESHOLDS["quiet-over-limit"]
    text = (f"{unrecorded}. Judged from its steady phase ({', '.join(s.split(': ')[0] for s in steady)}, no change "
            f"and no fault; {LATE_OR_LOST}): 0 in {len(rows) - len(late)} of {len(rows)} runs")
    if late.empty:
        return text + "."
    flagged = []
    for row in late.itertuples():
        share = 100 * row.value / expected if expected else None
        grade = "" if share is None else (" invalid" if share >= threshold.invalid else
                                          " suspect" if share >= threshold.suspect else " ok")
        of = f" of about {expected:,.0f}, {share:.1f}%:{grade}" if share is not None else ""
        flagged.append(f"{row.run} {row.value:,.0f}{of}")
    return text + "; " + "; ".join(flagged) + f" (suspect from {threshold.suspect:g} points, invalid from " \
                                              f"{threshold.invalid:g}; the service times alone give 0 here)."


def _steady_records(data: CampaignData, phase: str) -> float | None:
    """About how many records a run's steady phase produced: the scenario's rate times the phase's length,
    from the scenario file the campaign names (None when it cannot tell)."""
    from experiments.campaign.model import BUILTIN_SCENARIOS
    from experiments.scenario import find_file, load

    try:
        names = {block["scenario"] for block in tomllib.loads(data.text).get("matrix", [])}
        path = find_file(sorted(names)[0], BUILTIN_SCENARIOS)
        if path is None:        # a scenario of its own folder, not a built-in one
            return None
        scenario = load(path)
    except (ValueError, IndexError, OSError, tomllib.TOMLDecodeError):
        return None
    marks = sorted((entry.at, entry.name or "") for entry in scenario.timeline)
    starts = [at for at, name in marks if name == phase]
    later = [at for at, _ in marks if starts and at > starts[0]]
    if not starts or not later:
        return None
    return scenario.producer.rate * (later[0] - starts[0])
