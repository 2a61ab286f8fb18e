"""Produce and fetch throughput of one lab broker (its own process) on loopback.

    .venv/bin/python benchmarks/bench_broker.py [--records 200000] [--size 100] [--partitions 6]

Clients: kafka-python's KafkaProducer/KafkaConsumer (per-record Python work in the client
bounds these); kafka-python's codec driven directly (RecordBatch v2 batches of 1,000 records
built before the clock starts, Produce and Fetch requests pipelined over one connection:
this measures the broker); confluent-kafka (librdkafka). Prints records/s and MB/s, and the
machine's load average, since other work on the machine changes every figure.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid

from broker.admin import create_topic
from broker.cluster import start_cluster


def kafka_python_produce(bootstrap: str, topic: str, records: int, size: int, partitions: int) -> float:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=20, batch_size=256 * 1024,
                             max_request_size=8 * 1024 * 1024)
    value = b"x" * size
    producer.send(topic, value=value, partition=0).get(timeout=30)  # connections and metadata up
    started = time.perf_counter()
    for seq in range(records):
        producer.send(topic, value=value, partition=seq % partitions)
    sent = time.perf_counter()
    producer.flush()
    elapsed = time.perf_counter() - started
    producer.close()
    print(f"  (KafkaProducer: {sent - started:.2f} s in send() calls, {elapsed - (sent - started):.3f} s flushing "
          f"after the last one: the client, not the broker, sets this pace)")
    return elapsed


def kafka_python_fetch(bootstrap: str, topic: str, records: int, partitions: int) -> float:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                             fetch_max_bytes=64 * 1024 * 1024, max_partition_fetch_bytes=16 * 1024 * 1024,
                             max_poll_records=100_000)
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    count = 0
    started = time.perf_counter()
    while count < records:
        count += sum(len(batch) for batch in consumer.poll(1000).values())
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def build_batches(records: int, size: int, per_batch: int) -> list[bytes]:
    """RecordBatch v2 blobs made with kafka-python's builder (before the clock starts)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    value = b"x" * size
    batches = []
    for start in range(0, records, per_batch):
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                            producer_epoch=-1, base_sequence=-1, batch_size=2**30)
        for delta in range(min(per_batch, records - start)):
            builder.append(delta, timestamp=None, key=None, value=value, headers=[])
        batches.append(bytes(builder.build()))
    return batches


async def _pipelined(bootstrap: str, requests: list, in_flight: int = 16) -> list:
    """Send kafka-python Request objects over one connection, up to `in_flight` unanswered."""
    import asyncio

    from rebalance.kafka_frames import response_class

    host, _, port = bootstrap.partition(",")[0].rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    window = asyncio.Semaphore(in_flight)
    answers = []

    async def read_all() -> None:
        for request in requests:
            size = int.from_bytes(await reader.readexactly(4), "big")
            frame = await reader.readexactly(size)
            answers.append(response_class(request.API_KEY, request.API_VERSION).decode(frame, header=True))
            window.release()

    reading = asyncio.ensure_future(read_all())
    for correlation, request in enumerate(requests):
        await window.acquire()
        request.with_header(correlation_id=correlation, client_id="bench")
        writer.write(bytes(request.encode(header=True, framed=True)))
        await writer.drain()
    await reading
    writer.close()
    return answers


def codec_produce(bootstrap: str, topic: str, records: int, size: int, partitions: int) -> float:
    import asyncio

    from kafka.protocol.producer import ProduceRequest

    batches = build_batches(records, size, per_batch=1000)
    data = ProduceRequest.TopicProduceData
    requests = [ProduceRequest[9](transactional_id=None, acks=1, timeout_ms=30000, topic_data=[data(
        name=topic, partition_data=[data.PartitionProduceData(index=i % partitions, records=batch)])])
        for i, batch in enumerate(batches)]
    started = time.perf_counter()
    answers = asyncio.run(_pipelined(bootstrap, requests))
    elapsed = time.perf_counter() - started
    assert all(p.error_code == 0 for a in answers for t in a.responses for p in t.partition_responses)
    return elapsed


def codec_fetch(bootstrap: str, topic: str, records: int, partitions: int) -> float:
    """Fetch every partition from offset 0 with Fetch v12, counting records from batch headers."""
    import asyncio

    from kafka.protocol.consumer import FetchRequest
    from kafka.record.default_records import DefaultRecordBatch

    header = DefaultRecordBatch.HEADER_STRUCT
    offsets = dict.fromkeys(range(partitions), 0)
    count = 0
    started = time.perf_counter()
    while count < records:
        request = FetchRequest[12](max_wait_ms=500, min_bytes=1, max_bytes=64 << 20, isolation_level=0,
                                   session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                                   topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                                       FetchRequest.FetchTopic.FetchPartition(partition=p, fetch_offset=offset,
                                                                              partition_max_bytes=16 << 20)
                                       for p, offset in offsets.items()])])
        (answer,) = asyncio.run(_pipelined(bootstrap, [request]))
        for partition in answer.responses[0].partitions:
            data, position = partition.records or b"", 0
            while position + header.size <= len(data):  # headers only: counting, not parsing records
                fields = header.unpack_from(data, position)
                base, length, next_offset = fields[0], fields[1], fields[0] + fields[6] + 1
                count += next_offset - max(base, offsets[partition.partition_index])
                offsets[partition.partition_index] = next_offset
                position += 12 + length
    return time.perf_counter() - started


def confluent_produce(bootstrap: str, topic: str, records: int, size: int, partitions: int) -> float:
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 20,
                                         "batch.size": 1024 * 1024, "queue.buffering.max.messages": 1_000_000})
    value = b"x" * size
    producer.produce(topic, value=value, partition=0)
    producer.flush(30)
    started = time.perf_counter()
    for seq in range(records):
        while True:
            try:
                producer.produce(topic, value=value, partition=seq % partitions)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    return time.perf_counter() - started


def confluent_fetch(bootstrap: str, topic: str, records: int, partitions: int) -> float:
    import confluent_kafka

    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": topic,
                                         "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                     for p in range(partitions)])
    count = 0
    started = time.perf_counter()
    while count < records:
        count += len(consumer.consume(num_messages=10_000, timeout=1.0))
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def report(label: str, records: int, size: int, elapsed: float) -> None:
    print(f"{label:<44} {records / elapsed:>12,.0f} records/s {records * size / elapsed / 1e6:>8.1f} MB/s"
          f"   ({records:,} records in {elapsed:.2f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100, help="value bytes per record")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--data-dir", action="store_true", help="segment files instead of memory")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    with start_cluster(1, in_memory=not args.data_dir, coordinator=False) as cluster:
        print(f"one broker at {cluster.bootstrap} ({'segment files' if args.data_dir else 'in memory'}), "
              f"{args.partitions} partitions, {args.size}-byte values")
        for client, produce, fetch in (
                ("kafka-python", kafka_python_produce, kafka_python_fetch),
                ("kafka-python codec", codec_produce, codec_fetch),
                ("confluent-kafka", confluent_produce, confluent_fetch)):
            topic = f"bench-{client.replace(' ', '-')}-{uuid.uuid4().hex[:6]}"
            create_topic(cluster.bootstrap, topic, args.partitions)
            report(f"{client} produce (acks=1, batched)", args.records, args.size,
                   produce(cluster.bootstrap, topic, args.records, args.size, args.partitions))
            first = 0 if produce is codec_produce else 1  # the others send one warm-up record
            report(f"{client} fetch", args.records + first, args.size,
                   fetch(cluster.bootstrap, topic, args.records + first, args.partitions))


if __name__ == "__main__":
    from experiments.run.machine import print_index

    print_index()   # every figure below is this machine's, as fast as this line says
    main()
