"""Committed offsets: persistent znodes holding the next offset to consume as a decimal string."""

from __future__ import annotations

import threading
import time

from kazoo.exceptions import NodeExistsError, NoNodeError

from legacy_zk.registry import GroupPaths
from legacy_zk.zk import TracedZooKeeper
from rebalance import events as ev
from rebalance.types import TopicPartition


def read_offset(zk: TracedZooKeeper, paths: GroupPaths, partition: TopicPartition) -> int | None:
    """None when the group never committed this partition (auto.offset.reset then decides)."""
    try:
        data, _ = zk.get(paths.offset(partition.topic, partition.partition))
    except NoNodeError:
        return None
    text = data.decode().strip()
    return int(text) if text else None


def write_offset(zk: TracedZooKeeper, paths: GroupPaths, partition: TopicPartition, offset: int) -> None:
    """Set the znode, creating it (and its parents) the first time: zkclient's updatePersistentPath."""
    path = paths.offset(partition.topic, partition.partition)
    value = str(int(offset)).encode()
    try:
        zk.set(path, value)
    except NoNodeError:
        zk.ensure_path(paths.offsets(partition.topic))
        try:
            zk.create(path, value)
        except NodeExistsError:
            zk.set(path, value)


class OffsetCommitter:
    """Writes consumed positions to ZooKeeper, skipping those unchanged since the last write
    or read (0.8's checkpointed offsets), and reports each commit as an event."""

    def __init__(self, zk: TracedZooKeeper, paths: GroupPaths, emit) -> None:
        self._zk = zk
        self._paths = paths
        self._emit = emit
        self._checkpointed: dict[TopicPartition, int] = {}
        self._lock = threading.Lock()  # the application's commit() and the executor's may meet

    def remember(self, offsets: dict[TopicPartition, int | None]) -> None:
        """Offsets just read from ZooKeeper need no write back."""
        with self._lock:
            self._remember(offsets)

    def _remember(self, offsets: dict[TopicPartition, int | None]) -> None:
        for partition, offset in offsets.items():
            if offset is not None:
                self._checkpointed[partition] = offset

    def commit(self, positions: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Write what changed; returns what was written. Errors are reported and raised."""
        with self._lock:
            return self._commit(positions)

    def _commit(self, positions: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        changed = {tp: off for tp, off in sorted(positions.items()) if self._checkpointed.get(tp) != off}
        if not changed:
            return {}
        written: dict[TopicPartition, int] = {}
        try:
            for partition, offset in changed.items():
                write_offset(self._zk, self._paths, partition, offset)
                self._checkpointed[partition] = offset
                written[partition] = offset
        except Exception as error:
            self._emit(
                ev.COMMIT_FAILED,
                offsets={str(tp): off for tp, off in changed.items()},
                error=f"{type(error).__name__}: {error}",
            )
            raise
        finally:
            if written:
                self._emit(ev.OFFSETS_COMMITTED, offsets={str(tp): off for tp, off in written.items()}, generation=-1)
        return written


class AutoCommitter:
    """0.8's auto-commit: a scheduler thread of its own ("kafka-consumer-autocommit" on a one-thread
    KafkaScheduler), first after one interval, then at a fixed rate, committing the consumed positions.
    It runs beside the watcher executor, so a long rebalance never delays a due commit. An error is
    reported and the schedule goes on, as 0.8 logged it and let it go. `clock` and `wait` are the
    monotonic clock and an interruptible sleep (the stop event's), so the schedule itself holds no I/O."""

    def __init__(self, committer: OffsetCommitter, positions, *, interval_ms: int, name: str,
                 on_error, clock=None) -> None:
        self._committer = committer
        self._positions = positions          # () -> {partition: next offset}
        self._interval_s = interval_ms / 1000.0
        self._on_error = on_error
        self._clock = clock or time.monotonic
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"{name}-autocommit", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stopping.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        due = self._clock() + self._interval_s
        while not self._stopping.wait(max(0.0, due - self._clock())):
            due += self._interval_s            # fixed rate: a late run does not shift the next ones
            try:
                positions = self._positions()
                if positions:
                    self._committer.commit(positions)
            except Exception as error:  # reported (commit_failed already written), then the schedule goes on
                self._on_error(error)
