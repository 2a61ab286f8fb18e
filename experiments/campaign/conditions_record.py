"""A campaign's account of its runs' conditions (experiments.run.conditions), as its data folder keeps it
(campaign.json): counts by grade of the runs kept, the suspect ones, the invalid ones left out with their
reasons, and every run made again because its conditions were invalid."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from experiments.campaign.manifest import COMPLETED, INVALID, RunEntry


def conditions_info(entries: Iterable[RunEntry]) -> dict:
    """Nothing when no run of the campaign judged its conditions (a campaign from before runs did)."""
    entries = list(entries)
    if not any(entry.conditions for entry in entries):
        return {}
    kept = [entry for entry in entries if entry.status == COMPLETED]
    counts = Counter(entry.conditions or "not judged" for entry in kept)
    return {"conditions": dict(sorted(counts.items())),
            "suspect_runs": {entry.run: entry.conditions_reason for entry in kept if entry.conditions == "suspect"},
            "invalid_runs": {entry.run: entry.conditions_reason for entry in entries if entry.status == INVALID},
            "replaced": [{"run": entry.run, "reason": item["reason"]} for entry in entries for item in entry.replaced]}


def merged(held: dict, part: dict) -> dict:
    """Two parts' accounts as one; a part from before runs judged their conditions counts as not judged."""
    if not part and "conditions" not in held:
        return {}
    counts = Counter(held.get("conditions") or {"not judged": held.get("runs_completed", 0)})
    counts.update(part.get("conditions") or {})
    return {"conditions": dict(sorted((grade, count) for grade, count in counts.items() if count)),
            "suspect_runs": {**(held.get("suspect_runs") or {}), **(part.get("suspect_runs") or {})},
            "invalid_runs": {**(held.get("invalid_runs") or {}), **(part.get("invalid_runs") or {})},
            "replaced": [*(held.get("replaced") or []), *(part.get("replaced") or [])]}
