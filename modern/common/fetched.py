"""What both group clients do alike once their group has given them partitions: fetch exactly those
(`modern.common.fetcher`, a consumer's data path without a group of its own), log the records, commit on
demand, and report the assignment (the modern and kip848 members)."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, MutableMapping, Set
from typing import Any

from modern.common import errors
from modern.common.errors import ErrorClass
from modern.common.fetcher import Fetcher
from rebalance import events as ev
from rebalance.events import EventRecorder
from rebalance.member import MemberConfig
from rebalance.records import produce_ts_ms
from rebalance.types import Record, TopicPartition


class CommitFailedError(errors.GroupError):
    """Kafka's CommitFailedException: the commit was refused (the group moved on, or the member is stale or
    fenced)."""


class FetchingMember:
    """The half of a `Member` that is the same in both group clients; the group half supplies
    `_commit_offsets` and the generation (or member epoch) its records are fetched under."""

    config: MemberConfig
    settings: Any          # the client's settings: fetch_max_wait_ms is read here
    member_id: str
    recorder: EventRecorder
    _fetcher: Fetcher | None
    _owned: frozenset[TopicPartition]
    _positions: dict[TopicPartition, int]
    _lock: threading.RLock
    _closed: bool

    def _start_fetching(self, strategy: str) -> None:
        self._fetcher = Fetcher(self.config.bootstrap.split(","), client_id=self.member_id,
                                 auto_offset_reset=self.config.auto_offset_reset,
                                 max_wait_ms=self.settings.fetch_max_wait_ms)
        self.recorder.emit(ev.MEMBER_STARTED, self.member_id, group=self.config.group, strategy=strategy,
                           topics=list(self.config.topics), group_instance_id=self.config.group_instance_id,
                           pid=os.getpid())

    def _fetch(self, timeout_s: float, generation: int) -> list[Record]:
        if not self._owned:
            # Nothing to fetch: wait for the group (as Java's poll waits in the join) until the poll's time is
            # up or the group side has news for the next poll.
            news = self._group_news()
            news.wait(timeout_s)
            news.clear()
            return []
        batches = self._fetcher.poll(timeout_ms=int(timeout_s * 1000))
        return take_batches(batches, self._owned, self._positions, self.recorder, self.member_id, generation)

    def _fetch_from(self, committed: Mapping[TopicPartition, int]) -> None:
        """Fetch the owned partitions, each from its position, else its committed offset (else the reset
        policy decides)."""
        self._fetcher.assign(self._owned)
        for tp in sorted(self._owned):
            position = self._positions.get(tp, committed.get(tp))
            if position is not None:
                self._fetcher.seek(tp, position)

    def _drop(self, partitions: set[TopicPartition]) -> None:
        """Stop fetching `partitions` and forget their positions; the rest go on from where they were."""
        self._owned = frozenset(self._owned - partitions)
        for tp in partitions:
            self._positions.pop(tp, None)
        if self._fetcher is not None:
            self._fetcher.assign(self._owned)
            for tp, position in self._positions.items():
                self._fetcher.seek(tp, position)

    def _commit_offsets(self, offsets: Mapping[TopicPartition, int]) -> ErrorClass:
        raise NotImplementedError

    def _group_news(self) -> threading.Event:
        raise NotImplementedError

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit next offsets (None: current positions); raises CommitFailedError when refused."""
        with self._lock:
            error = self._commit_offsets(dict(self._positions if offsets is None else offsets))
            if error is not errors.NONE:
                raise CommitFailedError(error, "OffsetCommit")

    def assignment(self) -> set[TopicPartition]:
        return set(self._owned)

    def close(self) -> None:
        """Give the partitions up (the group half's way: commit, revoke), report the metrics, then leave
        the group and stop fetching, whatever went wrong before."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            reason = "close"
            try:
                self._give_up_partitions()
                self.recorder.emit(ev.METRICS, self.member_id, **self._metrics_snapshot())
            except Exception as error:  # closing must finish; the reason says what went wrong
                reason = f"error: {error}"
            finally:
                self._leave_group()
                if self._fetcher is not None:
                    self._fetcher.close()
                self.recorder.emit(ev.MEMBER_STOPPED, self.member_id, reason=reason)

    def _give_up_partitions(self) -> None:
        raise NotImplementedError

    def _metrics_snapshot(self) -> dict:
        raise NotImplementedError

    def _leave_group(self) -> None:
        raise NotImplementedError


def take_batches(batches: Mapping, owned: Set[TopicPartition], positions: MutableMapping[TopicPartition, int],
                 recorder: EventRecorder, member_id: str, generation: int) -> list[Record]:
    """The records of `batches` (the fetcher's answer) for partitions still `owned`, in partition
    order; advances `positions` and logs one `records_consumed` event per batch with the generation (or
    member epoch) the member held while it fetched. A batch of a partition given up meanwhile is dropped."""
    records: list[Record] = []
    for tp, batch in sorted(batches.items()):
        if tp not in owned or not batch:
            continue
        records.extend(batch)
        positions[tp] = batch[-1].offset + 1
        recorder.emit(ev.RECORDS_CONSUMED, member_id, topic=tp.topic, partition=tp.partition,
                      first_offset=batch[0].offset, last_offset=batch[-1].offset, count=len(batch),
                      produce_ts_ms=[produce_ts_ms(r.value) for r in batch], generation=generation)
    return records
