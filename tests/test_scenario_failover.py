"""The failover timing a scenario gives its brokers: the lab's quick values unless it says otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments import scenario as sc

SCENARIOS = Path(__file__).resolve().parent.parent / "experiments" / "scenarios"

BASE = """\
name = "t"
seed = 1
duration = 30

[cluster]
brokers = 3
{extra}

[[topics]]
name = "t0"
partitions = 3

[producer]
rate = 10

[group]
members = 2
"""


def test_split_brain_d_runs_with_kafkas_failover_timing():
    cluster = sc.load(SCENARIOS / "split-brain-d.toml").cluster
    assert cluster.broker_session_timeout_ms == 9_000
    assert cluster.fail_back_delay_ms == 300_000
    assert cluster.coordinator_load_delay_ms > 0


def test_failover_timing_defaults_to_the_quick_values_and_refuses_negatives():
    cluster = sc.loads(BASE.format(extra="")).cluster
    assert (cluster.broker_session_timeout_ms, cluster.fail_back_delay_ms, cluster.coordinator_load_delay_ms) == (0, 0, 0)
    with pytest.raises(sc.ScenarioError) as caught:
        sc.loads(BASE.format(extra="fail_back_delay_ms = -1"))
    assert any(p.field == "cluster.fail_back_delay_ms" for p in caught.value.problems)
