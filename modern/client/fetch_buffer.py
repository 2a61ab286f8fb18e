"""Fetched records not yet handed out, and the order in which assigned partitions are fetched.

As in Kafka's consumer (3.7: `FetchBuffer`, `FetchCollector.collectFetch`, `SubscriptionState`): records are
handed out in the order their partitions' data arrived, a partition handed out in part stays first in line,
and a partition drained of data (or answered with an error) moves to the end of the fetch order
(`SubscriptionState.movePartitionToEnd`), so the partitions behind it get the first bytes of the next Fetch.
A partition with data buffered is not fetched again until it is drained (`AbstractFetch.fetchablePartitions`).
"""

from __future__ import annotations

from collections.abc import Iterable

from rebalance.types import Record, TopicPartition


class FetchBuffer:
    def __init__(self) -> None:
        self._records: dict[TopicPartition, list[Record]] = {}   # in the order the data arrived
        self._order: dict[TopicPartition, None] = {}             # the assignment, in fetch order

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """A new assignment starts in partition order; data of partitions kept stays buffered."""
        wanted = set(partitions)
        if wanted != self._order.keys():
            self._order = dict.fromkeys(sorted(wanted))
        for tp in [tp for tp in self._records if tp not in wanted]:
            del self._records[tp]

    def add(self, tp: TopicPartition, records: list[Record]) -> None:
        if records:
            self._records.setdefault(tp, []).extend(records)

    def drop(self, tp: TopicPartition) -> None:
        self._records.pop(tp, None)

    def move_to_end(self, tp: TopicPartition) -> None:
        if tp in self._order:
            del self._order[tp]
            self._order[tp] = None

    def __bool__(self) -> bool:
        return bool(self._records)

    def __contains__(self, tp: object) -> bool:
        return tp in self._records

    def next_offset(self, tp: TopicPartition) -> int | None:
        """The offset of the first record not yet handed out, None if nothing is buffered."""
        records = self._records.get(tp)
        return records[0].offset if records else None

    def in_fetch_order(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        wanted = set(partitions)
        return [tp for tp in self._order if tp in wanted]

    def hand_out(self, room: int) -> dict[TopicPartition, list[Record]]:
        """At most `room` records, partitions in the order their data arrived."""
        handed: dict[TopicPartition, list[Record]] = {}
        for tp in list(self._records):
            if room <= 0:
                break
            records = self._records[tp]
            handed[tp], rest = records[:room], records[room:]
            room -= len(handed[tp])
            if rest:
                self._records[tp] = rest
            else:
                del self._records[tp]
                self.move_to_end(tp)
        return handed
