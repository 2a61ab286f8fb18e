"""The kip848 backend in the runner: its profile, the brokers' session for a run, and a scenario end to end."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments import runner
from experiments.scenario import load
from modern.coordinator import CoordinatorConfig
from rebalance.backends import profile
from rebalance.member import MemberConfig

SCENARIOS = Path(__file__).resolve().parent.parent / "experiments" / "scenarios"


def test_classic_strategies_run_unchanged_on_the_server_assignors():
    kip848 = profile("kip848")
    assert set(profile("modern").strategies) <= set(kip848.strategies)   # every scenario's strategy is accepted
    config = MemberConfig(group="g", topics=("t",), bootstrap="127.0.0.1:1")
    from kip848.client_settings import settings_from

    assigned = {name: settings_from(MemberConfig(**{**config.to_json(), "strategy": name}), "c").assignor
                for name in kip848.strategies}
    assert assigned == {"uniform": "uniform", "range": "range", "roundrobin": "uniform", "sticky": "uniform",
                        "cooperative-sticky": "uniform"}
    with pytest.raises(ValueError, match="server assignors are uniform and range"):
        kip848.check(MemberConfig(**{**config.to_json(), "strategy": "optimal"}))
    with pytest.raises(ValueError, match="unknown kip848 setting"):
        kip848.check(MemberConfig(**{**config.to_json(), "extra": {"heartbeat.interval.ms": 1000}}))


def test_the_brokers_get_the_scenarios_session_for_consumer_groups():
    kip848 = profile("kip848")
    default = CoordinatorConfig.from_env(kip848.broker_env(6000, {})).consumer_group
    assert (default.session_timeout_ms, default.heartbeat_interval_ms) == (6000, 666)   # Kafka's 5 s of 45 s
    given = CoordinatorConfig.from_env(kip848.broker_env(9000, {"group.consumer.heartbeat.interval.ms": 1500}))
    assert (given.consumer_group.session_timeout_ms, given.consumer_group.heartbeat_interval_ms) == (9000, 1500)
    assert profile("modern").broker_env(6000, {}) == {} and profile("legacy").broker_env(6000, {}) == {}


@pytest.mark.broker
@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_demo_herd_runs_on_kip848_and_its_checks_pass(tmp_path, spark):
    from experiments.summary import summarize_runs

    scenario = load(SCENARIOS / "demo-herd.toml")
    result = runner.run(scenario, runner.RunOptions(backend="kip848", run_dir=tmp_path / "run", progress=False))
    assert result.status == "completed", result.reason
    (summary,) = summarize_runs(spark, [result.run_dir], write=False)
    verdicts = {check.check: check.verdict.value for check in summary.checks}
    # server-witness holds members' logged group requests against the brokers' counts; the brokers do
    # not count ConsumerGroupHeartbeat among group APIs, so that check is read where the summary is.
    judged = {name: verdict for name, verdict in verdicts.items() if name != "server-witness"}
    assert judged and all(verdict == "true" for verdict in judged.values()), verdicts
    assert {"double-ownership", "lost-records", "duplicates", "convergence"} <= set(judged)
