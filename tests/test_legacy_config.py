"""The 0.8 consumer's pure parts: settings, ids and JSON, the watcher executor's coalescing, CLI input."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import fields
from pathlib import Path

import pytest
from typer.testing import CliRunner

from experiments.cli.app import app
from experiments.scenario import load as load_scenario
from experiments.scenario.model import on_backend
from legacy_zk.config import LegacyConfig
from legacy_zk.registry import GroupPaths, consumer_id_string, parse_registration, registration_json
from legacy_zk.watcher import Reason, RebalanceTrigger, WatcherExecutor
from rebalance.member import MemberConfig


def test_defaults_are_those_of_08():
    config = LegacyConfig(group_id="g", topics=("t",), zookeeper_connect="zk:2181")
    assert config.zookeeper_session_timeout_ms == 6000
    assert config.connection_timeout_ms == 6000          # zookeeper.connection.timeout.ms = session timeout
    assert config.zookeeper_sync_time_ms == 2000
    assert config.rebalance_max_retries == 4
    assert config.backoff_ms == 2000                     # rebalance.backoff.ms = zookeeper.sync.time.ms
    assert config.auto_commit_enable is True
    assert config.auto_commit_interval_ms == 60000
    assert config.auto_offset_reset == "largest"
    assert config.partition_assignment_strategy == "range"


def test_member_config_maps_onto_08_names_and_extra_wins():
    config = LegacyConfig.from_member_config(MemberConfig(
        group="g", topics=("a", "b"), strategy="roundrobin", member_name="c1", zk_connect="zk:2181/lab",
        session_timeout_ms=3000, auto_offset_reset="earliest",
        extra={"rebalance.max.retries": "2", "rebalance.backoff.ms": 150, "auto.commit.enable": "false",
               "zookeeper.session.timeout.ms": 4000},
    ))
    assert config.group_id == "g" and config.topics == ("a", "b") and config.member_name == "c1"
    assert re.fullmatch(r"[0-9a-f]{8}\.c1", config.consumer_id)   # ordered as pods' host-time-uuid ids are
    assert config.partition_assignment_strategy == "roundrobin"
    assert config.auto_offset_reset == "smallest"
    assert config.rebalance_max_retries == 2 and config.backoff_ms == 150
    assert config.auto_commit_enable is False
    assert config.zookeeper_session_timeout_ms == 4000


@pytest.mark.parametrize("extra, message", [
    ({"rebalance.max.retry": 3}, "unknown 0.8 consumer setting 'rebalance.max.retry'"),
    ({"rebalance.max.retries": "many"}, "rebalance.max.retries='many': expected int"),
    ({"auto.commit.enable": "yes"}, "auto.commit.enable='yes': expected bool"),
    ({"rebalance.max.retries": 0}, "rebalance.max.retries must be at least 1"),
    ({"auto.offset.reset": "middle"}, "auto.offset.reset='middle'"),
    ({"partition.assignment.strategy": "sticky"}, "the 0.8 consumer knows range and roundrobin"),
])
def test_bad_settings_fail_loudly_naming_the_setting(extra, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        LegacyConfig.from_member_config(MemberConfig(group="g", topics=("t",), zk_connect="zk:2181", extra=extra))


def test_legacy_backend_needs_zookeeper():
    with pytest.raises(ValueError, match="ZooKeeper connect string"):
        LegacyConfig.from_member_config(MemberConfig(group="g", topics=("t",)))


def test_consumer_id_string_as_08_builds_it():
    assert consumer_id_string("grp", hostname="host", now_ms=1510734527562, random_hex="64b377f5") == \
        "grp_host-1510734527562-64b377f5"
    assert consumer_id_string("grp", "consumerId") == "grp_consumerId"
    generated = consumer_id_string("grp")
    prefix, millis, hex8 = generated.removeprefix("grp_").rsplit("-", 2)
    assert prefix and millis.isdigit() and len(hex8) == 8 and int(hex8, 16) >= 0


def test_registration_json_is_the_08_text():
    data = registration_json({"t0": 1, "t1": 2}, 1510734527562)
    assert data == b'{"version":1,"subscription":{"t0":1,"t1":2},"pattern":"static","timestamp":"1510734527562"}'
    assert parse_registration(data) == {"t0": 1, "t1": 2}
    with pytest.raises(ValueError, match="not a 0.8 consumer registration"):
        parse_registration(b"t0,t1")  # the 0.7 layout's value


def test_paths_follow_the_08_layout():
    paths = GroupPaths("g")
    assert paths.member("g_c0") == "/consumers/g/ids/g_c0"
    assert paths.owner("t", 3) == "/consumers/g/owners/t/3"
    assert paths.offset("t", 3) == "/consumers/g/offsets/t/3"


def test_watcher_executor_coalesces_a_burst_into_one_run():
    trigger = RebalanceTrigger()
    batches: list[frozenset[Reason]] = []
    release = threading.Event()
    first_run = threading.Event()

    def work(reasons: frozenset[Reason]) -> None:
        if reasons:
            batches.append(reasons)
            first_run.set()
            release.wait(10)  # a slow rebalance, while the watches keep firing

    errors: list[BaseException] = []
    executor = WatcherExecutor("m", trigger, work, errors.append)
    executor.start()
    try:
        trigger.fire(Reason.STARTUP)
        assert first_run.wait(10)
        for _ in range(50):  # a burst of joins while the first rebalance runs
            trigger.fire(Reason.IDS_CHANGED)
        trigger.fire(Reason.TOPIC_CHANGED)
        release.set()
        deadline = threading.Event()
        for _ in range(100):
            if len(batches) >= 2:
                break
            deadline.wait(0.05)
    finally:
        executor.stop()
    assert batches == [frozenset({Reason.STARTUP}), frozenset({Reason.IDS_CHANGED, Reason.TOPIC_CHANGED})]
    assert errors == []


def test_watcher_executor_reports_errors_and_goes_on():
    trigger = RebalanceTrigger()
    calls: list[frozenset[Reason]] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def work(reasons: frozenset[Reason]) -> None:
        if not reasons:
            return
        calls.append(reasons)
        if len(calls) == 1:
            raise RuntimeError("ZooKeeper changed under the reader")
        done.set()

    executor = WatcherExecutor("m", trigger, work, errors.append)
    executor.start()
    try:
        trigger.fire(Reason.STARTUP)
        for _ in range(100):
            if errors:
                break
            done.wait(0.05)
        trigger.fire(Reason.IDS_CHANGED)
        assert done.wait(10)
    finally:
        executor.stop()
    assert [str(e) for e in errors] == ["ZooKeeper changed under the reader"]


@pytest.mark.parametrize("args, message", [
    (["member", "--group", "g", "--topic", "t"], "--zk HOST:PORT[/chroot] is required"),
    (["member", "--backend", "nope", "--group", "g", "--topic", "t"], "--backend 'nope'"),
    (["member", "--backend", "classic", "--group", "g", "--topic", "t"], "--bootstrap HOST:PORT is required"),
    (["member", "--group", "g", "--topic", "t", "--zk", "127.0.0.1:1", "--config", "rebalance.max.retries"],
     "expected KEY=VALUE"),
    (["member", "--group", "g", "--topic", "t", "--zk", "127.0.0.1:1", "--config", "rebalance.max.retry=3"],
     "unknown 0.8 consumer setting"),
])
def test_member_cli_rejects_bad_input_in_one_line(args, message):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], result.output


def test_registration_json_round_trips_through_json():
    value = json.loads(registration_json({"t": 3}, 5))
    assert value == {"version": 1, "subscription": {"t": 3}, "pattern": "static", "timestamp": "5"}


SCENARIO_DIR = Path(__file__).resolve().parents[1] / "experiments" / "scenarios"
LEGACY_SCENARIOS = [path for path in sorted(SCENARIO_DIR.glob("*.toml")) if "legacy" in load_scenario(path).backends]
# How a scenario's comment must name the 0.8 default of every 0.8 setting it runs with another value.
# Every setting of LegacyConfig is here except those that name the run rather than tune the consumer.
SAID_08_DEFAULT = {
    "auto_commit_interval_ms": "0.8: 60 s",
    "auto_offset_reset": "0.8: largest",
    "zookeeper_session_timeout_ms": "0.8's default was 6 s",
    "zookeeper_connection_timeout_ms": "zookeeper.connection.timeout.ms (0.8: the session timeout)",
    "zookeeper_sync_time_ms": "zookeeper.sync.time.ms (0.8: 2 s)",
    "rebalance_max_retries": "rebalance.max.retries (0.8: 4)",
    "rebalance_backoff_ms": "rebalance.backoff.ms (0.8: zookeeper.sync.time.ms)",
    "auto_commit_enable": "auto.commit.enable (0.8: true)",
    "streams_per_topic": "streams per topic (0.8's createMessageStreams: 1)",
}
NAMES_THE_RUN = {"group_id", "topics", "zookeeper_connect", "consumer_id", "member_name", "bootstrap"}
# The assignor is what a scenario studies, not a default it replaces: it names it as 0.8's.
STRATEGY_SAID = "the 0.8 {} assignor"


def legacy_settings(path: Path) -> LegacyConfig:
    scenario = on_backend(load_scenario(path), "legacy")
    group = scenario.group
    return LegacyConfig.from_member_config(MemberConfig(
        group=group.name, topics=scenario.subscribed_topics, strategy=group.strategy, zk_connect="127.0.0.1:2181",
        session_timeout_ms=group.session_timeout_ms, extra=group.settings_of("legacy"),
    ))


def unexplained_08_changes(path: Path) -> list[str]:
    """Every 0.8 setting the scenario runs with another value than 0.8's without its comment saying so."""
    runs = legacy_settings(path)
    defaults = LegacyConfig(group_id="g", topics=("t",), zookeeper_connect="127.0.0.1:2181")
    comments = " ".join(line.strip("# ") for line in path.read_text().splitlines() if line.startswith("#"))
    missing = []
    for field in fields(LegacyConfig):
        name = field.name
        if name in NAMES_THE_RUN or getattr(runs, name) == getattr(defaults, name):
            continue
        said = STRATEGY_SAID.format(getattr(runs, name)) if name == "partition_assignment_strategy" \
            else SAID_08_DEFAULT[name]
        if said not in comments:
            missing.append(f"{name} = {getattr(runs, name)!r} (say {said!r})")
    return missing


def test_every_tuning_setting_has_its_08_default_words():
    tuned = {f.name for f in fields(LegacyConfig)} - NAMES_THE_RUN - {"partition_assignment_strategy"}
    assert set(SAID_08_DEFAULT) == tuned


@pytest.mark.parametrize("path", LEGACY_SCENARIOS, ids=lambda path: path.stem)
def test_each_scenario_says_where_legacy_runs_other_values_than_08(path):
    assert not unexplained_08_changes(path), f"{path.name}: legacy runs other values than 0.8's without saying why"


@pytest.mark.parametrize("setting, value, field", [
    ("rebalance.max.retries", 2, "rebalance_max_retries"),
    ("rebalance.backoff.ms", 200, "rebalance_backoff_ms"),
    ("zookeeper.sync.time.ms", 200, "zookeeper_sync_time_ms"),
    ("zookeeper.connection.timeout.ms", 3000, "zookeeper_connection_timeout_ms"),
    ("auto.commit.enable", "false", "auto_commit_enable"),
    ("auto.offset.reset", "largest", None),                    # 0.8's own value: nothing to say
])
def test_a_scenario_changing_any_08_setting_without_a_word_is_caught(tmp_path, setting, value, field):
    """Not only the three settings today's scenarios change: any 0.8 setting run with another value."""
    base = SCENARIO_DIR / "split-brain-a.toml"
    text = base.read_text().replace("[group.legacy]\n", f"[group.legacy]\n{json.dumps(setting)} = "
                                                         f"{json.dumps(value) if isinstance(value, str) else value}\n")
    path = tmp_path / "silent.toml"
    path.write_text(text)
    found = unexplained_08_changes(path)
    if field is None:
        assert not found
    else:
        assert [line.split(" = ")[0] for line in found] == [field]
        said = SAID_08_DEFAULT[field]
        path.write_text(f"# Legacy runs {setting} {value}: {said}.\n" + text)
        assert not unexplained_08_changes(path)


@pytest.mark.parametrize("backend, setting", [("legacy", "consumer.id"), ("classic", "client.id"),
                                              ("kip848", "client.id")])
def test_a_member_named_by_hand_registers_under_its_name(backend: str, setting: str) -> None:
    """`./lab member --id alice` is a consumer whose consumer.id (client.id) is set: 0.8 registers it as
    `<group>_alice`, so three members started by hand sort by the names typed, as lab 4 says; without the
    setting the id carries a tag drawn at each start, as a deployment's pods' ids do."""
    from experiments.run.member_cli import _configs_from_options
    from rebalance.backends import profile

    def configs(name, extra):
        return _configs_from_options(group="g", topics=("t0",), zk=["127.0.0.1:2181"], bootstrap=["127.0.0.1:9092"],
                                     strategy=None, name=name, instance_id=None, session_timeout_ms=None,
                                     extra=extra, count=1, id_setting=profile(backend).id_setting)

    (named,) = configs("alice", {}).values()
    assert named.extra == {setting: "alice"}
    (overridden,) = configs("alice", {setting: "pod-7"}).values()
    assert overridden.extra == {setting: "pod-7"}
    if backend == "legacy":
        assert LegacyConfig.from_member_config(named).consumer_id == "alice"
        assert consumer_id_string("g", LegacyConfig.from_member_config(named).consumer_id) == "g_alice"
        drawn = LegacyConfig.from_member_config(MemberConfig(group="g", topics=("t0",), member_name="alice",
                                                             zk_connect="127.0.0.1:2181"))
        assert drawn.consumer_id != "alice" and drawn.consumer_id.endswith(".alice")
