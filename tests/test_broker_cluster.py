"""A cluster of broker processes: leadership spread, failover onto a shared data directory,
restart, advertised addresses per member, leadership callbacks for the coordinator."""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict

import pytest

from broker.admin import create_topic
from broker.embedded import EmbeddedBroker
from broker.server import BrokerConfig
from broker.topics import OFFSETS_TOPIC
from experiments.folders.run_folder import RunFolder
from rebalance.ports import free_ports

pytestmark = pytest.mark.broker

PARTITIONS = 6


def produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, retries=20,
                             retry_backoff_ms=100)
    futures = [producer.send(topic, value=b"%d" % seq, partition=seq % PARTITIONS) for seq in range(start, start + count)]
    producer.flush(60)
    for future in futures:
        future.get(timeout=60)
    producer.close()


def consume_all(bootstrap: str, topic: str, expected: int) -> dict[int, list[tuple[int, int]]]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    consumed: dict[int, list] = defaultdict(list)
    deadline = time.monotonic() + 60
    while sum(map(len, consumed.values())) < expected and time.monotonic() < deadline:
        for tp, records in consumer.poll(500).items():
            consumed[tp.partition] += [(r.offset, int(r.value)) for r in records]
    consumer.close()
    return consumed


def assert_complete(consumed, expected: int) -> None:
    assert sorted(seq for records in consumed.values() for _, seq in records) == list(range(expected))
    for records in consumed.values():
        assert [offset for offset, _ in records] == list(range(len(records)))


def test_leadership_is_spread_and_moves_to_survivors_with_the_data(broker_cluster, unique_topic):
    cluster = broker_cluster(3)
    create_topic(cluster.bootstrap, unique_topic, PARTITIONS)
    assert cluster.partition_leaders(unique_topic) == {p: p % 3 for p in range(PARTITIONS)}
    produce(cluster.bootstrap, unique_topic, 0, 300)

    cluster.kill(1)
    cluster.wait_for_live([0, 2])
    # only broker 1's partitions (1 and 4) move, to the (p mod 2)-th survivor
    assert cluster.partition_leaders(unique_topic) == {0: 0, 1: 2, 2: 2, 3: 0, 4: 0, 5: 2}
    produce(cluster.live_bootstrap, unique_topic, 300, 300)
    assert_complete(consume_all(cluster.live_bootstrap, unique_topic, 600), 600)

    cluster.restart(1)
    assert cluster.partition_leaders(unique_topic) == {p: p % 3 for p in range(PARTITIONS)}
    produce(cluster.bootstrap, unique_topic, 600, 60)
    assert_complete(consume_all(cluster.bootstrap, unique_topic, 660), 660)


def test_topics_created_on_one_broker_are_known_to_all(broker_cluster, unique_topic):
    cluster = broker_cluster(2, in_memory=True)
    create_topic(cluster.brokers[1].address, unique_topic, 4)
    for index in range(2):
        assert cluster.partition_leaders(unique_topic, index) == {0: 0, 1: 1, 2: 0, 3: 1}
        names = {topic.name for topic in cluster.metadata(index).topics}
        assert OFFSETS_TOPIC in names


def test_a_port_taken_before_the_broker_binds_it_moves_the_cluster_to_fresh_ports(monkeypatch):
    # Between choosing a free port and a broker binding it, another process may take it.
    import socket

    import broker.cluster as cluster_module

    squatter = socket.create_server(("127.0.0.1", 0))
    taken = squatter.getsockname()[1]
    drawn = []

    def first_draw_collides(count, host="127.0.0.1"):
        ports = free_ports(count, host)
        drawn.append(ports)
        return [taken, *ports[1:]] if len(drawn) == 1 else ports

    monkeypatch.setattr(cluster_module, "free_ports", first_draw_collides)
    cluster = cluster_module.LocalCluster(2, in_memory=True)
    try:
        cluster.start()
        assert len(drawn) == 2
        assert taken not in [broker.port for broker in cluster.brokers]
        assert cluster.live_view(0) == [0, 1]
    finally:
        cluster.stop()
        squatter.close()
    assert not any(broker.alive for broker in cluster.brokers)


def test_advertise_map_is_per_member_and_reloaded(tmp_path):
    """Keyed by member name: a member's client id is its name behind a random tag (pod_client_id)."""
    from broker.peers import PeerClient
    from rebalance.member import pod_client_id

    map_path = RunFolder(tmp_path).advertised
    map_path.write_text(json.dumps({"member-1": {"0": "127.0.0.1:1111"}}))
    with EmbeddedBroker(BrokerConfig(advertise="127.0.0.2:2222", advertise_map=map_path)) as embedded:
        def addresses(client_id: str) -> list[tuple[str, int]]:
            from kafka.protocol.metadata import MetadataRequest

            client = PeerClient(*embedded.broker.address, client_id=client_id)
            try:
                answer = embedded.run(client.request(MetadataRequest[4](topics=[], allow_auto_topic_creation=False),
                                                     5))
            finally:
                client.close()
            return [(b.host, b.port) for b in answer.brokers]

        assert addresses("member-1") == [("127.0.0.1", 1111)]
        assert addresses(pod_client_id("member-1")) == [("127.0.0.1", 1111)]
        assert addresses(pod_client_id("member-2")) == addresses("someone-else") == [("127.0.0.2", 2222)]
        replacement = tmp_path / "advertise.tmp"
        replacement.write_text(json.dumps({"member-1": {"0": "127.0.0.1:3333"}}))
        os.replace(replacement, map_path)
        assert addresses("member-1") == [("127.0.0.1", 3333)]
        map_path.write_text("{ torn")  # a half-written file keeps the last good map
        assert addresses("member-1") == [("127.0.0.1", 3333)]


def test_new_leader_of_an_offsets_partition_replays_what_the_old_one_wrote(tmp_path):
    """What the group coordinator relies on: a callback when this broker gains a partition, with
    the log open and holding every record the previous leader appended."""
    ports = free_ports(2)
    peers = {0: f"127.0.0.1:{ports[0]}", 1: f"127.0.0.1:{ports[1]}"}
    config = {"data_dir": tmp_path, "peers": peers, "probe_interval_s": 0.05, "probe_timeout_s": 1.0}
    first = EmbeddedBroker(BrokerConfig(node_id=0, port=ports[0], **config)).start()
    second = EmbeddedBroker(BrokerConfig(node_id=1, port=ports[1], **config))
    gained = []
    second.broker.cluster.on_leadership_change(
        lambda change: gained.append(change) if change.local and change.topic == OFFSETS_TOPIC else None)
    second.start()
    try:
        odd = set(range(1, 50, 2))
        deadline = time.monotonic() + 30
        while not odd <= {c.partition for c in gained} and time.monotonic() < deadline:
            time.sleep(0.05)  # until broker 1 has taken its half over (first had all before it started)
        assert first.call(lambda b: b.cluster.leader_for(OFFSETS_TOPIC, 2)) == 0
        first.call(lambda b: b.log(OFFSETS_TOPIC, 2).append_records([(b"group-a", b"state-1"), (b"group-a", b"2")]))
        assert {c.partition for c in gained} == odd  # broker 1 of two leads the odd partitions
    finally:
        first.stop()
    while 2 not in {c.partition for c in gained} and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        replayed = second.call(lambda b: [(r.offset, r.key, r.value) for r in b.log(OFFSETS_TOPIC, 2).read_records(0)])
        assert replayed == [(0, b"group-a", b"state-1"), (1, b"group-a", b"2")]
        assert second.call(lambda b: b.cluster.leader_for(OFFSETS_TOPIC, 2)) == 1
    finally:
        second.stop()


@pytest.mark.slow
def test_a_paused_leader_keeps_its_partitions_locked_and_nothing_is_lost(broker_cluster, unique_topic):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    cluster = broker_cluster(3)
    create_topic(cluster.bootstrap, unique_topic, PARTITIONS)
    produce(cluster.bootstrap, unique_topic, 0, 120)
    cluster.pause(1)
    try:
        cluster.wait_for_live([0, 2])
        assert cluster.partition_leaders(unique_topic)[1] == 2  # the survivors' view ...
        producer = KafkaProducer(bootstrap_servers=cluster.live_bootstrap, acks="all", retries=0,
                                 request_timeout_ms=3000)
        assert producer.send(unique_topic, value=b"120", partition=0).get(timeout=30).offset == 20
        with pytest.raises(KafkaError):  # ... but broker 2 cannot take the lock a stalled leader holds
            producer.send(unique_topic, value=b"x", partition=1).get(timeout=30)
        producer.close()
    finally:
        cluster.resume(1)
    cluster.wait_for_live([0, 1, 2])
    produce(cluster.bootstrap, unique_topic, 121, 119)
    consumed = consume_all(cluster.bootstrap, unique_topic, 240)
    assert sorted(seq for records in consumed.values() for _, seq in records) == list(range(240))
    for records in consumed.values():
        assert [offset for offset, _ in records] == list(range(len(records)))
