"""Failover timing: when a silent broker is declared dead, and when a returning one leads again.

The leadership rule is checked on `ClusterView` with a hand-moved clock; one cluster of broker
processes then shows the same timing end to end, with delays shorter than Kafka's.
"""

from __future__ import annotations

import time

import pytest

from broker.admin import create_topic
from broker.cluster import FailoverTiming
from broker.view import BrokerAddress, ClusterView

PARTITIONS = 6
PREFERRED = {p: p % 3 for p in range(PARTITIONS)}
WITHOUT_1 = {0: 0, 1: 2, 2: 2, 3: 0, 4: 0, 5: 2}      # broker 1's partitions on the (p mod 2)-th survivor


def address(node: int) -> BrokerAddress:
    return BrokerAddress(node, "127.0.0.1", 9000 + node)


def leaders(view: ClusterView) -> dict[int, int]:
    return {p: view.leader_for("t", p) for p in range(PARTITIONS)}


def full_view(node: int, fail_back_delay_s: float) -> ClusterView:
    view = ClusterView(node, address(node), configured=[0, 1, 2], fail_back_delay_s=fail_back_delay_s)
    for peer in (0, 1, 2):
        if peer != node:
            view.mark_live(address(peer), 0.0)
    view.hold_self(False)  # a peer answered and gave this broker its own partitions
    return view


def test_a_returning_broker_is_held_back_for_the_fail_back_delay():
    view = full_view(0, fail_back_delay_s=300)
    assert leaders(view) == PREFERRED
    assert view.mark_dead(1)
    assert leaders(view) == WITHOUT_1
    view.mark_live(address(1), 100.0)
    assert view.is_held(1) and leaders(view) == WITHOUT_1
    assert not view.release_held(399.9)
    assert view.release_held(400.0)
    assert leaders(view) == PREFERRED


def test_without_a_fail_back_delay_a_returning_broker_leads_at_once():
    view = full_view(0, fail_back_delay_s=0)
    view.mark_dead(1)
    view.mark_live(address(1), 100.0)
    assert not view.is_held(1) and leaders(view) == PREFERRED


def test_a_peer_seen_for_the_first_time_is_not_held_back():
    view = ClusterView(0, address(0), configured=[1, 2], fail_back_delay_s=300)
    view.mark_live(address(1), 5.0)                  # it was never declared dead: a cluster starting
    assert not view.is_held(1)


def test_a_restarted_broker_holds_itself_back_until_its_peers_say_otherwise():
    view = ClusterView(1, address(1), configured=[0, 2], fail_back_delay_s=300)
    view.mark_live(address(0), 0.0)
    view.mark_live(address(2), 0.0)
    assert view.is_held(1) and leaders(view) == WITHOUT_1   # agrees with survivors that hold it back
    assert view.hold_self(False)
    assert leaders(view) == PREFERRED


@pytest.mark.broker
def test_a_killed_broker_is_declared_dead_after_the_session_timeout_and_fails_back_after_the_delay(
        broker_cluster, unique_topic):
    timing = FailoverTiming(broker_session_timeout_ms=6_000, fail_back_delay_ms=10_000)
    cluster = broker_cluster(3, failover=timing)
    create_topic(cluster.bootstrap, unique_topic, PARTITIONS)
    assert cluster.partition_leaders(unique_topic, 0) == PREFERRED

    cluster.kill(1)
    time.sleep(1.0)  # five probe periods: long enough for any failed probe to have been seen
    assert cluster.live_view(0) == [0, 1, 2]                        # silent, but not dead yet
    assert cluster.partition_leaders(unique_topic, 0) == PREFERRED
    cluster.wait_for_live([0, 2])
    assert cluster.partition_leaders(unique_topic, 0) == WITHOUT_1

    cluster.restart(1)                                              # waits until all three see each other
    for index in (0, 1, 2):
        assert cluster.partition_leaders(unique_topic, index) == WITHOUT_1   # held back, in every view
    deadline = time.monotonic() + 60
    while any(cluster.partition_leaders(unique_topic, i) != PREFERRED for i in (0, 1, 2)):
        assert time.monotonic() < deadline, "broker 1 never led its partitions again"
        time.sleep(0.2)  # re-ask: the hold ends on the survivors' clocks
