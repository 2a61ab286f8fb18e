"""Record the wire corpus: real clients (kafka-python, confluent-kafka classic and KIP-848) against a lab
broker with its coordinator, every request frame kept as the broker read it.

    python -m experiments.fuzz.capture_corpus [FOLDER]     (default: the stored corpus, experiments/fuzz/corpus/wire)

Each distinct (API, version) gets its first frame as an input of its own; each client's whole
conversation (its first MAX_SESSION_FRAMES frames) is one more input, so the fuzzer starts from
joins followed by syncs, commits and leaves as well as from single requests.
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections import defaultdict
from pathlib import Path

from broker.embedded import EmbeddedBroker
from broker.server import BrokerConfig
from experiments.fuzz.frames import join_frames
from experiments.fuzz.libfuzzer import MAX_LEN, stored_corpus
from modern.coordinator.classic_group import GroupConfig
from modern.coordinator.config import CoordinatorConfig
from modern.coordinator.consumer_group import ConsumerGroupConfig
from modern.coordinator.service import CoordinatorExtension
from rebalance.kafka_frames import peek_header

MAX_SESSION_FRAMES = 40
TOPIC = "corpus"


class Recorder:
    """Keeps every frame the broker dispatches, by the client id in its header."""

    def __init__(self, broker) -> None:
        self.frames: dict[str, list[bytes]] = defaultdict(list)
        original = broker._dispatch

        async def recording(frame: bytes, client_host: str):
            self.frames[_client_id(frame)].append(bytes(frame))
            return await original(frame, client_host)

        broker._dispatch = recording


def _client_id(frame: bytes) -> str:
    """The client id of a request header (all versions put it right after the correlation id)."""
    size = int.from_bytes(frame[8:10], "big", signed=True)
    return frame[10:10 + size].decode(errors="replace") if size > 0 else ""


def exercise_kafka_python(bootstrap: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="kp-producer")
    for index in range(20):
        producer.send(TOPIC, key=str(index).encode(), value=b"value-%d" % index)
    producer.flush(30)
    producer.close()
    for strategy, name in (("range", "kp-range"), ("cooperative-sticky", "kp-coop")):
        from kafka.coordinator.assignors.range import RangePartitionAssignor
        from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

        assignor = RangePartitionAssignor if strategy == "range" else StickyPartitionAssignor
        consumer = KafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id=f"group-{name}", client_id=name,
                                 auto_offset_reset="earliest", partition_assignment_strategy=[assignor],
                                 consumer_timeout_ms=3000)
        for _ in consumer:
            pass
        consumer.commit()
        consumer.close()


def exercise_confluent(bootstrap: str) -> None:
    import confluent_kafka
    from confluent_kafka.admin import AdminClient

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "client.id": "ck-producer"})
    for index in range(20):
        producer.produce(TOPIC, key=str(index).encode(), value=b"value-%d" % index)
    producer.flush(30)
    for protocol in ("classic", "consumer"):
        name = f"ck-{protocol}"
        settings = {"bootstrap.servers": bootstrap, "group.id": f"group-{name}", "client.id": name,
                    "auto.offset.reset": "earliest", "group.protocol": protocol}
        if protocol == "classic":
            settings["partition.assignment.strategy"] = "cooperative-sticky"
        consumer = confluent_kafka.Consumer(settings)
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 15
        seen = 0
        while seen < 20 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                seen += 1
        consumer.commit(asynchronous=False)
        consumer.close()
    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "ck-admin"})
    groups = ["group-ck-classic", "group-kp-range"]
    for future in admin.describe_consumer_groups(groups).values():
        future.result(30)
    admin.list_consumer_groups().result(30)
    for future in admin.list_consumer_group_offsets(
            [confluent_kafka.ConsumerGroupTopicPartitions("group-ck-classic")]).values():
        future.result(30)


def record(folder: Path) -> int:
    coordinator = CoordinatorExtension(CoordinatorConfig(
        group=GroupConfig(initial_rebalance_delay_ms=0),
        consumer_group=ConsumerGroupConfig(heartbeat_interval_ms=500, min_heartbeat_interval_ms=500)))
    with EmbeddedBroker(BrokerConfig(port=0, default_partitions=3), extensions=[coordinator]) as embedded:
        recorder = Recorder(embedded.broker)
        exercise_kafka_python(embedded.bootstrap)
        exercise_confluent(embedded.bootstrap)
    return write_corpus(recorder.frames, folder)


def write_corpus(frames_by_client: dict[str, list[bytes]], folder: Path) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    written = 0
    seen_versions: set[tuple[int, int]] = set()
    for client, frames in sorted(frames_by_client.items()):
        for frame in frames:
            api_key, api_version, _ = peek_header(frame)
            if (api_key, api_version) not in seen_versions:
                seen_versions.add((api_key, api_version))
                written += _write(folder, f"api{api_key}-v{api_version}", join_frames([frame]))
        session = join_frames(frames[:MAX_SESSION_FRAMES])
        while len(session) > MAX_LEN["wire"] and frames:  # keep within what the fuzzer reads
            frames = frames[:-1]
            session = join_frames(frames[:MAX_SESSION_FRAMES])
        written += _write(folder, f"session-{client or 'anonymous'}", session)
    return written


def _write(folder: Path, stem: str, data: bytes) -> int:
    if not data:
        return 0
    digest = hashlib.sha1(data).hexdigest()[:10]
    (folder / f"{stem}-{digest}").write_bytes(data)
    return 1


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else stored_corpus("wire")
    print(f"{record(target)} inputs written to {target}")
