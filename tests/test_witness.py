"""The servers as witnesses: ZooKeeper's own counters and the broker's request counts grow with what
real clients sent (real ZooKeeper, real kafka-python), and the samplers do not count themselves."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer
from kazoo.client import KazooClient

from broker.cli import load_extensions
from broker.counters import GROUP_APIS, group_requests, read_counters
from broker.embedded import EmbeddedBroker
from broker.server import BrokerConfig
from experiments.run.witness import ZK_COUNTERS, BrokerWitness, ZooKeeperWitness
from tests.fixtures.run_record import run_data

READS = 40


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


@pytest.mark.zk
def test_zookeeper_sampler_counts_a_known_number_of_requests_and_not_itself(zk_factory):
    ensemble = zk_factory(nodes=1)      # its own server: no other test's clients in its counters
    witness = ZooKeeperWitness(lambda: [_address(ensemble.nodes[0].client_address)])
    first, second = witness.sample(), witness.sample()
    assert (first.nodes, first.server) == (1, "zookeeper") and set(first.counters) == set(ZK_COUNTERS)
    assert second.served == first.served                    # nobody else talks to it: mntr's own packet subtracted
    assert second.sampler_packets == first.sampler_packets + 1
    assert second.counters["zk_packets_received"] == first.counters["zk_packets_received"] + 1

    client = KazooClient(hosts=ensemble.nodes[0].client_address, timeout=10.0)
    client.start(timeout=30)
    try:
        client.ensure_path("/witness")
        before = witness.sample()
        for _ in range(READS):
            client.get_children("/witness", watch=lambda event: None)
        after = witness.sample()
    finally:
        client.stop()
        client.close()
    grown = after.served - before.served
    print(f"{READS} reads -> {grown} packets served")
    assert READS <= grown <= READS + 2                      # at most a ping or two besides
    assert after.counters["zk_watch_count"] >= 1            # the child watch is on the server
    assert after.counters["zk_znode_count"] >= before.counters["zk_znode_count"]


@pytest.fixture
def coordinator_broker():
    """An in-process broker with the group coordinator."""
    with EmbeddedBroker(BrokerConfig(port=0), extensions=load_extensions(True)) as embedded:
        yield embedded


@pytest.mark.broker
def test_broker_counts_the_group_requests_a_kafka_python_admin_sent(coordinator_broker):
    address = coordinator_broker.broker.address
    admin = KafkaAdminClient(bootstrap_servers=coordinator_broker.bootstrap, client_id="witness-test")
    try:
        before = read_counters(*address)
        assert read_counters(*address) == before            # reading the counts is not a request
        admin.list_groups()
        admin.describe_groups(["witness-group"])
        after = read_counters(*address)
    finally:
        admin.close()
    grown = {name: after.get(name, 0) - before.get(name, 0) for name in after}
    assert grown["ListGroups"] == 1 and grown["DescribeGroups"] == 1
    assert group_requests(after) - group_requests(before) == sum(grown.get(name, 0) for name in GROUP_APIS)


@pytest.mark.broker
def test_broker_witness_counts_a_consumer_joining_without_its_heartbeats(coordinator_broker, unique_topic):
    witness = BrokerWitness(lambda: [coordinator_broker.broker.address])
    before = witness.sample()
    consumer = KafkaConsumer(unique_topic, bootstrap_servers=coordinator_broker.bootstrap, group_id="witness",
                             heartbeat_interval_ms=100, session_timeout_ms=6000)
    try:
        deadline = time.monotonic() + 60
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(timeout_ms=200)
        assert consumer.assignment()
        time.sleep(0.5)                                     # a few heartbeats
        consumer.poll(timeout_ms=200)
        after = witness.sample()
    finally:
        consumer.close()
    grown = {name: after.counters.get(name, 0) - before.counters.get(name, 0) for name in after.counters}
    assert grown["JoinGroup"] >= 1 and grown["SyncGroup"] >= 1 and grown["Heartbeat"] >= 1
    assert after.served - before.served == sum(grown.get(name, 0) for name in GROUP_APIS)
    assert after.served - before.served < sum(grown.values())  # heartbeats and the rest are left out


def test_herd_points_and_plot_carry_the_servers_count(tmp_path):
    from pathlib import Path

    import pandas as pd

    from experiments.report import plots
    from experiments.summary.read_back import RunData, herd_points

    def run(backend: str, n: int, requests: int, server: float | None) -> RunData:
        herd = pd.DataFrame([{"t": 10.0, "kind": "join", "live_before": n, "live_after": n + 1, "requests": requests,
                              "server_requests": server, "notifications": 0, "failed_attempts": 0, "stable_s": 1.0,
                              "stop_the_world_s": 0.5, "unowned_partition_s": 1.0}])
        empty = pd.DataFrame()
        return run_data(run_dir=Path(f"/runs/{backend}-{n}"), info={"name": f"herd-{n}", "backend": backend,
                       "strategy": "range", "members": n}, facts={}, verdicts=empty, phases=empty, throughput=empty,
                       ownership=empty, faults=empty, herd=herd, metrics=empty, evidence={})

    runs = [run("legacy", n, n * (n + 2), n * (n + 2) * 1.1) for n in (4, 8, 16)]
    runs += [run("classic", n, 2 * n, None) for n in (4, 8, 16)]    # recorded before the servers' counters were
    points = herd_points(runs).set_index(["backend", "N"])
    assert points.loc[("legacy", 8), "server_requests_per_change"] == pytest.approx(88.0)
    assert points.xs("classic")["server_requests_per_change"].isna().all()
    assert plots.herd(points.reset_index(), tmp_path / "herd.png").stat().st_size > 0
