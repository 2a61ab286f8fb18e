"""Core API semantics through raw requests: acks=0, long-polling fetch, limits, offsets, errors."""

from __future__ import annotations

import asyncio
import time

import kafka.errors as Errors
import pytest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.handlers import CORE_VERSIONS
from broker.peers import PeerClient
from broker.topics import TopicSpec

pytestmark = pytest.mark.broker


def batch(count: int, size: int = 10) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=2**24)
    for delta in range(count):
        builder.append(delta, timestamp=None, key=None, value=b"v" * size, headers=[])
    return bytes(builder.build())


def produce_request(topic: str, records: bytes, acks: int = 1, version: int = 9):
    data = ProduceRequest.TopicProduceData
    return ProduceRequest[version](transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[
        data(name=topic, partition_data=[data.PartitionProduceData(index=0, records=records)])])


def fetch_request(topic: str, offset: int, *, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, partition_max=1 << 20,
                  version: int = 12):
    return FetchRequest[version](max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=0,
                            session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                            topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                                FetchRequest.FetchTopic.FetchPartition(partition=0, fetch_offset=offset,
                                                                       partition_max_bytes=partition_max)])])


def first_partition(response):
    topic = response.responses[0]
    return (topic.partition_responses if hasattr(topic, "partition_responses") else topic.partitions)[0]


@pytest.fixture
def topic(broker, unique_topic):
    broker.run(broker.broker.create_topic(TopicSpec(name=unique_topic, partitions=1)))
    return unique_topic


def ask(broker, *requests, timeout_s=10.0):
    async def exchange():
        client = PeerClient(*broker.broker.address, client_id="api-test")
        try:
            return [await client.request(request, timeout_s) for request in requests]
        finally:
            client.close()
    return broker.run(exchange(), timeout_s=timeout_s * len(requests) + 5)


def test_produce_assigns_offsets_and_rejects_corruption(broker, topic):
    first, second = ask(broker, produce_request(topic, batch(3)), produce_request(topic, batch(2)))
    assert (first_partition(first).base_offset, first_partition(second).base_offset) == (0, 3)
    damaged = bytearray(batch(1))
    damaged[-1] ^= 1
    (answer,) = ask(broker, produce_request(topic, bytes(damaged)))
    assert first_partition(answer).error_code == Errors.CorruptRecordError.errno
    (answer,) = ask(broker, produce_request(topic + "-missing", batch(1)))
    assert first_partition(answer).error_code == Errors.UnknownTopicOrPartitionError.errno
    (answer,) = ask(broker, produce_request(topic, batch(1), acks=2))
    assert first_partition(answer).error_code == Errors.InvalidRequiredAcksError.errno


def test_acks_zero_gets_no_answer_but_is_appended(broker, topic):
    async def exchange():
        client = PeerClient(*broker.broker.address, client_id="api-test")
        try:
            client._reader, client._writer = await asyncio.open_connection(*broker.broker.address)
            silent = produce_request(topic, batch(4), acks=0)
            silent.with_header(correlation_id=99, client_id="api-test")  # an answer would not match
            client._writer.write(bytes(silent.encode(header=True, framed=True)))
            return await client.request(fetch_request(topic, 0), 5)  # the next answer is the fetch's
        finally:
            client.close()
    answer = broker.run(exchange())
    assert first_partition(answer).high_watermark == 4


def test_fetch_long_polls_until_data_arrives(broker, topic):
    started = time.monotonic()
    (empty,) = ask(broker, fetch_request(topic, 0, max_wait_ms=300, min_bytes=1))
    assert time.monotonic() - started >= 0.25 and first_partition(empty).records in (b"", None)

    async def wait_then_produce():
        fetching = asyncio.ensure_future(asyncio.to_thread(ask, broker, fetch_request(topic, 0, max_wait_ms=20_000,
                                                                                      min_bytes=1)))
        await asyncio.sleep(0.3)
        await asyncio.to_thread(ask, broker, produce_request(topic, batch(2)))
        return await fetching

    started = time.monotonic()
    (answer,) = asyncio.run(wait_then_produce())
    assert time.monotonic() - started < 10  # woken by the append, not by the 20 s timeout
    assert first_partition(answer).high_watermark == 2 and first_partition(answer).records


def test_a_waiting_fetch_is_woken_by_its_own_partitions_only_and_leaves_nothing_behind(broker, unique_topic):
    broker.run(broker.broker.create_topic(TopicSpec(name=unique_topic, partitions=2)))

    def produce_to(partition: int):
        data = ProduceRequest.TopicProduceData
        return ProduceRequest[9](transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
            data(name=unique_topic, partition_data=[data.PartitionProduceData(index=partition, records=batch(1))])])

    async def fetch_across_appends():
        fetching = asyncio.ensure_future(asyncio.to_thread(
            ask, broker, fetch_request(unique_topic, 0, max_wait_ms=20_000, min_bytes=1)))
        await asyncio.sleep(0.3)
        await asyncio.to_thread(ask, broker, produce_to(1))    # another partition: the fetch keeps waiting
        await asyncio.sleep(0.3)
        waiting_after_other = not fetching.done()
        await asyncio.to_thread(ask, broker, produce_to(0))
        return waiting_after_other, await fetching

    waiting_after_other, (answer,) = asyncio.run(fetch_across_appends())
    assert waiting_after_other
    assert first_partition(answer).high_watermark == 1 and first_partition(answer).records
    ask(broker, fetch_request(unique_topic, 1, max_wait_ms=100, min_bytes=1))   # times out empty
    assert broker.run(_waiting_fetches(broker.broker)) == 0


async def _waiting_fetches(server) -> int:
    return sum(len(waiters) for waiters in server._append_waiters.values())


def test_fetch_limits_and_offset_errors(broker, topic):
    ask(broker, *(produce_request(topic, batch(100, size=100)) for _ in range(5)))
    (small,) = ask(broker, fetch_request(topic, 0, partition_max=10))
    one_batch = len(first_partition(small).records)
    assert one_batch > 10_000  # a batch bigger than the limit still comes whole
    (two,) = ask(broker, fetch_request(topic, 150, max_bytes=2 * one_batch))
    assert len(first_partition(two).records) == 2 * one_batch
    (beyond,) = ask(broker, fetch_request(topic, 501))
    assert first_partition(beyond).error_code == Errors.OffsetOutOfRangeError.errno


def test_list_offsets_earliest_and_latest(broker, topic):
    ask(broker, produce_request(topic, batch(7)))
    partition = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition
    answers = ask(broker, *(ListOffsetsRequest[7](replica_id=-1, isolation_level=0, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[partition(partition_index=0, timestamp=when)])])
        for when in (-2, -1)))
    assert [a.topics[0].partitions[0].offset for a in answers] == [0, 7]


def test_metadata_without_auto_creation_reports_unknown_topics(broker, unique_topic):
    (answer,) = ask(broker, MetadataRequest[9](topics=[MetadataRequest.MetadataRequestTopic(name=unique_topic)],
                                              allow_auto_topic_creation=False,
                                              include_topic_authorized_operations=False))
    assert answer.topics[0].error_code == Errors.UnknownTopicOrPartitionError.errno
    assert broker.call(lambda b: b.topics.get(unique_topic)) is None


def every_version_requests(topic: str):
    """One request per served version of each core API (fields outside a version are ignored)."""
    from kafka.protocol.admin import CreateTopicsRequest
    from kafka.protocol.metadata import ApiVersionsRequest
    from kafka.protocol.producer import InitProducerIdRequest

    partition = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition
    makers = {
        ApiVersionsRequest: lambda v: ApiVersionsRequest[v](client_software_name="t", client_software_version="1"),
        MetadataRequest: lambda v: MetadataRequest[v](
            topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False, include_topic_authorized_operations=False),
        CreateTopicsRequest: lambda v: CreateTopicsRequest[v](topics=[CreateTopicsRequest.CreatableTopic(
            name=f"{topic}-v{v}", num_partitions=1, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=1000, validate_only=False),
        InitProducerIdRequest: lambda v: InitProducerIdRequest[v](transactional_id=None, transaction_timeout_ms=1000,
                                                                  producer_id=-1, producer_epoch=-1),
        ProduceRequest: lambda v: produce_request(topic, batch(1), version=v),
        FetchRequest: lambda v: fetch_request(topic, 0, version=v),
        ListOffsetsRequest: lambda v: ListOffsetsRequest[v](replica_id=-1, isolation_level=0, timeout_ms=1000, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[partition(partition_index=0, timestamp=-1)])]),
    }
    for request_class, make in makers.items():
        low, high = CORE_VERSIONS[request_class.API_KEY]
        for version in range(low, high + 1):
            yield request_class.name, version, make(version)


def test_every_served_version_of_every_core_api_answers(broker, topic):
    answered = []
    for name, version, request in every_version_requests(topic):
        (answer,) = ask(broker, request)
        assert answer.API_VERSION == version
        answered.append(f"{name} v{version}")
    assert len(answered) == sum(high - low + 1 for low, high in CORE_VERSIONS.values())


def test_metadata_by_topic_id(broker, topic):
    from broker.handlers import topic_id

    def by_id(identifier, version):
        request = MetadataRequest[version](topics=[MetadataRequest.MetadataRequestTopic(topic_id=identifier, name=None)],
                                           allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        (answer,) = ask(broker, request)
        return answer.topics[0]

    found = by_id(topic_id(topic), 12)
    assert (found.error_code, found.name, len(found.partitions)) == (0, topic, 1)
    for version in (10, 12):
        missing = by_id(topic_id(topic + "-nope"), version)
        assert missing.error_code == Errors.UnknownTopicIdError.errno
