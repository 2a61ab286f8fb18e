"""What both group clients do alike once their group has given them partitions: fetch exactly those
(`modern.client.fetcher`, a consumer's data path without a group of its own), log the records, commit on
demand, and report the assignment (the modern and kip848 members)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, MutableMapping, Set
from typing import Any

from modern.client.fetcher import Fetcher
from modern.common import errors
from modern.common.errors import ErrorClass, GroupError
from rebalance import events as ev
from rebalance.events import EventRecorder
from rebalance.member import MemberConfig
from rebalance.record_value import produce_ts_ms
from rebalance.types import Record, TopicPartition


class CommitFailedError(errors.GroupError):
    """Kafka's CommitFailedException: the commit was refused (the group moved on, or the member is stale or
    fenced)."""


class FetchingMember:
    """The half of a `Member` that is the same in both group clients; the group half supplies
    `_commit_offsets` and the generation (or member epoch) its records are fetched under."""

    config: MemberConfig
    settings: Any          # the client's settings: fetch_max_wait_ms and client_id are read here
    member_id: str
    recorder: EventRecorder
    _fetcher: Fetcher | None
    _owned: frozenset[TopicPartition]
    _positions: dict[TopicPartition, int]
    _lock: threading.RLock
    _closed: bool
    # Owned partitions whose committed offsets are not known yet (their OffsetFetch timed out): not fetched
    # until a later poll learns them, as Kafka's partitions "initializing" until initWithCommittedOffsetsIfNeeded.
    _awaiting_committed: frozenset[TopicPartition] = frozenset()
    _offset_fetch: Callable[[set[TopicPartition]], dict[TopicPartition, int]] | None = None
    _offset_fetch_not_yet: tuple[type[Exception], ...] = ()

    def prepare(self) -> None:
        """Make the fetching client and let it reach the brokers, without joining: a member host started ahead
        of its join wave (experiments.run.member_host) has its members ready when the wave comes."""
        if self._fetcher is None:
            self._fetcher = self._new_fetcher()

    def _new_fetcher(self) -> Fetcher:
        return Fetcher(self.config.bootstrap.split(","), client_id=self.settings.client_id,
                       auto_offset_reset=self.config.auto_offset_reset, max_wait_ms=self.settings.fetch_max_wait_ms)

    def _start_fetching(self, strategy: str) -> None:
        if self._fetcher is None:
            self._fetcher = self._new_fetcher()
        self.recorder.emit(ev.MEMBER_STARTED, self.member_id, group=self.config.group, strategy=strategy,
                           topics=list(self.config.topics), group_instance_id=self.config.group_instance_id,
                           pid=os.getpid())

    def _fetch(self, timeout_s: float, generation: int) -> list[Record]:
        self._retry_offset_fetch()
        if not self._owned - self._awaiting_committed:
            self._wait_idle(timeout_s)
            return []
        batches = self._fetcher.poll(timeout_ms=int(timeout_s * 1000))
        records = take_batches(batches, self._owned, self._positions, self.recorder, self.member_id, generation)
        for tp in self._owned:
            # A position the reset policy gave counts as consumed and is committed (Kafka's allConsumed).
            position = self._fetcher.position(tp)
            if position is not None:
                self._positions[tp] = position
        return records

    def _committed_offsets(self, partitions: set[TopicPartition],
                           fetch: Callable[[set[TopicPartition]], dict[TopicPartition, int]],
                           not_yet: tuple[type[Exception], ...] = ()) -> dict[TopicPartition, int]:
        """The committed offsets of newly assigned `partitions` by `fetch` (the client's OffsetFetch). When it
        times out (a coordinator error) the partitions wait, unfetched, and each poll asks again, as Kafka's
        poll does when `fetchCommittedOffsets` runs out of time; it never raises out of poll. `not_yet`: errors
        after which a retried fetch leaves the partitions waiting too (the group side learns why)."""
        try:
            return fetch(partitions)
        except GroupError as error:
            if error.error not in errors.COORDINATOR_ERRORS:
                raise
        self._awaiting_committed = self._awaiting_committed | partitions
        self._offset_fetch, self._offset_fetch_not_yet = fetch, not_yet
        return {}

    def _retry_offset_fetch(self) -> None:
        self._awaiting_committed = self._awaiting_committed & self._owned
        if not self._awaiting_committed or self._offset_fetch is None:
            return
        try:
            committed = self._offset_fetch(set(self._awaiting_committed))
        except GroupError as error:
            if error.error not in errors.COORDINATOR_ERRORS:
                raise
            return
        except self._offset_fetch_not_yet:
            return
        self._awaiting_committed = frozenset()
        self._fetch_from(committed)

    def _fetch_from(self, committed: Mapping[TopicPartition, int]) -> None:
        """Fetch the owned partitions, each from its position, else its committed offset (else the reset
        policy decides); those whose committed offsets are not known yet wait."""
        fetching = self._owned - self._awaiting_committed
        self._fetcher.assign(fetching)
        for tp in sorted(fetching):
            position = self._positions.get(tp, committed.get(tp))
            if position is not None:
                self._fetcher.seek(tp, position)

    def _drop(self, partitions: set[TopicPartition]) -> None:
        """Stop fetching `partitions` and forget their positions; the rest go on from where they were."""
        self._owned = frozenset(self._owned - partitions)
        self._awaiting_committed = self._awaiting_committed & self._owned
        for tp in partitions:
            self._positions.pop(tp, None)
        if self._fetcher is not None:
            fetching = self._owned - self._awaiting_committed
            self._fetcher.assign(fetching)
            for tp, position in self._positions.items():
                if tp in fetching:
                    self._fetcher.seek(tp, position)   # a kept partition's buffered records stay (same position)

    def _commit_offsets(self, offsets: Mapping[TopicPartition, int]) -> ErrorClass:
        raise NotImplementedError

    def _group_news(self) -> threading.Event:
        raise NotImplementedError

    def _wait_idle(self, timeout_s: float) -> None:
        """Nothing to fetch: wait for the group (as Java's poll waits in the join) until the poll's time is up
        or the group side has news for the next poll. A client whose poll waits otherwise says so here."""
        news = self._group_news()
        news.wait(timeout_s)
        news.clear()

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
    """The records of `batches` (the fetcher's answer) for partitions still `owned`, in the order the
    fetcher handed them out (their data's arrival, as Kafka's); advances `positions` and logs one `records_consumed` event per batch with the generation (or
    member epoch) the member held while it fetched. A batch of a partition given up meanwhile is dropped."""
    records: list[Record] = []
    for tp, batch in batches.items():
        if tp not in owned or not batch:
            continue
        records.extend(batch)
        positions[tp] = batch[-1].offset + 1
        recorder.emit(ev.RECORDS_CONSUMED, member_id, topic=tp.topic, partition=tp.partition,
                      first_offset=batch[0].offset, last_offset=batch[-1].offset, count=len(batch),
                      produce_ts_ms=[produce_ts_ms(r.value) for r in batch], generation=generation)
    return records
