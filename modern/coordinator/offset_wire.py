"""OffsetCommit and OffsetFetch on the wire, every version: requests to the coordinator's terms and answers back.

The offset metadata manager decides (which group, which error); this module only translates, so that the version
differences (v1's commit timestamps, v2-v4's retention, v6's leader epochs, v8's several groups, v9's
member epochs, the pre-v2 per-partition errors) stay out of its way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kafka.protocol.consumer import OffsetCommitResponse, OffsetFetchResponse

from modern.common import errors
from modern.common.errors import ErrorClass
from modern.coordinator.records.offset_commit import OffsetAndMetadata

# (group id, requested [(topic, [partition])] or None for all, member id, member epoch) ->
# (error, [(topic, [(partition, offset, leader_epoch, metadata)])])
FetchOffsets = Callable[..., tuple[ErrorClass, list]]


def committed_offsets(request: Any, version: int, now_wall_ms: int) -> dict[tuple[str, int], OffsetAndMetadata]:
    """The offsets an OffsetCommit asks to store, stamped as Kafka stamps them."""
    retention = request.retention_time_ms if 2 <= version <= 4 else -1
    offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
    for topic in request.topics:
        for p in topic.partitions:
            stamp = p.commit_timestamp if version == 1 and p.commit_timestamp >= 0 else now_wall_ms
            offsets[(topic.name, p.partition_index)] = OffsetAndMetadata(
                offset=p.committed_offset,
                metadata=p.committed_metadata or "",
                leader_epoch=p.committed_leader_epoch if version >= 6 else -1,
                commit_timestamp_ms=stamp,
                expire_timestamp_ms=stamp + retention if retention > 0 else None,
            )
    return offsets


def commit_response(version: int, offsets: dict[tuple[str, int], OffsetAndMetadata], error: ErrorClass,
                    refused: Mapping[tuple[str, int], ErrorClass] | None = None) -> Any:
    """One error for every partition asked (a commit is stored whole or not at all), but for the partitions
    `refused` on their own (metadata past the limit)."""
    refused = refused or {}
    by_topic: dict[str, list[int]] = {}
    for topic, partition in offsets:
        by_topic.setdefault(topic, []).append(partition)
    topic_cls = OffsetCommitResponse.OffsetCommitResponseTopic
    return OffsetCommitResponse[version](throttle_time_ms=0, topics=[
        topic_cls(name=name, partitions=[
            topic_cls.OffsetCommitResponsePartition(partition_index=p, error_code=refused.get((name, p), error).errno)
            for p in parts])
        for name, parts in by_topic.items()
    ])


def metadata_too_large(offsets: Mapping[tuple[str, int], OffsetAndMetadata], limit: int) -> set[tuple[str, int]]:
    """The partitions whose metadata is longer than offset.metadata.max.bytes, measured as Kafka measures it:
    Java's String.length(), UTF-16 code units (OffsetMetadataManager.isMetadataInvalid)."""
    return {key for key, value in offsets.items() if len(value.metadata.encode("utf-16-le")) // 2 > limit}


def fetch_response(version: int, request: Any, fetch: FetchOffsets) -> Any:
    """An OffsetFetch answered through `fetch`: from v8 several groups at once (v9 with member epochs);
    below v2 a group-level error is repeated on every partition asked."""
    if version >= 8:
        group_cls = OffsetFetchResponse.OffsetFetchResponseGroup
        topics_cls = group_cls.OffsetFetchResponseTopics
        answers = []
        for wanted in request.groups:
            requested = None if wanted.topics is None else [(t.name, t.partition_indexes) for t in wanted.topics]
            member = (wanted.member_id, wanted.member_epoch) if version >= 9 else (None, -1)
            error, found = fetch(wanted.group_id, requested, *member)
            answers.append(group_cls(group_id=wanted.group_id, error_code=error.errno, topics=[
                topics_cls(name=name, partitions=[topics_cls.OffsetFetchResponsePartitions(
                    partition_index=p, committed_offset=o, committed_leader_epoch=e, metadata=m,
                    error_code=errors.NONE.errno) for p, o, e, m in parts])
                for name, parts in found]))
        return OffsetFetchResponse[version](throttle_time_ms=0, groups=answers)
    requested = None if request.topics is None else [(t.name, t.partition_indexes) for t in request.topics]
    error, found = fetch(request.group_id, requested)
    topic_cls = OffsetFetchResponse.OffsetFetchResponseTopic
    partition_error = error.errno if version < 2 else errors.NONE.errno
    if version < 2 and error is not errors.NONE:
        found = [(name, [(p, -1, -1, "") for p in parts]) for name, parts in (requested or [])]
    return OffsetFetchResponse[version](throttle_time_ms=0, error_code=error.errno, topics=[
        topic_cls(name=name, partitions=[topic_cls.OffsetFetchResponsePartition(
            partition_index=p, committed_offset=o, committed_leader_epoch=e, metadata=m,
            error_code=partition_error) for p, o, e, m in parts])
        for name, parts in found])
