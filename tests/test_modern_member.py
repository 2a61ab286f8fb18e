"""ModernMember and its client pieces: settings, heartbeat timing, metrics, max.poll.interval.ms, CLI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from broker.admin import create_topic
from modern.member import ModernMember, settings_from
from modern.membership import HeartbeatTimer
from modern.settings import ClientSettings
from rebalance.backends import profile
from rebalance.events import EventRecorder, read_events
from rebalance.member import Member, MemberConfig
from rebalance.metrics import RebalanceMetrics

BOOT = (("127.0.0.1", 9092),)


def settings(**overrides) -> ClientSettings:
    values = dict(group="g", topics=("t",), bootstrap=BOOT, client_id="c", session_timeout_ms=10_000,
                  heartbeat_interval_ms=3000, max_poll_interval_ms=20_000)
    values.update(overrides)
    return ClientSettings(**values)


def test_heartbeat_timer_is_pure_time_arithmetic():
    timer = HeartbeatTimer(settings(), now=0)
    assert timer.time_to_next_heartbeat(1000) == 2000
    timer.sent(3000)
    assert timer.time_to_next_heartbeat(3000) == 3000
    timer.failed(3100)
    assert timer.time_to_next_heartbeat(3100) == 0          # retry after retry.backoff.ms (100)
    assert not timer.session_expired(10_000)
    assert timer.session_expired(10_001)                    # no successful answer for the session timeout
    timer.received(9000)
    assert not timer.session_expired(19_000)
    assert not timer.poll_timeout_expired(20_000)
    assert timer.poll_timeout_expired(20_001)
    timer.polled(20_001)
    assert not timer.poll_timeout_expired(40_001)


def test_settings_validate_and_map_kafka_names():
    config = MemberConfig(group="g", topics=("t",), bootstrap="h:1,k:2", member_name="m", session_timeout_ms=9000,
                          extra={"max.poll.interval.ms": 5000})
    mapped = settings_from(config, client_id="m")
    assert mapped.bootstrap == (("h", 1), ("k", 2))
    assert mapped.heartbeat_interval_ms == 3000 and mapped.effective_rebalance_timeout_ms == 5000
    with pytest.raises(ValueError, match="heartbeat.interval.mss"):
        settings_from(MemberConfig(group="g", topics=("t",), bootstrap="h:1", extra={"heartbeat.interval.mss": 1}),
                      client_id="m")
    with pytest.raises(ValueError, match="bootstrap"):
        settings_from(MemberConfig(group="g", topics=("t",)), client_id="m")
    with pytest.raises(ValueError, match="heartbeat.interval.ms"):
        settings(heartbeat_interval_ms=10_000)


def test_metrics_use_kafka_names():
    metrics = RebalanceMetrics()
    metrics.join_completed(10)
    metrics.sync_completed(2)
    metrics.rebalance_completed(15, now_s=100.0)
    metrics.rebalance_completed(25, now_s=101.0)
    metrics.rebalance_failed()
    snap = metrics.snapshot(now_s=103.5)
    assert snap["rebalance-latency-avg"] == 20 and snap["rebalance-latency-max"] == 25
    assert snap["rebalance-latency-total"] == 40 and snap["rebalance-total"] == 2
    assert snap["failed-rebalance-total"] == 1
    assert snap["join-time-max"] == 10 and snap["sync-time-avg"] == 2
    assert snap["last-rebalance-seconds-ago"] == 2.5


def test_backend_registry_builds_a_member():
    member = profile("modern").make(MemberConfig(group="g", topics=("t",), bootstrap="127.0.0.1:1", member_name="x"))
    assert isinstance(member, ModernMember) and isinstance(member, Member)
    assert member.member_id == "x" and member.assignment() == set()


# ---------------------------------------------------------------- with brokers


@pytest.fixture
def cluster(broker_cluster, monkeypatch):
    monkeypatch.setenv("REBALANCE_LAB_GROUP_INITIAL_REBALANCE_DELAY_MS", "200")
    return broker_cluster(1)


def wait_until(condition, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.broker
def test_max_poll_interval_makes_a_member_leave_and_lose_its_partitions(cluster, tmp_path):
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, 4)
    recorder = EventRecorder(tmp_path / "events.jsonl", backend="modern")

    def make(name: str, max_poll_ms: int) -> ModernMember:
        member = ModernMember(MemberConfig(group=group, topics=(topic,), member_name=name, bootstrap=cluster.bootstrap,
                                           extra={"heartbeat.interval.ms": 200, "max.poll.interval.ms": max_poll_ms}),
                              recorder=recorder)
        member.start()
        return member

    slow, steady = make("slow", 1500), make("steady", 60_000)
    try:
        def both_polled_until(condition) -> bool:
            slow.poll(0.05)
            steady.poll(0.05)
            return condition()

        wait_until(lambda: both_polled_until(lambda: len(slow.assignment()) == 2 == len(steady.assignment())),
                   "two partitions each")
        # `slow` stops polling: after max.poll.interval.ms its heartbeat thread leaves the group.
        wait_until(lambda: steady.poll(0.05) is not None and len(steady.assignment()) == 4, "steady to own all four")
        slow.poll(0.05)  # back: its partitions were lost, it rejoins
        wait_until(lambda: both_polled_until(lambda: len(slow.assignment()) == 2 == len(steady.assignment())),
                   "the slow member back with two partitions")
    finally:
        slow.close()
        steady.close()
        recorder.close()
    events = list(read_events(tmp_path / "events.jsonl"))
    leaves = [e for e in events if e["type"] == "coordination_request" and e["op"] == "LeaveGroup"
              and e["member"] == "slow"]
    assert leaves[0]["reason"] == "max.poll.interval.ms exceeded"
    assert any(e["type"] == "partitions_lost" and e["member"] == "slow" for e in events)
    assert any(e["type"] == "rebalance_started" and e["trigger"] == "max.poll.interval.ms exceeded" for e in events)


@pytest.mark.broker
def test_member_cli_runs_a_modern_member_and_leaves_on_sigterm(cluster, tmp_path):
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, 3)
    events = tmp_path / "cli.jsonl"
    command = [sys.executable, "-m", "experiments.cli", "member", "--backend", "modern", "--bootstrap",
               cluster.bootstrap, "--group", group, "--topic", topic, "--strategy", "cooperative-sticky",
               "--id", "cli-member", "--instance-id", "cli-instance", "--events", str(events),
               "--config", "heartbeat.interval.ms=500"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "COLUMNS": "200"})
    try:
        lines = []
        for line in process.stdout:
            lines.append(line)
            if "cli-member" in line and "owns" in line and f"{topic}-0" in line:
                break
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, "".join(lines) + output
    kinds = [e["type"] for e in read_events(events)]
    assert "rebalance_completed" in kinds and kinds[-1] == "member_stopped"
    joined = [e for e in read_events(events) if e["type"] == "member_started"]
    assert joined[0]["group_instance_id"] == "cli-instance"


def test_membership_moves_only_along_its_table():
    from modern.membership import IllegalMembershipTransition, Membership, MembershipState
    from rebalance.types import Generation

    joined = Membership().join_sent().member_id_given("m-1").joined(Generation(4, "m-1", "range"))
    assert joined.state is MembershipState.COMPLETING_REBALANCE and joined.sends_heartbeats
    assert joined.generation_if_stable() is None                  # no commit until the sync is answered
    stable = joined.synced()
    assert stable.generation_if_stable() == Generation(4, "m-1", "range")
    fenced = stable.lost(keep_member_id=True)
    assert fenced.state is MembershipState.UNJOINED and fenced.member_id == "m-1" and not fenced.generation.is_valid
    assert stable.lost(keep_member_id=False).member_id == ""
    with pytest.raises(IllegalMembershipTransition):
        Membership().synced()                                        # never stable without a join
    with pytest.raises(IllegalMembershipTransition):
        stable.joined(Generation(5, "m-1", "range"))                 # a new generation needs a JoinGroup first
