"""A scenario's `[reference]` on the pages: where a run's record finds it, how a phase is named, and the lab's
total over the reference's phases (experiments.scenario.reference says what the figures are)."""

from __future__ import annotations

from pathlib import Path

from experiments.scenario.reference import Reference

ARTICLE_PHASES_TOTAL = "total of the reference's phases (steady phases left out)"
WHOLE_TIMELINE = "whole timeline (steady phases included)"


def run_reference(run_dir: Path) -> Reference | None:
    """The reference the run's scenario declared: from its record, else from the built-in scenario of its name
    (a run recorded before scenarios carried one)."""
    from experiments.folders.run_folder import RunFolder

    try:
        meta = RunFolder(run_dir).record()
    except ValueError:
        return None
    if meta is None:
        return None
    recorded = Reference.from_json(meta.scenario.resolved.get("reference"))
    return recorded or builtin_reference(meta.name)


def builtin_reference(name: str) -> Reference | None:
    from experiments.campaign.model import BUILTIN_SCENARIOS
    from experiments.scenario import ScenarioError, load

    path = BUILTIN_SCENARIOS / f"{name}.toml"
    try:
        return load(path).reference if name and path.is_file() else None
    except ScenarioError:
        return None


def phase_label(reference: Reference | None, lab_phase: str) -> str:
    """`100 → 50 (scale-to-50)`: the reference's name first, the lab's in brackets; the lab's alone otherwise."""
    name = reference.name_of(lab_phase) if reference else None
    return f"{name} ({lab_phase})" if name else lab_phase


def article_column(strategy: str) -> str:
    return f"reference: {strategy}"


def figure_text(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"
