"""Legacy mode: brokers register in a real ZooKeeper exactly the way Kafka 0.8 did."""

from __future__ import annotations

import json
import time

import pytest
from kazoo.client import KazooClient

from broker.admin import create_topic

pytestmark = [pytest.mark.broker, pytest.mark.zk]


def test_brokers_and_topics_carry_the_0_8_json(zk, broker_cluster, unique_topic):
    connect = zk.chroot("broker")
    cluster = broker_cluster(2, zk=connect)
    create_topic(cluster.bootstrap, unique_topic, 4)
    client = KazooClient(hosts=connect, timeout=10.0)
    client.start(timeout=30)
    try:
        assert sorted(client.get_children("/brokers/ids"), key=int) == ["0", "1"]
        for broker in cluster.brokers:
            raw, stat = client.get(f"/brokers/ids/{broker.node_id}")
            registration = json.loads(raw)
            assert list(registration) == ["version", "host", "port", "jmx_port", "timestamp"]
            assert registration["version"] == 1
            assert (registration["host"], registration["port"]) == (broker.host, broker.port)
            assert isinstance(registration["timestamp"], str) and registration["timestamp"].isdigit()
            assert abs(int(registration["timestamp"]) - time.time() * 1000) < 600_000
            assert stat.ephemeralOwner != 0

        topic = json.loads(client.get(f"/brokers/topics/{unique_topic}")[0])
        assert topic == {"version": 1, "partitions": {"0": [0], "1": [1], "2": [0], "3": [1]}}
        assert client.get(f"/brokers/topics/{unique_topic}")[1].ephemeralOwner == 0
        assert "__consumer_offsets" in client.get_children("/brokers/topics")

        cluster.kill(1)  # its ephemeral node goes when its session expires
        deadline = time.monotonic() + 60
        while client.exists("/brokers/ids/1") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert client.get_children("/brokers/ids") == ["0"]
        cluster.restart(1)
        assert sorted(client.get_children("/brokers/ids"), key=int) == ["0", "1"]
    finally:
        client.stop()
        client.close()
