"""One event schema for every backend, written as JSON lines, one file per process.

Every event carries: run_id, backend, ts_ns (CLOCK_MONOTONIC, comparable across the
processes of one machine), ts_ms (wall clock), process, member, type; then fields of
its type. Names follow Kafka's VerifiableConsumer where one exists.

The vocabulary (`VOCABULARY`) declares every event type once, with the fields readers rely on
and their types; the Spark schema of the summary is built from it. Writers may add fields
of their own (diagnostics such as a request's `broker`): readers ignore them.

Each event is written with one os.write on an O_APPEND descriptor: lines from several
threads never interleave, and a crash loses at most the line being written. Readers
skip a torn last line.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType


class FieldType(StrEnum):
    """The JSON shapes a field can take."""

    TEXT = "text"
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    TEXTS = "texts"              # a list of strings (partitions are written "topic-N")
    INTS = "ints"                # a list of integers
    OFFSETS = "offsets"          # {"topic-N": offset}
    OBJECT = "object"            # any JSON value; readers take its JSON text


@dataclass(frozen=True)
class EventType:
    name: str
    meaning: str
    fields: Mapping[str, FieldType]


COMMON_FIELDS: Mapping[str, FieldType] = MappingProxyType({
    "run_id": FieldType.TEXT, "backend": FieldType.TEXT, "ts_ns": FieldType.INT, "ts_ms": FieldType.INT,
    "process": FieldType.TEXT, "member": FieldType.TEXT, "type": FieldType.TEXT,
})
REQUIRED_FIELDS = tuple(COMMON_FIELDS)

TEXT, INT, FLOAT, BOOL = FieldType.TEXT, FieldType.INT, FieldType.FLOAT, FieldType.BOOL
TEXTS, INTS, OFFSETS, OBJECT = FieldType.TEXTS, FieldType.INTS, FieldType.OFFSETS, FieldType.OBJECT

_FAULT_FIELDS = dict(fault_id=TEXT, kind=TEXT, action=TEXT, target=TEXT, targets=TEXTS, member_ids=TEXTS, link=TEXT,
                     params=OBJECT, emulated=BOOL, at_s=FLOAT, line=INT)
_declared: dict[str, EventType] = {}


def _event(type_name: str, meaning: str, /, **fields: FieldType) -> str:
    if type_name in _declared:
        raise ValueError(f"event type {type_name!r} declared twice")
    _declared[type_name] = EventType(type_name, meaning, MappingProxyType(fields))
    return type_name


# Event types. A recorder accepts only these, so a typo fails at the call site.
MEMBER_STARTED = _event("member_started", "a member began", group=TEXT, strategy=TEXT, topics=TEXTS,
                        group_instance_id=TEXT, pid=INT)
MEMBER_STOPPED = _event("member_stopped", "a member ended (close, signal, error: ...)", reason=TEXT)
REBALANCE_STARTED = _event("rebalance_started", "a member began a rebalance", trigger=TEXT, group=TEXT)
REBALANCE_COMPLETED = _event("rebalance_completed", "a member's rebalance ended with this assignment",
                             generation=INT, assigned=TEXTS, duration_ms=FLOAT, attempts=INT, protocol=TEXT,
                             leader=BOOL, member_id=TEXT)
REBALANCE_FAILED = _event("rebalance_failed", "a member gave its rebalance up", error=TEXT, attempts=INT)
REBALANCE_ATTEMPT = _event("rebalance_attempt", "legacy: one attempt and its outcome", attempt=INT, outcome=TEXT,
                           duration_ms=FLOAT, detail=TEXT)
PARTITIONS_REVOKED = _event("partitions_revoked", "a member gave partitions up", partitions=TEXTS)
PARTITIONS_ASSIGNED = _event("partitions_assigned", "a member took partitions", partitions=TEXTS, committed=OFFSETS)
PARTITIONS_LOST = _event("partitions_lost", "a member lost partitions without revoking them", partitions=TEXTS)
RECORDS_CONSUMED = _event("records_consumed", "a batch of consecutive offsets processed", topic=TEXT, partition=INT,
                          first_offset=INT, last_offset=INT, count=INT, produce_ts_ms=INTS, generation=INT)
RECORDS_PROCESSED = _event("records_processed", "consecutive offsets the application finished handling (with a "
                           "service time), each record's end time in processed_ts_ms", topic=TEXT, partition=INT,
                           first_offset=INT, last_offset=INT, count=INT, produce_ts_ms=INTS, processed_ts_ms=INTS)
OFFSETS_COMMITTED = _event("offsets_committed", "offsets stored (next offset to consume)", offsets=OFFSETS,
                           generation=INT)
COMMIT_FAILED = _event("commit_failed", "a commit refused or failed", offsets=OFFSETS, error=TEXT, generation=INT)
COORDINATION_REQUEST = _event("coordination_request", "a ZooKeeper op or a group API request (count: how many it "
                              "stands for, when more than one)", op=TEXT, path=TEXT, group=TEXT, latency_ms=FLOAT,
                              error=TEXT, detail=TEXT, broker=TEXT, count=INT)
WATCH_NOTIFICATION = _event("watch_notification", "a ZooKeeper watch fired", path=TEXT, event=TEXT)
SESSION_STATE = _event("session_state", "CONNECTED / SUSPENDED / LOST / EXPIRED", state=TEXT)
FAULT_STARTED = _event("fault_started", "the runner applied a fault", **_FAULT_FIELDS)
FAULT_STOPPED = _event("fault_stopped", "a fault ended or was healed", **_FAULT_FIELDS, observed_ts_ns=INT,
                       healed_ts_ns=INT, healed_by=TEXT)
RECORD_PRODUCED = _event("record_produced", "older logs: one produced record", topic=TEXT, partition=INT, offset=INT,
                         seq=INT, produce_ts_ms=INT)
RECORDS_PRODUCED = _event("records_produced", "a batch of produced records, consecutive offsets", topic=TEXT,
                          partition=INT, first_offset=INT, last_offset=INT, count=INT, seqs=INTS, produce_ts_ms=INTS)
PHASE = _event("phase", "the runner marks a scenario phase", name=TEXT, detail=OBJECT, status=TEXT)


class RunnerPhase(StrEnum):
    """The phases the runner marks itself, around the scenario's own (which carry the names its file gives)."""

    SETUP = "setup"          # servers and processes starting
    WARMUP = "warmup"        # the initial members joining, until the group is stable
    HEAL = "heal"            # every fault still active healed at the timeline's end
    SETTLE = "settle"        # the scenario's settle time, nothing injected
    TEARDOWN = "teardown"    # members and servers stopping


# Not part of the timeline a scenario declares: the members' first joins and the last leaves.
OUTSIDE_TIMELINE = (RunnerPhase.SETUP, RunnerPhase.WARMUP, RunnerPhase.TEARDOWN)
# The phase mark of a warm-up that gave up waiting for a stable group (its detail: the ownership it left).
WARMUP_TIMEOUT = "warmup-timeout"
COORDINATOR_EVENT = _event("coordinator_event", "server side: group state transitions; a classic group's move to "
                           "PreparingRebalance names why (rebalance_reason, one of RebalanceReason in "
                           "modern/coordinator/classic_group.py, and the members it names)", group=TEXT, node=INT,
                           event=TEXT, partition=INT, state=TEXT, from_state=TEXT, to_state=TEXT, generation=INT,
                           members=INT, offsets=INT, reason=TEXT, rebalance_reason=TEXT, member_ids=TEXTS)
SERVER_COUNTERS = _event("server_counters", "the runner read the servers' own counters (summed over the nodes that "
                         "answered)", server=TEXT, moment=TEXT, served=INT, sampler_packets=INT, nodes=INT,
                         counters=OBJECT)
BROKER_LIVENESS = _event("broker_liveness", "a broker's own sampler: a periodic sample, or a window in which it "
                         "answered nothing while requests were held up (stalled, then resumed)", state=TEXT, node=INT,
                         received=INT, answered=INT, outstanding=INT, loop_lag_ms=FLOAT, sampler_gap_ms=FLOAT,
                         gc_ms=FLOAT, start_ns=INT, stalled_ms=FLOAT, unread_bytes=INT, unaccepted=INT, stack=TEXT, stack_seen=INT,
                         stack_samples=INT, rss_bytes=INT, loop_cpu_ms=FLOAT, loop_waited_ms=FLOAT)
PROCESS_MEMORY = _event("process_memory", "a member host's resident memory, sampled every 10 s "
                        "(rebalance.process_memory)", rss_bytes=INT)
METRICS = _event("metrics", "a periodic snapshot under Kafka's consumer metric names (fields vary)")
# What a run's conditions check (experiments.run.conditions) reads besides the rest: whether the producer kept
# its schedule, the machine's own pressure, and when the members of a join wave were asked to start.
PRODUCER_PACE = _event("producer_pace", "the producer against its schedule, once a second: records the schedule "
                       "called for (due) and sent so far, how far behind it is now, its longest pause between sends "
                       "in the second", rate=FLOAT, due=INT, sent=INT, behind_ms=FLOAT, longest_gap_ms=FLOAT)
HOST_SAMPLE = _event("host_sample", "the machine over the last interval (the runner, once a second): the share of "
                     "time a runnable task waited for a CPU (/proc/pressure/cpu, some), CPU stolen by the hypervisor, "
                     "CPU busy, the 1-minute load average and the cores; the member hosts' threads, and how many of "
                     "them were running and waiting for a CPU on average (experiments.run.member_cpu)",
                     interval_ms=FLOAT, cpu_pressure_pct=FLOAT, steal_pct=FLOAT, busy_pct=FLOAT, load1=FLOAT, cores=INT,
                     member_threads=INT, member_running=FLOAT, member_waiting=FLOAT)
JOIN_WAVE = _event("join_wave", "members the runner asked to join at one timeline step, and when each was due "
                   "(the step's time plus the scenario's declared spread)", fault_id=TEXT, members=TEXTS,
                   due_ns=INTS, armed=BOOL)

VOCABULARY: Mapping[str, EventType] = MappingProxyType(_declared)
EVENT_TYPES = frozenset(VOCABULARY)


def field_types(types: Iterable[str], fields: Iterable[str]) -> dict[str, FieldType]:
    """The type of each named field as the given event types declare it (common fields included).
    A field two of the types declare differently, or none of them declares, is an error."""
    found: dict[str, FieldType] = {}
    for name in fields:
        declared = {COMMON_FIELDS[name]} if name in COMMON_FIELDS else {
            VOCABULARY[kind].fields[name] for kind in types if name in VOCABULARY[kind].fields}
        if len(declared) != 1:
            problem = "is declared by none" if not declared else f"has several types ({sorted(declared)})"
            raise ValueError(f"field {name!r} {problem} of the event types {sorted(types)}")
        found[name] = declared.pop()
    return found


class EventRecorder:
    """Appends events to one JSONL file. Safe from several threads; cheap to call. `buffered`: lines are written
    a few thousand at a time and at close (a simulation's recorder: nothing reads its file while it runs, and a
    process that dies takes its last lines with it). `path` None: each event is built, stamped and returned, and
    nothing is written (a simulation whose measures are tallied as it plays)."""

    BUFFER_LINES = 4096

    def __init__(
        self,
        path: str | os.PathLike | None,
        *,
        run_id: str = "",
        backend: str = "",
        process: str | None = None,
        clock: Callable[[], tuple[int, int]] | None = None,
        buffered: bool = False,
    ) -> None:
        self.path = None if path is None else Path(path)
        self.run_id = run_id
        self.backend = backend
        self.process = process or f"{os.uname().nodename}:{os.getpid()}"
        self.clock = clock or system_clock
        self._fd: int | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()
        self._buffer: list[bytes] | None = [] if buffered else None

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
        if self.path is None:
            return event
        line = (json.dumps(event, separators=(",", ":"), default=_jsonable) + "\n").encode()
        with self._lock:
            if self._fd is None:
                pass
            elif self._buffer is None:
                os.write(self._fd, line)
            else:
                self._buffer.append(line)
                if len(self._buffer) >= self.BUFFER_LINES:
                    self._flush()
        return event

    def _flush(self) -> None:
        if self._buffer and self._fd is not None:
            os.write(self._fd, b"".join(self._buffer))
            self._buffer.clear()

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                self._flush()
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
        self._buffer = None
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
