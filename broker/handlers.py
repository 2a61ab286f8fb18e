"""The broker's core APIs: ApiVersions, Metadata, CreateTopics, InitProducerId, Produce, Fetch,
ListOffsets. Each is a registry handler: (RequestContext, decoded request) -> response object.

Error codes come from kafka-python's one table (`kafka.errors`), never as bare integers.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
import uuid

import kafka.errors as Errors
from kafka.protocol.admin import CreateTopicsResponse
from kafka.protocol.api_key import ApiKey
from kafka.protocol.consumer import FetchResponse, ListOffsetsResponse
from kafka.protocol.metadata import ApiVersionsResponse, MetadataResponse
from kafka.protocol.producer import InitProducerIdResponse, ProduceResponse

from broker.log import InvalidBatch
from broker.peers import PEER_CLIENT_ID
from broker.registry import HandlerRegistry, RequestContext
from broker.topics import MAX_PARTITIONS, TopicSpec, topic_name_problem
from rebalance.topic_ids import topic_id

NONE = Errors.NoError.errno
CLUSTER_ID = "rebalance-lab"

# API -> (min, max) version served. Bounded where a higher version would need topic ids in
# requests (Produce 13, Fetch 13) or features the lab does not have.
CORE_VERSIONS = {
    ApiKey.ApiVersions: (0, 4),
    ApiKey.Metadata: (0, 12),
    ApiKey.CreateTopics: (2, 7),
    ApiKey.InitProducerId: (0, 4),
    ApiKey.Produce: (3, 12),
    ApiKey.Fetch: (4, 12),
    ApiKey.ListOffsets: (1, 7),
}

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1


def register_core_handlers(registry: HandlerRegistry) -> None:
    handlers = {
        ApiKey.ApiVersions: api_versions,
        ApiKey.Metadata: metadata,
        ApiKey.CreateTopics: create_topics,
        ApiKey.InitProducerId: init_producer_id,
        ApiKey.Produce: produce,
        ApiKey.Fetch: fetch,
        ApiKey.ListOffsets: list_offsets,
    }
    for key, handler in handlers.items():
        low, high = CORE_VERSIONS[key]
        registry.register(int(key), handler, min_version=low, max_version=high)


def api_versions_response(registry: HandlerRegistry, version: int, error: int = NONE):
    response = ApiVersionsResponse[version]
    return response(
        error_code=error,
        api_keys=[response.ApiVersion(api_key=reg.api_key, min_version=reg.min_version,
                                      max_version=reg.max_version) for reg in registry.supported()],
        throttle_time_ms=0,
    )


async def api_versions(ctx: RequestContext, request):
    return api_versions_response(ctx.broker.registry, ctx.api_version)


async def metadata(ctx: RequestContext, request):
    broker = ctx.broker
    response = MetadataResponse[ctx.api_version]
    if request.topics is None or (ctx.api_version == 0 and not request.topics):
        names = [spec.name for spec in broker.topics.all()]
    else:
        names = [topic.name if topic.name is not None else _name_of_id(broker, topic.topic_id)
                 for topic in request.topics]
    allow_create = request.allow_auto_topic_creation if ctx.api_version >= 4 else True
    topics = []
    for name in names:
        spec = broker.topics.get(name) if name else None
        if spec is None and allow_create and broker.config.auto_create_topics and not topic_name_problem(name):
            await broker.create_topic(TopicSpec(name=name, partitions=broker.config.default_partitions))
            spec = broker.topics.get(name)
        if spec is None:
            if name is None:
                error, name = Errors.UnknownTopicIdError, None if ctx.api_version >= 12 else ""
            elif topic_name_problem(name):
                error = Errors.InvalidTopicError
            else:
                error = Errors.UnknownTopicOrPartitionError
            topics.append(response.MetadataResponseTopic(error_code=error.errno, name=name, topic_id=uuid.UUID(int=0),
                                                         is_internal=False, partitions=[]))
            continue
        partitions = []
        for index in range(spec.partitions):
            leader = broker.cluster.leader_for(name, index)
            partitions.append(response.MetadataResponseTopic.MetadataResponsePartition(
                error_code=NONE, partition_index=index, leader_id=leader, leader_epoch=-1,
                replica_nodes=[leader], isr_nodes=[leader], offline_replicas=[]))
        topics.append(response.MetadataResponseTopic(error_code=NONE, name=name, topic_id=topic_id(name),
                                                     is_internal=spec.internal, partitions=partitions))
    brokers = []
    for node in broker.cluster.live_brokers():
        host, port = broker.advertised_address(node.node_id, ctx.client_id)
        brokers.append(response.MetadataResponseBroker(node_id=node.node_id, host=host, port=port, rack=None))
    return response(throttle_time_ms=0, brokers=brokers, cluster_id=CLUSTER_ID,
                    controller_id=broker.cluster.controller_id(), topics=topics)


def _name_of_id(broker, wanted: uuid.UUID | None) -> str | None:
    return next((spec.name for spec in broker.topics.all() if topic_id(spec.name) == wanted), None)


async def create_topics(ctx: RequestContext, request):
    broker = ctx.broker
    response = CreateTopicsResponse[ctx.api_version]
    results = []
    created = []
    for topic in request.topics:
        configs = {config.name: config.value for config in topic.configs}
        partitions = broker.config.default_partitions if topic.num_partitions == -1 else topic.num_partitions
        error, message = _creation_problem(broker, topic.name, partitions, topic.replication_factor)
        if error is None and not request.validate_only:
            spec = TopicSpec(name=topic.name, partitions=partitions,
                             compacted=configs.get("cleanup.policy") == "compact")
            await broker.create_topic(spec, forward=ctx.client_id != PEER_CLIENT_ID)
            created.append(spec)
        results.append(response.CreatableTopicResult(
            name=topic.name, topic_id=topic_id(topic.name), error_code=(error or Errors.NoError).errno,
            error_message=message, num_partitions=partitions if error is None else -1,
            replication_factor=1 if error is None else -1, configs=[]))
    return response(throttle_time_ms=0, topics=results)


def _creation_problem(broker, name: str, partitions: int, replication_factor: int):
    problem = topic_name_problem(name)
    if problem:
        return Errors.InvalidTopicError, problem
    if broker.topics.get(name) is not None:
        return Errors.TopicAlreadyExistsError, f"topic {name!r} already exists"
    if not 1 <= partitions <= MAX_PARTITIONS:
        return Errors.InvalidPartitionsError, f"the number of partitions must be within 1-{MAX_PARTITIONS}"
    if replication_factor not in (-1, 1):
        return Errors.InvalidReplicationFactorError, "this broker keeps one replica per partition"
    return None, None


async def init_producer_id(ctx: RequestContext, request):
    # Idempotent producers need an id; random ids keep brokers from handing out the same one.
    response = InitProducerIdResponse[ctx.api_version]
    return response(throttle_time_ms=0, error_code=NONE, producer_id=secrets.randbits(62), producer_epoch=0)


async def produce(ctx: RequestContext, request):
    broker = ctx.broker
    response = ProduceResponse[ctx.api_version]
    topic_results = []
    for topic in request.topic_data:
        partition_results = []
        for data in topic.partition_data:
            if request.acks in (0, 1, -1):
                error, base, start = _append(broker, topic.name, data.index, data.records)
            else:
                error, base, start = Errors.InvalidRequiredAcksError, -1, -1
            partition_results.append(response.TopicProduceResponse.PartitionProduceResponse(
                index=data.index, error_code=error.errno, base_offset=base, log_append_time_ms=-1,
                log_start_offset=start, record_errors=[], error_message=None))
        topic_results.append(response.TopicProduceResponse(name=topic.name, partition_responses=partition_results))
    if request.acks == 0:
        return None  # acks=0: the producer expects no answer at all
    return response(responses=topic_results, throttle_time_ms=0)


def _append(broker, topic: str, partition: int, records: bytes | None):
    spec = broker.topics.get(topic)
    if spec is None or not 0 <= partition < spec.partitions:
        return Errors.UnknownTopicOrPartitionError, -1, -1
    log = broker.log(topic, partition)
    if log is None:
        return Errors.NotLeaderForPartitionError, -1, -1
    try:
        result = log.append(records or b"")
    except InvalidBatch:
        return Errors.CorruptRecordError, -1, -1
    if not result.duplicate:
        broker.notify_appended(topic, partition)
    return Errors.NoError, result.base_offset, log.start_offset


async def fetch(ctx: RequestContext, request):
    broker = ctx.broker
    deadline = time.monotonic() + max(request.max_wait_ms, 0) / 1000
    wanted = [(topic.topic, part.partition) for topic in request.topics for part in topic.partitions]
    while True:
        waiter = broker.next_append(wanted)  # taken before reading, so no append slips in between
        response, size = _fetch_once(broker, ctx.api_version, request)
        remaining = deadline - time.monotonic()
        try:
            if size >= request.min_bytes or remaining <= 0 or _has_errors(response):
                return response
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(waiter), remaining)
        finally:
            broker.forget_waiter(waiter, wanted)


def _fetch_once(broker, version: int, request):
    response = FetchResponse[version]
    budget = request.max_bytes if version >= 3 else 2**31 - 1
    total = 0
    topics = []
    for topic in request.topics:
        partitions = []
        for wanted in topic.partitions:
            error, high_watermark, start, records = Errors.NoError, -1, -1, b""
            spec = broker.topics.get(topic.topic)
            log = broker.log(topic.topic, wanted.partition)
            if spec is None or not 0 <= wanted.partition < spec.partitions:
                error = Errors.UnknownTopicOrPartitionError
            elif log is None:
                error = Errors.NotLeaderForPartitionError
            else:
                high_watermark, start = log.next_offset, log.start_offset
                if not start <= wanted.fetch_offset <= high_watermark:
                    error = Errors.OffsetOutOfRangeError
                elif wanted.fetch_offset < high_watermark and (budget > 0 or total == 0):
                    records = log.read(wanted.fetch_offset, min(wanted.partition_max_bytes, max(budget, 1)))
                    budget -= len(records)
                    total += len(records)
            partitions.append(response.FetchableTopicResponse.PartitionData(
                partition_index=wanted.partition, error_code=error.errno, high_watermark=high_watermark,
                last_stable_offset=high_watermark, log_start_offset=start, aborted_transactions=None,
                preferred_read_replica=-1, records=records))
        topics.append(response.FetchableTopicResponse(topic=topic.topic, partitions=partitions))
    # session id 0: no fetch session, so clients keep sending full fetch requests
    return response(throttle_time_ms=0, error_code=NONE, session_id=0, responses=topics), total


def _has_errors(response) -> bool:
    return any(p.error_code != NONE for topic in response.responses for p in topic.partitions)


async def list_offsets(ctx: RequestContext, request):
    broker = ctx.broker
    response = ListOffsetsResponse[ctx.api_version]
    topics = []
    for topic in request.topics:
        partitions = []
        for wanted in topic.partitions:
            error, offset = Errors.NoError, -1
            spec = broker.topics.get(topic.name)
            log = broker.log(topic.name, wanted.partition_index)
            if spec is None or not 0 <= wanted.partition_index < spec.partitions:
                error = Errors.UnknownTopicOrPartitionError
            elif log is None:
                error = Errors.NotLeaderForPartitionError
            elif wanted.timestamp == EARLIEST_TIMESTAMP:
                offset = log.start_offset
            elif wanted.timestamp == LATEST_TIMESTAMP:
                offset = log.next_offset
            else:  # the first record at or after the timestamp (-1 when there is none)
                offset = next((r.offset for r in log.read_records(0) if r.timestamp_ms >= wanted.timestamp), -1)
            partitions.append(response.ListOffsetsTopicResponse.ListOffsetsPartitionResponse(
                partition_index=wanted.partition_index, error_code=error.errno, timestamp=-1, offset=offset,
                leader_epoch=-1))
        topics.append(response.ListOffsetsTopicResponse(name=topic.name, partitions=partitions))
    return response(throttle_time_ms=0, topics=topics)
