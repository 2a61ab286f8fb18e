"""One event schema for both rebalancers, written as JSON lines, one file per process.

Every event carries: run_id, backend, ts_ns (CLOCK_MONOTONIC, comparable across the
processes of one machine), ts_ms (wall clock), process, member, type; then fields of
its type. Names follow Kafka's VerifiableConsumer where one exists.

Each event is written with one os.write on an O_APPEND descriptor: lines from several
threads never interleave, and a crash loses at most the line being written. Readers
skip a torn last line.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

# Event types. A recorder accepts only these, so a typo fails at the call site.
MEMBER_STARTED = "member_started"
MEMBER_STOPPED = "member_stopped"
REBALANCE_STARTED = "rebalance_started"
REBALANCE_COMPLETED = "rebalance_completed"
REBALANCE_FAILED = "rebalance_failed"
REBALANCE_ATTEMPT = "rebalance_attempt"          # legacy: one attempt and its outcome
PARTITIONS_REVOKED = "partitions_revoked"
PARTITIONS_ASSIGNED = "partitions_assigned"
PARTITIONS_LOST = "partitions_lost"
RECORDS_CONSUMED = "records_consumed"
OFFSETS_COMMITTED = "offsets_committed"
COMMIT_FAILED = "commit_failed"
COORDINATION_REQUEST = "coordination_request"    # a ZooKeeper op or a group API request
WATCH_NOTIFICATION = "watch_notification"
SESSION_STATE = "session_state"                  # CONNECTED / SUSPENDED / LOST / EXPIRED
FAULT_STARTED = "fault_started"
FAULT_STOPPED = "fault_stopped"
RECORD_PRODUCED = "record_produced"
RECORDS_PRODUCED = "records_produced"            # a batch of produced records
PHASE = "phase"                                  # the runner marks scenario phases
COORDINATOR_EVENT = "coordinator_event"          # server side: group state transitions
METRICS = "metrics"                              # periodic snapshot of Kafka metric names

EVENT_TYPES = frozenset(
    value for name, value in globals().items() if name.isupper() and isinstance(value, str)
)

REQUIRED_FIELDS = ("run_id", "backend", "ts_ns", "ts_ms", "process", "member", "type")


class EventRecorder:
    """Appends events to one JSONL file. Safe from several threads; cheap to call."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        run_id: str = "",
        backend: str = "",
        process: str | None = None,
        clock: Callable[[], tuple[int, int]] | None = None,
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.run_id = run_id
        self.backend = backend
        self.process = process or f"{os.uname().nodename}:{os.getpid()}"
        self.clock = clock or system_clock
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()

    def emit(self, type: str, member: str = "", **fields: object) -> dict:
        if type not in EVENT_TYPES:
            raise ValueError(f"unknown event type {type!r}")
        ts_ns, ts_ms = self.clock()
        event = {
            "run_id": self.run_id,
            "backend": self.backend,
            "ts_ns": ts_ns,
            "ts_ms": ts_ms,
            "process": self.process,
            "member": member,
            "type": type,
            **fields,
        }
        line = (json.dumps(event, separators=(",", ":"), default=_jsonable) + "\n").encode()
        with self._lock:
            if self._fd is not None:
                os.write(self._fd, line)
        return event

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> EventRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class NullRecorder(EventRecorder):
    """Drops every event; for members used outside an experiment."""

    def __init__(self) -> None:  # noqa: D107 - nothing to open
        self.run_id = self.backend = ""
        self.process = f"{os.uname().nodename}:{os.getpid()}"
        self._fd = None
        self._lock = threading.Lock()

    def emit(self, type: str, member: str = "", **fields: object) -> dict:
        if type not in EVENT_TYPES:
            raise ValueError(f"unknown event type {type!r}")
        return {}


def system_clock() -> tuple[int, int]:
    """The stamps of an event: (CLOCK_MONOTONIC ns, wall-clock ms)."""
    return time.monotonic_ns(), time.time_ns() // 1_000_000


def _jsonable(value: object) -> object:
    if isinstance(value, (set, frozenset, tuple)):
        return sorted(map(str, value)) if isinstance(value, (set, frozenset)) else list(value)
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def read_events(*paths: str | os.PathLike) -> Iterator[dict]:
    """Yield events from files or directories of *.jsonl, skipping a torn (unparsable) last line."""
    for path in _expand(paths):
        with open(path, "rb") as handle:
            lines = handle.read().split(b"\n")
        for index, raw in enumerate(lines):
            if not raw.strip():
                continue
            try:
                yield json.loads(raw)
            except json.JSONDecodeError:
                if index >= len(lines) - 2:  # the last line (a crash mid-write): skip it
                    continue
                raise ValueError(f"{path}:{index + 1}: malformed event line") from None


def _expand(paths: Iterable[str | os.PathLike]) -> Iterator[Path]:
    for path in map(Path, paths):
        if path.is_dir():
            yield from sorted(path.rglob("*.jsonl"))
        else:
            yield path
