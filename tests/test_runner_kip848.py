"""The kip848 backend in the runner: its profile, the brokers' session for a run, and a scenario end to end."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.folders.run_folder import RunFolder
from experiments.run import runner
from experiments.scenario import load
from modern.coordinator.service import CoordinatorConfig
from rebalance.backends import profile
from rebalance.member import MemberConfig

SCENARIOS = Path(__file__).resolve().parent.parent / "experiments" / "scenarios"


def test_classic_strategies_run_unchanged_on_the_server_assignors():
    kip848 = profile("kip848")
    assert set(profile("classic").strategies) <= set(kip848.strategies)   # every scenario's strategy is accepted
    config = MemberConfig(group="g", topics=("t",), bootstrap="127.0.0.1:1")
    from modern.kip848.client_settings import settings_from

    assigned = {name: settings_from(MemberConfig(**{**config.to_json(), "strategy": name}), "c").assignor
                for name in kip848.strategies}
    assert assigned == {"uniform": "uniform", "range": "range", "uniform-4.1": "uniform-4.1", "roundrobin": "uniform",
                        "sticky": "uniform", "cooperative-sticky": "uniform"}
    with pytest.raises(ValueError, match="server assignors are uniform, range, uniform-4.1"):
        kip848.check(MemberConfig(**{**config.to_json(), "strategy": "optimal"}))
    with pytest.raises(ValueError, match="unknown kip848 setting"):
        kip848.check(MemberConfig(**{**config.to_json(), "extra": {"heartbeat.interval.ms": 1000}}))


def test_the_brokers_get_the_group_settings_of_group_kip848():
    """The brokers' environment carries [group.kip848]'s group.consumer.* settings (the scenario's classic
    session_timeout_ms is not among them: tests/test_kip848_timing.py)."""
    kip848 = profile("kip848")
    settings = {"group.consumer.session.timeout.ms": 9000, "group.consumer.min.session.timeout.ms": 9000,
                "group.consumer.heartbeat.interval.ms": 1500, "group.consumer.min.heartbeat.interval.ms": 1500,
                "max.poll.interval.ms": 60_000}
    given = CoordinatorConfig.from_env(kip848.broker_env(6000, settings)).consumer_group
    assert (given.session_timeout_ms, given.heartbeat_interval_ms) == (9000, 1500)
    assert profile("classic").broker_env(6000, {}) == {} and profile("legacy").broker_env(6000, {}) == {}


# A join, then a crash: the crashed member's partitions move only once the brokers end its session.
# The convergence check's bound is 2 x the recorded session + 5 s, so it also tells whether the brokers were
# given [group.kip848]'s 6 s session, lowered with its minimum as an operator would (with KIP-848's default of
# 45 s they would converge far too late).
CRASH = """\
name = "kip848-join-and-crash"
seed = 5
duration = 16
settle = 2
backends = ["kip848"]

[cluster]
zookeeper_nodes = 0
brokers = 1

[[topics]]
name = "t0"
partitions = 6

[producer]
rate = 20

[group]
members = 3
strategy = "cooperative-sticky"
session_timeout_ms = 6000

[group.kip848]
"group.consumer.session.timeout.ms" = 6000
"group.consumer.min.session.timeout.ms" = 6000
"group.consumer.heartbeat.interval.ms" = 1000
"group.consumer.min.heartbeat.interval.ms" = 1000

[[timeline]]
at = 2
action = "join"

[[timeline]]
at = 4
action = "crash"
member = 0
"""


@pytest.mark.broker
@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_scenario_with_a_join_and_a_crash_runs_on_kip848_and_its_checks_pass(tmp_path, spark):
    from experiments.summary import summarize_runs
    from rebalance.events import read_events

    path = tmp_path / "scenario.toml"
    path.write_text(CRASH)
    result = runner.run(load(path), runner.RunOptions(backend="kip848", run_dir=tmp_path / "run", progress=False))
    assert result.status == "completed", result.reason
    (summary,) = summarize_runs(spark, [result.run_dir], write=False)
    verdicts = {check.check: check.verdict.value for check in summary.checks}
    # A crash redelivers what was consumed after the last commit (at least once): duplicates are expected.
    anomalies = ("double-ownership", "consumed-without-ownership", "lost-records", "offset-regressions", "convergence")
    assert all(verdicts[name] == "true" for name in anomalies), verdicts
    events = list(read_events(RunFolder(result.run_dir).events))
    beats = [e for e in events if e["type"] == "coordination_request" and e["op"] == "ConsumerGroupHeartbeat"]
    assert {"join", "ack", "steady"} <= {e["detail"] for e in beats}
    assert {e["protocol"] for e in events if e["type"] == "rebalance_completed"} == {"uniform"}
    # Every broker and every member host samples its own resident memory (a soak's measure).
    memory = summary.tables["memory"]
    sampled = set(memory["process"])
    assert any(name.startswith("broker") for name in sampled), sampled
    assert any(name.startswith("member host ") for name in sampled), sampled
    assert (memory["peak_mb"] > 10).all() and (memory["samples"] >= 1).all()
