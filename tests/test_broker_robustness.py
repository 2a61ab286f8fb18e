"""Malformed input never crashes the broker; limits close connections cleanly; a stalled client
stalls nobody else. The request decoder is fuzzed with hypothesis."""

from __future__ import annotations

import os
import socket
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder

from rebalance.kafka_frames import (
    DEFAULT_MAX_FRAME_BYTES,
    REQUEST_CLASSES,
    DecodedRequest,
    FrameError,
    decode_request,
)

pytestmark = pytest.mark.broker

FUZZ_EXAMPLES = int(os.environ.get("BROKER_FUZZ_EXAMPLES", "1500"))
TRIED = {"decoder": 0, "server": 0}


def records() -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=2**20)
    builder.append(0, timestamp=1, key=b"k", value=b"v", headers=[])
    return bytes(builder.build())


def encoded(request) -> bytes:
    request.with_header(correlation_id=7, client_id="fuzz")
    return bytes(request.encode(header=True))


def valid_requests(topic: str = "fuzz") -> list[bytes]:
    fetch_partition = FetchRequest.FetchTopic.FetchPartition
    return [
        encoded(ApiVersionsRequest[3](client_software_name="fuzz", client_software_version="1")),
        encoded(MetadataRequest[12](topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                    allow_auto_topic_creation=False, include_topic_authorized_operations=False)),
        encoded(MetadataRequest[1](topics=None)),
        encoded(ProduceRequest[9](transactional_id=None, acks=1, timeout_ms=1000, topic_data=[
            ProduceRequest.TopicProduceData(name=topic, partition_data=[
                ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=records())])])),
        encoded(FetchRequest[12](max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
                                 session_epoch=-1, topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                                     fetch_partition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])],
                                 forgotten_topics_data=[], rack_id="")),
        encoded(ListOffsetsRequest[7](replica_id=-1, isolation_level=0, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
                ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, timestamp=-2)])])),
        encoded(CreateTopicsRequest[5](topics=[CreateTopicsRequest.CreatableTopic(
            name=topic + "-new", num_partitions=2, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=1000, validate_only=False)),
        encoded(InitProducerIdRequest[4](transactional_id=None, transaction_timeout_ms=1000, producer_id=-1,
                                         producer_epoch=-1)),
    ]


VALID = valid_requests()


@st.composite
def mutated(draw):
    frame = bytearray(draw(st.sampled_from(VALID)))
    for _ in range(draw(st.integers(1, 8))):
        position = draw(st.integers(0, len(frame) - 1))
        frame[position] = draw(st.integers(0, 255))
    cut = draw(st.integers(0, len(frame)))
    return bytes(frame[:cut]) if draw(st.booleans()) else bytes(frame)


@st.composite
def header_then_noise(draw):
    api_key = draw(st.sampled_from(sorted(REQUEST_CLASSES)) | st.integers(-(2**15), 2**15 - 1))
    version = draw(st.integers(-1, 20))
    return struct.pack(">hhi", api_key, version, 1) + draw(st.binary(max_size=200))


frames = st.binary(max_size=300) | mutated() | header_then_noise()


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(frames)
def test_decoder_returns_a_request_or_a_frame_error(frame):
    TRIED["decoder"] += 1
    try:
        assert isinstance(decode_request(frame), DecodedRequest)
    except FrameError:
        pass


def test_valid_requests_decode():
    for frame in VALID:
        assert decode_request(frame).client_id == "fuzz"


# -- against a running broker -------------------------------------------------------------

def connect(embedded) -> socket.socket:
    host, port = embedded.broker.address
    sock = socket.create_connection((host, port), timeout=10)
    return sock


def exchange(sock: socket.socket, frame: bytes) -> bytes:
    sock.sendall(struct.pack(">i", len(frame)) + frame)
    return read_frame(sock)


def read_frame(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", recv_exactly(sock, 4))[0]
    return recv_exactly(sock, size)


def recv_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("closed by the broker")
        data += chunk
    return data


def closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def assert_still_serving(embedded) -> None:
    with connect(embedded) as sock:
        answer = exchange(sock, VALID[0])
    assert ApiVersionsResponse[3].decode(answer, header=True).error_code == 0


@pytest.mark.parametrize("prefix", [struct.pack(">i", DEFAULT_MAX_FRAME_BYTES + 1), struct.pack(">i", -5),
                                    struct.pack(">i", 3)])
def test_impossible_frame_sizes_close_the_connection(broker, prefix):
    with connect(broker) as sock:
        sock.sendall(prefix)
        assert closed_by_peer(sock)
    assert_still_serving(broker)


def test_unknown_api_key_and_unsupported_version_close_the_connection(broker):
    for header in (struct.pack(">hhi", 999, 0, 1), struct.pack(">hhi", 0, 1, 1), struct.pack(">hhi", 0, 99, 1)):
        with connect(broker) as sock:
            sock.sendall(struct.pack(">i", len(header) + 6) + header + b"\x00\x04fuzz")
            assert closed_by_peer(sock)
    assert_still_serving(broker)


def test_api_versions_at_an_unsupported_version_answers_v0_with_the_error(broker):
    header = struct.pack(">hhi", 18, 77, 42) + b"\x00\x04fuzz"
    with connect(broker) as sock:
        answer = exchange(sock, header)
    response = ApiVersionsResponse[0].decode(answer, header=True)
    assert response.header.correlation_id == 42
    assert response.error_code == 35  # UNSUPPORTED_VERSION
    assert {entry.api_key for entry in response.api_keys} >= {0, 1, 2, 3, 18, 19}


@settings(max_examples=max(FUZZ_EXAMPLES // 8, 50), deadline=None, suppress_health_check=list(HealthCheck))
@given(frame=frames.filter(bool))
def test_garbage_frames_never_take_the_broker_down(broker, caplog, frame):
    TRIED["server"] += 1
    with connect(broker) as sock:
        sock.settimeout(5)
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        try:
            read_frame(sock)  # an answer (the frame happened to be valid) or a close: both fine
        except (ConnectionError, TimeoutError, OSError):
            pass
    assert_still_serving(broker)
    assert not [r for r in caplog.records if "handler error" in r.getMessage()], "a handler raised"


def test_stalled_clients_do_not_stall_others(broker, unique_topic):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    from broker.admin import create_topic

    create_topic(broker.bootstrap, unique_topic, 1)
    half_frame = connect(broker)  # announces 1000 bytes, sends 10, then goes silent
    half_frame.sendall(struct.pack(">i", 1000) + b"\x00" * 10)
    never_reads = connect(broker)  # asks for the whole partition again and again, reads nothing
    fetch = valid_requests(unique_topic)[4]
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    for i in range(2000):
        producer.send(unique_topic, value=b"x" * 1000 + b"%d" % i, partition=0)
    producer.flush(30)
    never_reads.setblocking(False)
    stuffed = 0
    for _ in range(2000):
        try:
            never_reads.send(struct.pack(">i", len(fetch)) + fetch)
            stuffed += 1
        except BlockingIOError:
            break
    started = time.monotonic()
    producer.send(unique_topic, value=b"last", partition=0).get(timeout=30)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(unique_topic, 0)])
    count = 0
    while count < 2001 and time.monotonic() - started < 60:
        count += sum(len(batch) for batch in consumer.poll(500).values())
    consumer.close()
    producer.close()
    half_frame.close()
    never_reads.close()
    assert stuffed > 0
    assert count == 2001


def test_report_fuzz_counts():
    print(f"\nfuzzed inputs: decoder {TRIED['decoder']}, live broker {TRIED['server']}")
    assert TRIED["decoder"] == 0 or TRIED["decoder"] >= min(FUZZ_EXAMPLES, 100)


def test_an_unfinished_frame_is_dropped_after_the_frame_timeout():
    from broker.embedded import EmbeddedBroker
    from broker.server import BrokerConfig

    with EmbeddedBroker(BrokerConfig(frame_timeout_s=0.5)) as embedded, connect(embedded) as sock:
        sock.sendall(struct.pack(">i", 100) + b"\x00" * 10)
        started = time.monotonic()
        assert closed_by_peer(sock)
        assert 0.3 < time.monotonic() - started < 8
