"""The experiments' producer: records at a steady rate, the acknowledged ones written down in batches.

Record values are JSON `{"seq": N, "ts_ms": wall_ms}` so a consumer can measure
produce-to-consume latency and spot gaps; records go round-robin over the partitions
(or, keyed, by the producer's hash of the sequence number). Pacing is a token bucket on
the monotonic clock: a stall (GC, SIGSTOP) is followed by a short catch-up burst at most
`burst` records long, never by a flood. The bucket is drained every `PACE_TICK_S`, the
records due then sent together: a record stamped and sent on its own wakes kafka-python's
sender thread once a record, which at 600 records/s took 64% of a core; in ticks of 10 ms,
36%, and the broker's share fell from 14% to 10% (benchmarks/bench_producer.py, medians of
3). Each record is stamped when it is sent, so the tick delays no record's measured
latency; it only makes the arrivals come in groups of rate/100, as a producer's `linger.ms`
groups them on the wire.

Once a second the producer writes how it kept its schedule (`producer_pace`): the records the schedule called
for so far and those sent, how far behind it is, and its longest pause between two ticks. A producer starved of
CPU falls behind and, the bucket being small, stays behind: the run then offered less load than it declares,
which the run's conditions check says (experiments.run.conditions).

Acknowledged records are gathered per partition and written as one `records_produced`
event per partition every `BATCH_INTERVAL_S` (and at the end): a record per event would
make the producer's log most of a run's bytes. A batch holds consecutive offsets only; an
offset that does not follow the last one starts a new batch.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from kafka import KafkaProducer

from rebalance.events import PRODUCER_PACE, RECORDS_PRODUCED, EventRecorder, NullRecorder
from rebalance.record_value import encode_value

PACE_TICK_S = 0.01             # the records due are sent together this often
LINGER_MS = 5                  # each send waits this long for others to share its request (linger.ms)
MAX_IDLE_SLEEP_S = 0.05        # at low rates, the longest wait for a token (the duration is checked between)
BATCH_INTERVAL_S = 0.1         # how often acknowledged records are written down
PACE_REPORT_S = 1.0            # how often the producer writes how it kept its schedule


@dataclass(frozen=True, kw_only=True)
class WorkloadConfig:
    bootstrap: str
    topic: str
    partitions: int = 50
    rate: float = 600.0            # records per second
    duration_s: float = 60.0
    keyed: bool = False
    burst: int | None = None       # token bucket capacity; default: a tenth of a second's worth
    client_id: str = "rebalance-lab-producer"
    acks: int = -1
    create_topic: bool = True

    def __post_init__(self) -> None:
        if self.rate <= 0:
            raise ValueError(f"rate must be positive, got {self.rate}")
        if self.duration_s <= 0:
            raise ValueError(f"duration must be positive, got {self.duration_s}")
        if self.partitions < 1:
            raise ValueError(f"partitions must be at least 1, got {self.partitions}")
        if self.burst is not None and self.burst < 1:
            raise ValueError(f"burst must be at least 1, got {self.burst}")

    @property
    def capacity(self) -> int:
        return self.burst if self.burst is not None else max(1, int(self.rate / 10))


class TokenBucket:
    """`rate` tokens per second up to `capacity`; time is passed in (monotonic seconds)."""

    def __init__(self, rate: float, capacity: int, now: float) -> None:
        self.rate, self.capacity = rate, capacity
        self._tokens = 1.0
        self._stamp = now

    def try_take(self, now: float) -> bool:
        return self.take_all(now, at_most=1) == 1

    def take_all(self, now: float, *, at_most: int | None = None) -> int:
        """Every whole token there is (at most `at_most`), taken at once."""
        self._tokens = min(self.capacity, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now
        taken = int(self._tokens) if at_most is None else min(int(self._tokens), at_most)
        self._tokens -= taken
        return taken

    def time_until_token(self) -> float:
        return max(0.0, (1.0 - self._tokens) / self.rate)


@dataclass
class ProducedBatch:
    """Acknowledged records of one partition at consecutive offsets, not yet written down."""

    topic: str
    partition: int
    first_offset: int
    seqs: list[int]
    stamps: list[int]

    @property
    def next_offset(self) -> int:
        return self.first_offset + len(self.seqs)

    def fields(self) -> dict:
        return {"topic": self.topic, "partition": self.partition, "first_offset": self.first_offset,
                "last_offset": self.next_offset - 1, "count": len(self.seqs), "seqs": self.seqs,
                "produce_ts_ms": self.stamps}


class _Pace:
    """The schedule a producer at `rate` records a second keeps from `start`: record n is due at
    start + n / rate (the bucket's first token is there at once)."""

    def __init__(self, rate: float, start: float) -> None:
        self.rate, self.start = rate, start
        self.last_tick = start
        self.longest_gap = 0.0
        self.next_report = start + PACE_REPORT_S

    def tick(self, now: float) -> None:
        self.longest_gap = max(self.longest_gap, now - self.last_tick)
        self.last_tick = now

    def due_report(self, now: float) -> bool:
        return now >= self.next_report

    def report(self, now: float, sent: int) -> dict:
        due = int((now - self.start) * self.rate) + 1
        fields = {"rate": self.rate, "due": due, "sent": sent,
                  "behind_ms": round(max(0.0, (due - sent) / self.rate) * 1000, 1),
                  "longest_gap_ms": round(self.longest_gap * 1000, 1)}
        self.longest_gap = 0.0
        self.next_report = now + PACE_REPORT_S
        return fields


@dataclass(frozen=True)
class WorkloadSummary:
    sent: int
    acknowledged: int
    failed: int
    elapsed_s: float


class ProducerWorkload:
    def __init__(self, config: WorkloadConfig, *, events_path: str | Path | None = None, run_id: str = "",
                 recorder: EventRecorder | None = None) -> None:
        self.config = config
        self.recorder = recorder or (EventRecorder(events_path, run_id=run_id, process=None)
                                     if events_path else NullRecorder())
        self._acknowledged = 0
        self._failed = 0
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, int], ProducedBatch] = {}
        self.first_error: Exception | None = None

    def run(self, stop: threading.Event | None = None) -> WorkloadSummary:
        """Produce for the configured duration (or until `stop` is set), then flush and report."""
        config = self.config
        stop = stop or threading.Event()
        if config.create_topic:
            self._ensure_topic()
        producer = KafkaProducer(bootstrap_servers=config.bootstrap, client_id=config.client_id, acks=config.acks,
                                 linger_ms=LINGER_MS)
        start = time.monotonic()
        bucket = TokenBucket(config.rate, config.capacity, start)
        sequence = 0
        written_at = start
        pace = _Pace(config.rate, start)
        try:
            while not stop.is_set():
                now = time.monotonic()
                if now - start >= config.duration_s:
                    break
                if now - written_at >= BATCH_INTERVAL_S:
                    self._write_batches()
                    written_at = now
                pace.tick(now)
                if pace.due_report(now):
                    self.recorder.emit(PRODUCER_PACE, **pace.report(now, sequence))
                for _ in range(bucket.take_all(now)):
                    self._send(producer, sequence)
                    sequence += 1
                stop.wait(min(max(PACE_TICK_S, bucket.time_until_token()), MAX_IDLE_SLEEP_S))
            self.recorder.emit(PRODUCER_PACE, **pace.report(time.monotonic(), sequence))
            producer.flush()
        finally:
            producer.close()
            self._write_batches()
            self.recorder.close()
        return WorkloadSummary(sequence, self._acknowledged, self._failed, time.monotonic() - start)

    def _send(self, producer: KafkaProducer, sequence: int) -> None:
        config = self.config
        stamp = time.time_ns() // 1_000_000
        value = encode_value(sequence, stamp)
        if config.keyed:
            future = producer.send(config.topic, value=value, key=str(sequence).encode())
        else:
            future = producer.send(config.topic, value=value, partition=sequence % config.partitions)
        future.add_callback(self._acknowledge, sequence, stamp)
        future.add_errback(self._fail)

    def _acknowledge(self, sequence: int, stamp: int, metadata) -> None:  # the producer's I/O thread
        key = (metadata.topic, metadata.partition)
        with self._lock:
            self._acknowledged += 1
            batch = self._pending.get(key)
            if batch is not None and batch.next_offset != metadata.offset:
                self.recorder.emit(RECORDS_PRODUCED, **self._pending.pop(key).fields())
                batch = None
            if batch is None:
                batch = self._pending[key] = ProducedBatch(metadata.topic, metadata.partition, metadata.offset, [], [])
            batch.seqs.append(sequence)
            batch.stamps.append(stamp)

    def _write_batches(self) -> None:
        with self._lock:
            batches, self._pending = list(self._pending.values()), {}
        for batch in batches:
            self.recorder.emit(RECORDS_PRODUCED, **batch.fields())

    def _fail(self, error: Exception) -> None:
        with self._lock:
            self._failed += 1
            if self.first_error is None:
                self.first_error = error

    def _ensure_topic(self) -> None:
        from broker.admin import TopicExists, create_topic, wait_for_topic

        try:
            create_topic(self.config.bootstrap, self.config.topic, self.config.partitions)
        except TopicExists:
            wait_for_topic(self.config.bootstrap, self.config.topic, self.config.partitions)
