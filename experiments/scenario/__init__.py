"""Scenario files: one TOML file declares a cluster, a workload, a group and a timeline of actions.

    model       the declared scenario and the resolved schedule (frozen dataclasses)
    loader      TOML in, a checked Scenario out; every problem names its field and line
    resolver    the timeline as concrete steps, every "random" target picked with the seed

What each action is and does: experiments/scenario/actions.py. The file format: docs/scenarios.md.
"""

from experiments.scenario.actions import Action, Direction, Link, LinkFault
from experiments.scenario.loader import find_file, load, loads
from experiments.scenario.model import (
    BACKENDS,
    ClusterSpec,
    GroupSpec,
    Host,
    Problem,
    ProducerSpec,
    Scenario,
    ScenarioError,
    Schedule,
    Step,
    TimelineEntry,
    TopicSpec,
    member_name,
    strategies_for,
)
from experiments.scenario.resolver import coordinator_broker, resolve

__all__ = [
    "find_file",
    "BACKENDS", "Action", "ClusterSpec", "Direction", "GroupSpec", "Host", "Link", "LinkFault", "Problem",
    "ProducerSpec", "Scenario", "ScenarioError", "Schedule", "Step", "TimelineEntry", "TopicSpec",
    "coordinator_broker", "load", "loads", "member_name", "resolve", "strategies_for",
]
