"""The data path: fetch the partitions this member believes it owns, from the brokers.

0.8 ran fetcher threads that filled per-stream queues of chunks, and the application took
one message at a time from a `ConsumerIterator`. Here kafka-python's KafkaConsumer does the
fetching in manual-assignment mode (no group: ZooKeeper is the group), driven from the
application's `poll`; what it fetched waits in `_chunk`, and each `poll` hands out one record,
as the iterator's `next()` did, moving the consumed position past it. The rebalance thread
only says what to fetch from where (`start`) and when to stop (`stop`); both return at once.
`stop` drops every record fetched and not handed out (0.8's `clearFetcherQueues`, the queues
and the iterator's current chunk); once it has returned no record of the old partitions is
handed out any more (a batch fetched meanwhile is dropped), so the consumed positions it
returns are final: the offset after the last record handed out, what the pre-release commit
needs.

Nothing here looks at ZooKeeper: a member cut off from ZooKeeper keeps fetching.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping

from kafka import KafkaConsumer
from kafka.structs import TopicPartition as KafkaTopicPartition

from rebalance import events as ev
from rebalance.record_value import produce_ts_ms
from rebalance.types import Record, TopicPartition

Emit = Callable[..., object]

_POLL_SLICE_S = 0.2


class Fetcher:
    def __init__(self, *, client_id: str, auto_offset_reset: str, emit: Emit) -> None:
        self._client_id = client_id
        self._reset = "earliest" if auto_offset_reset == "smallest" else "latest"
        self._emit = emit
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._bootstrap: str | None = None
        self._wanted: dict[TopicPartition, int | None] = {}   # partition -> start offset (None: reset)
        self._consumed: dict[TopicPartition, int] = {}        # partition -> next offset to hand out
        self._chunk: deque[Record] = deque()                  # fetched, not handed out yet
        self._version = 0                                     # bumped by start/stop
        self._applied_version = -1
        self._consumer: KafkaConsumer | None = None
        self._maker: threading.Thread | None = None
        self._closed = False
        self.last_error: str | None = None

    # -- called by the rebalance thread -------------------------------------------------------------

    def start(self, start_offsets: Mapping[TopicPartition, int | None], bootstrap: str | None) -> None:
        with self._lock:
            self._wanted = dict(start_offsets)
            self._consumed = {tp: off for tp, off in start_offsets.items() if off is not None}
            self._chunk.clear()
            if bootstrap:
                self._bootstrap = bootstrap
            self._version += 1
            self._changed.notify_all()

    def stop(self) -> dict[TopicPartition, int]:
        """Stop handing out records and drop those fetched and not handed out; return the consumed
        positions (after the last record handed out)."""
        with self._lock:
            positions = dict(self._consumed)
            self._wanted = {}
            self._consumed = {}
            self._chunk.clear()
            self._version += 1
            self._changed.notify_all()
        return positions

    def positions(self) -> dict[TopicPartition, int]:
        with self._lock:
            return dict(self._consumed)

    def fetching(self) -> set[TopicPartition]:
        with self._lock:
            return set(self._wanted)

    # -- called by the application thread -----------------------------------------------------------

    def poll(self, timeout_s: float) -> list[Record]:
        """The next record (0.8's `ConsumerIterator.next`), fetching more when none is waiting; [] when
        none came within the timeout."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            with self._lock:
                if self._chunk:
                    return [self._hand_out()]
                version, wanted, bootstrap = self._version, dict(self._wanted), self._bootstrap
                if not wanted:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return []
                    self._changed.wait(min(remaining, _POLL_SLICE_S))
                    continue
            self._poll_slice(version, wanted, bootstrap, _slice(deadline))
            with self._lock:
                if not self._chunk and time.monotonic() >= deadline:
                    return []

    def close(self) -> None:
        """Call once the polling thread has stopped polling."""
        self.stop()
        with self._lock:
            self._closed = True
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    # -- internals: the KafkaConsumer is touched by the polling thread only, never under the lock,
    # so a slow or unreachable broker never holds up a rebalance. A batch fetched while the
    # assignment changed is dropped when it is handed out, under the lock.

    def _poll_slice(self, version: int, wanted: dict, bootstrap: str | None, slice_s: float) -> None:
        """Fetch once; what came for the partitions still wanted joins the chunk."""
        consumer = self._ensure_consumer(bootstrap)
        if consumer is None:
            with self._lock:
                self._changed.wait(slice_s)
            return
        if self._applied_version != version:
            resolved = self._apply(consumer, wanted)
            self._applied_version = version
            with self._lock:
                if self._version == version:
                    for tp, offset in resolved.items():
                        self._consumed.setdefault(tp, offset)
        batches = consumer.poll(timeout_ms=int(slice_s * 1000))
        with self._lock:
            if self._version != version:
                return  # stopped or reassigned meanwhile: these records are no longer ours to hand out
            for ktp, consumer_records in sorted(batches.items()):
                tp = TopicPartition(ktp.topic, ktp.partition)
                if tp in self._wanted:
                    self._chunk.extend(Record(tp.topic, tp.partition, cr.offset, cr.key, cr.value, cr.timestamp,
                                              tuple(cr.headers or ())) for cr in consumer_records)

    def _hand_out(self) -> Record:
        """One record to the application (under the lock): the consumed position moves past it."""
        record = self._chunk.popleft()
        tp = TopicPartition(record.topic, record.partition)
        self._consumed[tp] = record.offset + 1
        self._emit(ev.RECORDS_CONSUMED, topic=record.topic, partition=record.partition, first_offset=record.offset,
                   last_offset=record.offset, count=1, produce_ts_ms=[produce_ts_ms(record.value)])
        return record

    def _ensure_consumer(self, bootstrap: str | None) -> KafkaConsumer | None:
        """The consumer, once made. Making one probes the broker and blocks while it is unreachable
        (a partitioned data link), so it is made on a helper thread and polls meanwhile find none."""
        if self._consumer is not None:
            return self._consumer
        if not bootstrap:
            self.last_error = "no broker address known"
            return None
        if self._maker is None or not self._maker.is_alive():
            self._maker = threading.Thread(target=self._make_consumer, args=(bootstrap,), daemon=True,
                                           name=f"{self._client_id}-fetcher-connect")
            self._maker.start()
        return None

    def _make_consumer(self, bootstrap: str) -> None:
        try:
            consumer = KafkaConsumer(
                bootstrap_servers=bootstrap.split(","),
                client_id=self._client_id,
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset=self._reset,
                fetch_max_wait_ms=100,
            )
        except Exception as error:  # the broker unreachable: the next poll tries again
            self.last_error = f"{type(error).__name__}: {error}"
            return
        with self._lock:
            if self._closed:
                consumer.close()
                return
            self._consumer = consumer
            self.last_error = None
            self._changed.notify_all()

    def _apply(self, consumer: KafkaConsumer, wanted: dict[TopicPartition, int | None]) -> dict[TopicPartition, int]:
        """Assign and seek; returns the positions that auto.offset.reset resolved."""
        kafka_tps = {tp: KafkaTopicPartition(tp.topic, tp.partition) for tp in wanted}
        consumer.assign(list(kafka_tps.values()))
        for tp, ktp in kafka_tps.items():
            offset = wanted[tp]
            if offset is not None:
                consumer.seek(ktp, offset)
            elif self._reset == "earliest":
                consumer.seek_to_beginning(ktp)
            else:
                consumer.seek_to_end(ktp)
        resolved: dict[TopicPartition, int] = {}
        for tp, ktp in kafka_tps.items():  # resolve reset positions now, so a commit can record them
            if wanted[tp] is None:
                try:
                    resolved[tp] = consumer.position(ktp, timeout_ms=5000)
                except Exception as error:
                    self.last_error = f"position {tp}: {type(error).__name__}: {error}"
        return resolved


def _slice(deadline: float) -> float:
    return min(max(deadline - time.monotonic(), 0.0), _POLL_SLICE_S)
