"""`compare SCENARIO --backends A,B --strategies X,Y --repeat N`: a campaign made on the spot, one cell per
backend and strategy, each repeated, run by the campaign executor like any campaign file.

A strategy a backend does not have (cooperative-sticky on 0.8, say) is left out of the grid and said so,
rather than refused: the grid is a question, and its answer names the cells that could not be asked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from experiments.campaign.model import Campaign, campaign_from_text
from experiments.scenario import Scenario
from rebalance.backends import canonical_name, profile


@dataclass(frozen=True)
class Grid:
    campaign: Campaign
    left_out: tuple[str, ...]      # "legacy/cooperative-sticky: 0.8 has range, roundrobin"


def grid_campaign(scenario: Scenario, scenario_path: Path, *, backends: list[str], strategies: list[str],
                  repeat: int, overrides: list[str]) -> Grid:
    """The campaign of every backend x strategy cell of `scenario`, `repeat` runs each (seeds from the scenario's)."""
    blocks: list[str] = []
    left_out: list[str] = []
    for backend in dict.fromkeys(canonical_name(name) for name in backends):
        own = profile(backend)
        runnable = [name for name in strategies if own.strategy(name) in own.strategies]
        left_out += [f"{backend}/{name}: {backend} has {', '.join(own.strategies)}" for name in strategies
                     if name not in runnable]
        if runnable:
            blocks.append("\n".join([
                "[[matrix]]",
                f"scenario = {json.dumps(str(scenario_path.resolve()))}",
                f"backends = {json.dumps([backend])}",
                f"strategies = {json.dumps(runnable)}",
                *([f"set = {json.dumps(overrides)}"] if overrides else []),
            ]))
    header = "\n".join([
        f"name = {json.dumps(f'compare-{scenario.name}')}",
        f"description = {json.dumps(f'compare: {scenario.name} on {len(blocks)} backends, {repeat} runs a cell')}",
        f"repetitions = {repeat}",
        f"seed = {scenario.seed}",
    ])
    text = "\n\n".join([header, *blocks]) + "\n"
    return Grid(campaign_from_text(text, source=f"compare-{scenario.name}.toml"), tuple(left_out))
