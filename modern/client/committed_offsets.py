"""Reading a group's committed offsets with OffsetFetch, retried as Kafka's clients retry it: both clients
(classic and KIP-848) ask the same way and differ only in the request they send and the errors that fence them.

As Kafka's `ConsumerCoordinator.fetchCommittedOffsets` (and the KIP-848 `CommitRequestManager`): a coordinator
that moved is looked up again, a load in progress is asked again at the same broker, every other error is
retried after the back-off until the request timeout, and only then raised."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from modern.client.connection import ConnectionFailed
from modern.common import errors
from modern.common.errors import ErrorClass, GroupError
from rebalance.types import TopicPartition

# One attempt: the answer's error and its topics (each with `name` and `partitions`).
Attempt = Callable[[], tuple[ErrorClass, list]]


def by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """Partitions grouped by topic, in order, as OffsetFetch asks for them."""
    grouped: dict[str, list[int]] = {}
    for tp in sorted(set(partitions)):
        grouped.setdefault(tp.topic, []).append(tp.partition)
    return grouped


def fetch_committed(attempt: Attempt, *, timeout_ms: int, backoff_ms: int, coordinator_moved: Callable[[], None],
                    stopping: Callable[[], bool],
                    fenced: Callable[[ErrorClass], None] = lambda error: None) -> dict[TopicPartition, int]:
    """Committed next offsets (partitions without one are left out). `fenced` raises for an error that fences
    the member; `stopping` ends the retries early (the member is closing)."""
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        try:
            error, topics = attempt()
        except ConnectionFailed:
            error, topics = errors.COORDINATOR_NOT_AVAILABLE, []
        if error is errors.NONE:
            return {TopicPartition(topic.name, p.partition_index): p.committed_offset
                    for topic in topics for p in topic.partitions if p.committed_offset >= 0}
        fenced(error)
        if error in errors.COORDINATOR_MOVED:
            coordinator_moved()   # COORDINATOR_LOAD_IN_PROGRESS: retried at the same broker
        if time.monotonic() > deadline or stopping():
            raise GroupError(error, "OffsetFetch")
        time.sleep(backoff_ms / 1000)
