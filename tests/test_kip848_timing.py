"""KIP-848's session and heartbeat as Kafka 4.0's broker takes them (`GroupCoordinatorConfig`): the defaults,
the bounds it checks before it starts, and the kip848 backend running at those defaults whatever a scenario's
classic `session_timeout_ms` says, unless its `[group.kip848]` sets the brokers' settings as an operator would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from experiments.run.member_configs import check_member_settings
from experiments.scenario import ScenarioError, loads
from modern.coordinator.config import CoordinatorConfig
from modern.coordinator.consumer_group import ConsumerGroupConfig
from rebalance.backends import profile
from rebalance.consumer_group_timing import (
    HEARTBEAT_INTERVAL,
    MIN_HEARTBEAT_INTERVAL,
    MIN_SESSION_TIMEOUT,
    SESSION_TIMEOUT,
    ConsumerGroupTiming,
    broker_env_name,
)

REPOSITORY = Path(__file__).resolve().parent.parent


def lowered_timing(session_ms: int, heartbeat_ms: int) -> dict[str, int]:
    """The brokers' settings of an operator who wants this session and heartbeat below Kafka's minimums: the
    minimums go down with them (server.properties; the lab's brokers read them from the environment)."""
    return {SESSION_TIMEOUT: session_ms, MIN_SESSION_TIMEOUT: min(session_ms, 45_000),
            HEARTBEAT_INTERVAL: heartbeat_ms, MIN_HEARTBEAT_INTERVAL: min(heartbeat_ms, 5_000)}


def lower_broker_timing(monkeypatch, session_ms: int, heartbeat_ms: int) -> None:
    """The environment of the brokers a test starts, for a session and heartbeat below Kafka's minimums."""
    for name, value in lowered_timing(session_ms, heartbeat_ms).items():
        monkeypatch.setenv(broker_env_name(name), str(value))


# ------------------------------------------------------------ the broker's settings


def test_the_defaults_are_kafka_4s():
    timing = CoordinatorConfig.from_env({}).consumer_group
    assert (timing.session_timeout_ms, timing.min_session_timeout_ms, timing.max_session_timeout_ms) == \
        (45_000, 45_000, 60_000)
    assert (timing.heartbeat_interval_ms, timing.min_heartbeat_interval_ms, timing.max_heartbeat_interval_ms) == \
        (5_000, 5_000, 15_000)


@pytest.mark.parametrize(("settings", "refused"), [
    ({"session_timeout_ms": 10_000}, "group.consumer.session.timeout.ms = 10000 may not be below "
                                     "group.consumer.min.session.timeout.ms = 45000"),
    ({"session_timeout_ms": 61_000}, "group.consumer.session.timeout.ms = 61000 may not be above "
                                     "group.consumer.max.session.timeout.ms = 60000"),
    ({"heartbeat_interval_ms": 3_000}, "group.consumer.heartbeat.interval.ms = 3000 may not be below "
                                       "group.consumer.min.heartbeat.interval.ms = 5000"),
    ({"heartbeat_interval_ms": 16_000}, "group.consumer.heartbeat.interval.ms = 16000 may not be above "
                                        "group.consumer.max.heartbeat.interval.ms = 15000"),
    ({"min_session_timeout_ms": 61_000, "session_timeout_ms": 61_000},
     "group.consumer.max.session.timeout.ms = 60000 may not be below group.consumer.min.session.timeout.ms"),
    ({"max_heartbeat_interval_ms": 4_000}, "group.consumer.max.heartbeat.interval.ms = 4000 may not be below "
                                           "group.consumer.min.heartbeat.interval.ms = 5000"),
    ({"session_timeout_ms": 10_000, "min_session_timeout_ms": 10_000, "heartbeat_interval_ms": 10_000,
      "max_heartbeat_interval_ms": 15_000}, "group.consumer.heartbeat.interval.ms = 10000 must be shorter than "
                                            "group.consumer.session.timeout.ms = 10000"),
    ({"min_heartbeat_interval_ms": 0, "heartbeat_interval_ms": 0}, "group.consumer.heartbeat.interval.ms must be "
                                                                   "at least 1 ms, not 0"),
])
def test_what_kafkas_broker_refuses_at_startup_is_refused(settings, refused):
    """GroupCoordinatorConfig's requirements, in its order (the first broken one is reported)."""
    with pytest.raises(ValueError, match="^" + refused.replace(".", r"\.")):
        ConsumerGroupConfig(**settings)


def test_a_value_below_a_default_minimum_is_allowed_with_the_minimum_lowered():
    lowered = ConsumerGroupTiming(session_timeout_ms=10_000, min_session_timeout_ms=10_000,
                                  heartbeat_interval_ms=1_000, min_heartbeat_interval_ms=1_000)
    assert (lowered.session_timeout_ms, lowered.heartbeat_interval_ms) == (10_000, 1_000)
    config = CoordinatorConfig.from_env({broker_env_name(k): str(v) for k, v in lowered_timing(6_000, 500).items()})
    assert (config.consumer_group.session_timeout_ms, config.consumer_group.heartbeat_interval_ms) == (6_000, 500)


def test_a_broker_given_a_session_below_its_minimum_does_not_start():
    """The broker process reads its settings from the environment and stops before it serves anything."""
    env = {broker_env_name(SESSION_TIMEOUT): "10000", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "broker", "--port", "0"], env=env, cwd=REPOSITORY,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "group.consumer.session.timeout.ms = 10000 may not be below" in done.stderr


# ------------------------------------------------------------ the kip848 backend in a run

SCENARIO = """\
name = "t"
duration = 10
backends = ["kip848"]
[[topics]]
name = "t0"
partitions = 4
[group]
members = 2
session_timeout_ms = 10000
"""


def test_kip848_runs_at_kafkas_defaults_whatever_the_scenarios_classic_session():
    """The scenario's session_timeout_ms is a classic client's setting: it no longer reaches the brokers."""
    kip848 = profile("kip848")
    scenario = loads(SCENARIO)
    settings = scenario.group.settings_of("kip848")
    env = kip848.broker_env(scenario.group.session_timeout_ms, settings)
    config = CoordinatorConfig.from_env(env).consumer_group
    assert (config.session_timeout_ms, config.heartbeat_interval_ms) == (45_000, 5_000)
    assert kip848.session_ms(scenario.group.session_timeout_ms, settings) == 45_000   # what the run records
    assert profile("classic").session_ms(10_000, {}) == 10_000
    assert profile("classic").broker_env(10_000, {}) == {} and profile("legacy").broker_env(10_000, {}) == {}


def test_a_scenario_sets_the_brokers_group_settings_as_an_operator_would():
    scenario = loads(SCENARIO + '[group.kip848]\n"group.consumer.session.timeout.ms" = 10000\n'
                                '"group.consumer.min.session.timeout.ms" = 10000\n')
    check_member_settings(scenario, profile("kip848"))
    settings = scenario.group.settings_of("kip848")
    config = CoordinatorConfig.from_env(profile("kip848").broker_env(10_000, settings)).consumer_group
    assert (config.session_timeout_ms, config.min_session_timeout_ms, config.heartbeat_interval_ms) == \
        (10_000, 10_000, 5_000)
    assert profile("kip848").session_ms(10_000, settings) == 10_000


def test_a_scenario_lowering_the_session_without_its_minimum_is_refused_before_the_run():
    scenario = loads(SCENARIO + '[group.kip848]\n"group.consumer.session.timeout.ms" = 10000\n', source="s.toml")
    with pytest.raises(ScenarioError) as refused:
        check_member_settings(scenario, profile("kip848"))
    [problem] = refused.value.problems
    assert problem.field == "group.kip848" and "group.consumer.min.session.timeout.ms = 45000" in problem.message
