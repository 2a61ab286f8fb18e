"""A 0.8 member's offsets and fetching in virtual time: the part of `experiments.sim.legacy.LegacyMember` that
`legacy_zk/fetcher.py` and `legacy_zk/offsets.py` play.

The application takes one record at a time from the positions the fetcher holds; a rebalance attempt first stops
fetching and writes the consumed positions, only those changed since the last write or read (0.8's checkpointed
offsets), each a ZooKeeper set; a successful attempt starts fetching from the offsets it read (else
auto.offset.reset). The auto-commit thread writes the positions on its own schedule, a fixed rate on a thread of its
own, and its requests outlive a session (`LegacyMember._run(retried=True)`, zkclient's retryUntilConnected): a set
blocked while the member is out of contact goes out in the next session with the positions it took before."""

from __future__ import annotations

from collections.abc import Generator

from experiments.sim.legacy_session import Request
from rebalance import events as ev
from rebalance.types import TopicPartition


class OffsetsAndFetching:
    """The auto-commit thread, the pre-release commit and the fetcher's start and stop; the member's state and its
    `_run` and `_ensure_path` are `LegacyMember`'s."""

    def records_flow(self) -> None:
        """The producer has started: from now on each owned partition has a position to commit."""
        self.consuming = True

    def _auto_committed(self) -> None:
        """0.8's auto-commit: a KafkaScheduler task at a fixed rate on a thread of its own, so a run that blocks (its
        ZooKeeper link cut) holds the next back, which then starts as soon as it ends."""
        if not self.alive:
            return
        self._auto_commit = self.clock.after(self.config.auto_commit_interval_ms, self._auto_committed)
        if self._committing:
            self._commit_due = True
        else:
            self._commit_run()

    def _commit_run(self) -> None:
        self._committing = True

        def done() -> None:
            self._committing = False
            if self._commit_due and self.alive:
                self._commit_due = False
                self._commit_run()

        self._run(self._commit(dict(self.positions)) if self.app is not None else self._commit(), done, worker=False,
                  retried=True)

    def _start_fetching(self, start_offsets: dict[TopicPartition, int | None]) -> None:
        """Step 7: the offsets just read need no write back; a partition never committed starts where
        auto.offset.reset says (smallest: the log's start; largest: its end)."""
        self._checkpointed.update({tp: offset for tp, offset in start_offsets.items() if offset is not None})
        logs = self.app.logs.partitions
        self.positions = {tp: offset if offset is not None else (0 if self.config.auto_offset_reset == "smallest"
                                                                 else logs[tp].end)
                          for tp, offset in start_offsets.items()}
        self.app.wake()

    def _stop_fetching_and_commit(self) -> Generator[Request, object, None]:
        """Step 2: fetching stops (what was fetched and not handed out is dropped) and the consumed positions are
        committed."""
        if self.app is None:
            yield from self._commit()
            return
        positions, self.positions = self.positions, {}
        if self.config.auto_commit_enable and positions:
            yield from self._commit(positions)

    def _commit(self, positions: dict[TopicPartition, int] | None = None) -> Generator[Request, object, None]:
        """Auto-commit's positions, as `legacy_zk.offsets.write_offset` writes each: a set (which a herd count leaves
        out), and the first time the node's parents and the node itself. With records: the positions given, those
        changed since the last write or read, then offsets_committed. Without: the application is taken to have
        consumed from every partition it owns, as a herd run's producer makes it."""
        if positions is None:
            if not self.config.auto_commit_enable or not self.consuming:
                return
            for partition in sorted(self.owned):
                yield from self._write_offset(partition, b"0")
            return
        changed = {tp: offset for tp, offset in sorted(positions.items()) if self._checkpointed.get(tp) != offset}
        written: dict[str, int] = {}
        try:
            for partition, offset in changed.items():
                yield from self._write_offset(partition, str(offset).encode())
                self._checkpointed[partition] = offset
                written[str(partition)] = offset
        finally:
            if written:
                self.recorder.emit(ev.OFFSETS_COMMITTED, self.name, offsets=written, generation=-1)

    def _write_offset(self, partition: TopicPartition, data: bytes) -> Generator[Request, object, None]:
        path = self.paths.offset(partition.topic, partition.partition)
        if (yield ("set", path, {"data": data, "missing_ok": True})) is None:
            yield from self._ensure_path(self.paths.offsets(partition.topic))
            if not (yield ("create", path, {"data": data, "exists_ok": True})):
                yield ("set", path, {"data": data})
