"""Records fetched by kafka-python's consumer, turned into the lab's records and logged, for the members that
fetch exactly the partitions their group gave them (modern and kip848)."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Set

from rebalance import events as ev
from rebalance.events import EventRecorder
from rebalance.records import produce_ts_ms
from rebalance.types import Record, TopicPartition


def take_batches(batches: Mapping, owned: Set[TopicPartition], positions: MutableMapping[TopicPartition, int],
                 recorder: EventRecorder, member_id: str, generation: int) -> list[Record]:
    """The records of `batches` (KafkaConsumer.poll's answer) for partitions still `owned`, in partition
    order; advances `positions` and logs one `records_consumed` event per batch with the generation (or
    member epoch) the member held while it fetched. A batch of a partition given up meanwhile is dropped."""
    records: list[Record] = []
    for ktp, batch in sorted(batches.items()):
        tp = TopicPartition(ktp.topic, ktp.partition)
        if tp not in owned or not batch:
            continue
        records.extend(Record(r.topic, r.partition, r.offset, r.key, r.value, r.timestamp) for r in batch)
        positions[tp] = batch[-1].offset + 1
        recorder.emit(ev.RECORDS_CONSUMED, member_id, topic=tp.topic, partition=tp.partition,
                      first_offset=batch[0].offset, last_offset=batch[-1].offset, count=len(batch),
                      produce_ts_ms=[produce_ts_ms(r.value) for r in batch], generation=generation)
    return records
