"""Real Kafka clients round-trip records through a 3-broker cluster of the lab's brokers."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

from broker.admin import create_topic

pytestmark = [pytest.mark.broker, pytest.mark.conformance]

RECORDS = 10_000
PARTITIONS = 6
DEADLINE_S = 120


def check_round_trip(consumed: dict[int, list[tuple[int, bytes]]]) -> None:
    """Every record came back once, and each partition kept produce order with gapless offsets."""
    total = sum(len(records) for records in consumed.values())
    assert total == RECORDS
    for partition, records in consumed.items():
        offsets = [offset for offset, _ in records]
        assert offsets == list(range(len(records))), f"partition {partition}: offsets not 0..n-1"
        sequence = [int(value.split(b":")[1]) for _, value in records]
        assert sequence == sorted(sequence), f"partition {partition}: order not kept"
        assert all(int(value.split(b":")[0]) == partition for _, value in records)
    seen = sorted(int(value.split(b":")[1]) for records in consumed.values() for _, value in records)
    assert seen == list(range(RECORDS))


def test_kafka_python_round_trip(broker_cluster, unique_topic):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    cluster = broker_cluster(3)
    create_topic(cluster.bootstrap, unique_topic, PARTITIONS)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, linger_ms=5, acks="all")
    futures = [producer.send(unique_topic, value=b"%d:%d" % (seq % PARTITIONS, seq), partition=seq % PARTITIONS)
               for seq in range(RECORDS)]
    producer.flush(DEADLINE_S)
    acknowledged = [future.get(timeout=DEADLINE_S) for future in futures]
    producer.close()
    assert {meta.partition for meta in acknowledged} == set(range(PARTITIONS))

    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", client_id="round-trip")
    consumer.assign([TopicPartition(unique_topic, p) for p in range(PARTITIONS)])
    consumed: dict[int, list] = defaultdict(list)
    deadline = time.monotonic() + DEADLINE_S
    while sum(map(len, consumed.values())) < RECORDS and time.monotonic() < deadline:
        for partition, records in consumer.poll(timeout_ms=500).items():
            consumed[partition.partition] += [(record.offset, record.value) for record in records]
    consumer.close()
    check_round_trip(consumed)


def test_confluent_kafka_round_trip(broker_cluster, unique_topic):
    import confluent_kafka

    cluster = broker_cluster(3)
    create_topic(cluster.bootstrap, unique_topic, PARTITIONS)
    failures = []
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5, "acks": "all"})
    for seq in range(RECORDS):
        while True:
            try:
                producer.produce(unique_topic, value=b"%d:%d" % (seq % PARTITIONS, seq), partition=seq % PARTITIONS,
                                 on_delivery=lambda error, message: error and failures.append(error))
                break
            except BufferError:  # local queue full: let deliveries drain it
                producer.poll(0.1)
    assert producer.flush(DEADLINE_S) == 0
    assert failures == []

    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": unique_topic,
                                         "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(unique_topic, p, confluent_kafka.OFFSET_BEGINNING)
                     for p in range(PARTITIONS)])
    consumed: dict[int, list] = defaultdict(list)
    deadline = time.monotonic() + DEADLINE_S
    try:
        while sum(map(len, consumed.values())) < RECORDS and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=1000, timeout=0.5):
                assert message.error() is None, message.error()
                consumed[message.partition()].append((message.offset(), message.value()))
    finally:
        consumer.close()
    check_round_trip(consumed)
