"""Records in virtual time: the partitions' logs and the producer that fills them, as the lab's producer does.

The producer (`broker/workload.py`) sends the records due every 10 ms, round-robin over its topic's partitions,
each stamped when it is sent, and writes the acknowledged ones down as one `records_produced` event per
partition every 100 ms. Here a record is in its partition's log its producer's linger (5 ms) and a loopback round
trip after it was sent, and a member's fetch sees it then (Kafka's fetch answers as soon as there is data:
fetch.min.bytes is 1). The values and their sequence numbers are the real producer's; only the clock is virtual. A partition whose leader died
is held (`hold`): what is sent to it waits, stamped when sent, until the producer finds its new leader (`release`,
decided by `experiments.sim.brokers.DataPath`).

The producer starts as the runner starts it: a process begun at the timeline's start, which sends its first records
`PRODUCER_START_MS` later, and whose first send waits `METADATA_WAIT_MS` for the topic's metadata (kafka-python's
KafkaProducer blocks `send` until it has it); the records due meanwhile go out when it returns, stamped then. So the
first record of a run is its producer's, not the group's, worst latency where nothing else happens.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.workload import BATCH_INTERVAL_S, LINGER_MS, PACE_TICK_S
from experiments.sim.kernel import Simulation
from experiments.sim.recorders import T0_MS
from rebalance import events as ev
from rebalance.events import EventRecorder
from rebalance.types import TopicPartition

PACE_TICK_MS = PACE_TICK_S * 1000
BATCH_INTERVAL_MS = BATCH_INTERVAL_S * 1000
ACK_MS = 1.0               # a produce request's round trip on loopback, the broker's append included
APPENDED_MS = LINGER_MS + ACK_MS   # from a record's send to its place in the log
# `python -m broker.cli produce` on this kind of machine (2026-12-07, machine index python 0.43 s, load 0.5; n = 8
# each, against one lab broker): from its start to its first send 575 ms [568-613]; the first send then blocked for
# the metadata 112.2 ms [111.9-112.7] (its first `producer_pace` event's longest gap), as in two real runs of split
# brain c (111.9 and 116.9 ms). There the first record, sent at 580 ms, was handled 118 ms later, the median record
# 7 ms after it was sent (n = 5,941, one quiet run): the linger, the round trips and the members' poll; the ten
# shipped runs a generation have their worst latency at 117-124 ms.
PRODUCER_START_MS = 575.0
METADATA_WAIT_MS = 112.0


@dataclass
class PartitionLog:
    """One partition: each record's produce time (virtual ms) at its offset."""

    produced_ms: list[float] = field(default_factory=list)

    @property
    def end(self) -> int:
        return len(self.produced_ms)


class Logs:
    """Every partition's log, and who waits for data on which partition (indexed by partition: records land on a
    few partitions every 10 ms, and most members wait on others)."""

    def __init__(self, topics: dict[str, int]) -> None:
        self.partitions = {TopicPartition(topic, p): PartitionLog() for topic, n in topics.items() for p in range(n)}
        # who -> (when it began waiting, its partitions, wake): woken in that order, whatever the partition
        self._waiting: dict[object, tuple[int, frozenset[TopicPartition], Callable[[], None]]] = {}
        self._by_partition: dict[TopicPartition, set[object]] = {tp: set() for tp in self.partitions}
        self._order = itertools.count()

    def append(self, tp: TopicPartition, produced_ms: float) -> int:
        log = self.partitions[tp]
        log.produced_ms.append(produced_ms)
        return log.end - 1

    def wait_for_data(self, who: object, partitions: frozenset[TopicPartition], wake: Callable[[], None]) -> None:
        """Call `wake` once, when a record lands in one of `partitions` (or never, if `stop_waiting` comes first)."""
        before = self._waiting.get(who)
        if before is not None:
            self._forget(who, before[1])
        self._waiting[who] = (next(self._order) if before is None else before[0], partitions, wake)
        for tp in partitions:
            self._by_partition[tp].add(who)

    def stop_waiting(self, who: object) -> None:
        before = self._waiting.pop(who, None)
        if before is not None:
            self._forget(who, before[1])

    def landed(self, partitions: set[TopicPartition]) -> None:
        woken = {who for tp in partitions for who in self._by_partition[tp]}
        for who in sorted(woken, key=lambda waiter: self._waiting[waiter][0]):
            _, wanted, wake = self._waiting.pop(who)
            self._forget(who, wanted)
            wake()

    def _forget(self, who: object, partitions: frozenset[TopicPartition]) -> None:
        for tp in partitions:
            self._by_partition[tp].discard(who)


def wall_ms(virtual_ms: float) -> int:
    """A virtual time as the wall-clock milliseconds the events carry (produce and handling stamps)."""
    return T0_MS + int(virtual_ms)


class Producer:
    """`rate` records a second from `start_ms` to `stop_ms`, round-robin over `topic`'s partitions."""

    def __init__(self, sim: Simulation, logs: Logs, recorder: EventRecorder, *, topic: str, partitions: int,
                 rate: float) -> None:
        self.sim, self.logs, self.recorder = sim, logs, recorder
        self.topic, self.partitions, self.rate = topic, partitions, rate
        self.sent = 0
        self._start_ms = 0.0
        self._stop_ms = 0.0
        self._pending: dict[int, dict] = {}   # partition -> its batch not written down yet
        self._held: dict[int, list[tuple[int, float]]] = {}   # partition without a leader -> (seq, sent) waiting

    def run(self, started_ms: float, duration_ms: float | None = None) -> None:
        """The process started at `started_ms`: it produces from its first send for `duration_ms`, or until
        `stop()` when None."""
        self._start_ms = start_ms = started_ms + PRODUCER_START_MS
        self._stop_ms = float("inf") if duration_ms is None else start_ms + duration_ms
        self.sim.at(start_ms, self._first_tick)
        self.sim.at(start_ms + BATCH_INTERVAL_MS, self._write_down)

    def stop(self) -> None:
        self._stop_ms = min(self._stop_ms, self.sim.now_ms)

    def _first_tick(self) -> None:
        self._tick(answered_after_ms=METADATA_WAIT_MS + APPENDED_MS, next_after_ms=METADATA_WAIT_MS)

    def _tick(self, answered_after_ms: float = APPENDED_MS, next_after_ms: float = PACE_TICK_MS) -> None:
        now = self.sim.now_ms
        if now >= self._stop_ms:
            return
        due = int((now - self._start_ms) * self.rate / 1000) + 1
        if self.sent < due:   # the tick's records are acknowledged together, in the order they were sent
            self.sim.after(answered_after_ms,
                           lambda first=self.sent, last=due, sent=now: self._acknowledged(first, last, sent))
            self.sent = due
        self.sim.after(next_after_ms, self._tick)

    def _acknowledged(self, first: int, last: int, sent_ms: float) -> None:
        """The records first..last-1 (sequence numbers) in their partitions' logs; then whoever waits for them."""
        landed: set[TopicPartition] = set()
        for seq in range(first, last):
            held = self._held.get(seq % self.partitions)
            if held is not None:
                held.append((seq, sent_ms))
            else:
                landed.add(self._append(seq, seq % self.partitions, sent_ms))
        self.logs.landed(landed)

    def hold(self, partition: int) -> None:
        self._held.setdefault(partition, [])

    def holding(self, partition: int) -> bool:
        return partition in self._held

    def release(self, partition: int) -> None:
        """The partition's new leader found: what waited goes there, in the order it was sent (acknowledged a round
        trip later)."""
        if partition in self._held:   # held until then: a record sent meanwhile queues behind the waiting ones
            self.sim.after(ACK_MS, lambda: self._released(partition))

    def _released(self, partition: int) -> None:
        for seq, sent_ms in self._held.pop(partition, []):
            self._append(seq, partition, sent_ms)
        self.logs.landed({TopicPartition(self.topic, partition)})

    def _append(self, seq: int, partition: int, sent_ms: float) -> TopicPartition:
        tp = TopicPartition(self.topic, partition)
        offset = self.logs.append(tp, sent_ms)
        batch = self._pending.get(partition)
        if batch is not None and batch["last_offset"] + 1 != offset:
            self._flush(partition)
            batch = None
        if batch is None:
            batch = self._pending[partition] = {"topic": self.topic, "partition": partition, "first_offset": offset,
                                                "last_offset": offset - 1, "count": 0, "seqs": [],
                                                "produce_ts_ms": []}
        batch["last_offset"], batch["count"] = offset, batch["count"] + 1
        batch["seqs"].append(seq)
        batch["produce_ts_ms"].append(wall_ms(sent_ms))
        return tp

    def _write_down(self) -> None:
        for partition in sorted(self._pending):
            self._flush(partition)
        if self.sim.now_ms < self._stop_ms + ACK_MS + BATCH_INTERVAL_MS:
            self.sim.after(BATCH_INTERVAL_MS, self._write_down)

    def _flush(self, partition: int) -> None:
        self.recorder.emit(ev.RECORDS_PRODUCED, **self._pending.pop(partition))
