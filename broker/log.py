"""A partition as an append-only log of RecordBatch v2 batches.

The broker stores batches exactly as producers sent them, after checking them
(magic 2, sizes, CRC-32C) and writing the base offset it assigns into the first 8
bytes; the CRC covers only the bytes from `attributes` on, so stamping the offset
keeps the producer's CRC valid. With a directory the log is also one segment file
in Kafka's own on-disk layout (`<dir>/00000000000000000000.log`: batches back to
back), re-read on open, so a restarted broker, or the next leader on a shared data
directory, serves what was written. A torn batch at the end (a writer killed
mid-append) is cut off on open.
"""

from __future__ import annotations

import bisect
import os
import struct
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

SEGMENT_NAME = "00000000000000000000.log"

_BATCH_HEADER = DefaultRecordBatch.HEADER_STRUCT
_LENGTH_PREFIX = struct.calcsize(">qi")  # base offset + batch length: the bytes before the counted part
_BASE_OFFSET = struct.Struct(">q")
_PRODUCER_FIELDS = struct.Struct(">qhi")  # producer id, producer epoch, base sequence
_PRODUCER_OFFSET = struct.calcsize(">qiibIhiqq")


class InvalidBatch(ValueError):
    """A produced batch that cannot go into the log (bad magic, size or CRC)."""


@dataclass(frozen=True)
class LogRecord:
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int


@dataclass(frozen=True)
class AppendResult:
    base_offset: int
    last_offset: int
    duplicate: bool = False  # an idempotent producer's retry of a batch already in the log


def split_batches(data: bytes, *, strict: bool = True) -> list[bytes]:
    """Cut a records blob into batches. strict: raise on a malformed one; else stop before it."""
    batches = []
    position = 0
    view = memoryview(data)
    while position < len(data):
        if len(data) - position < _BATCH_HEADER.size:
            if strict:
                raise InvalidBatch("trailing bytes shorter than a batch header")
            break
        header = _BATCH_HEADER.unpack_from(data, position)
        length, magic = header[1], header[3]
        end = position + _LENGTH_PREFIX + length
        problem = None
        if magic != 2:
            problem = f"magic {magic}: only RecordBatch v2 is supported"
        elif length < _BATCH_HEADER.size - _LENGTH_PREFIX or end > len(data):
            problem = f"batch length {length} does not fit the data"
        elif not DefaultRecordBatch(view[position:end]).validate_crc():
            problem = "CRC-32C mismatch"
        if problem:
            if strict:
                raise InvalidBatch(problem)
            break
        batches.append(bytes(view[position:end]))
        position = end
    return batches


class PartitionLog:
    """One partition's batches in memory, optionally mirrored to a segment file."""

    def __init__(self, topic: str, partition: int, directory: Path | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.directory = directory
        self._batches: list[bytes] = []
        self._base_offsets: list[int] = []   # parallel to _batches, for bisect
        self._next_offset = 0
        self._last_sequence: dict[int, tuple[int, int, AppendResult]] = {}  # producer id -> (epoch, base seq, result)
        self._file = None
        if directory is not None:
            self._load(directory)

    # -- reading --------------------------------------------------------------------
    @property
    def next_offset(self) -> int:
        """The high watermark: one past the last offset (every write is committed: one replica)."""
        return self._next_offset

    @property
    def start_offset(self) -> int:
        """Always 0: there is no retention, and compaction (as in Kafka) leaves the log start alone."""
        return 0

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one holding `offset`, up to max_bytes; the first batch always
        comes whole even when larger (as Kafka does, so a big batch cannot block a consumer)."""
        index = max(bisect.bisect_right(self._base_offsets, offset) - 1, 0)
        chunks: list[bytes] = []
        size = 0
        for batch in self._batches[index:]:
            if chunks and size + len(batch) > max_bytes:
                break
            chunks.append(batch)
            size += len(batch)
        return b"".join(chunks)

    def read_records(self, start_offset: int = 0) -> Iterator[LogRecord]:
        """Every record from start_offset on (e.g. a new coordinator replaying its partition)."""
        index = max(bisect.bisect_right(self._base_offsets, start_offset) - 1, 0)
        for batch in self._batches[index:]:
            for record in DefaultRecordBatch(batch):
                if record.offset >= start_offset:
                    yield LogRecord(record.offset, record.key, record.value, record.timestamp)

    # -- writing --------------------------------------------------------------------
    def append(self, records: bytes) -> AppendResult:
        """Append a produced records blob (one or more batches) all or nothing."""
        batches = split_batches(records, strict=True)
        if not batches:
            raise InvalidBatch("no record batch in the request")
        duplicate = self._duplicate_of(batches)
        if duplicate is not None:
            return duplicate
        base = self._next_offset
        for batch in batches:
            self._append_batch(bytearray(batch))
        result = AppendResult(base, self._next_offset - 1)
        self._remember_sequence(batches[-1], result)
        return result

    def append_records(self, records: Iterable[tuple[bytes | None, bytes | None]],
                       timestamp_ms: int | None = None) -> AppendResult:
        """Build one batch from (key, value) pairs and append it; for the broker's own writers."""
        stamp = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                            producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                            batch_size=2**31 - 1)
        for delta, (key, value) in enumerate(records):
            builder.append(delta, timestamp=stamp, key=key, value=value, headers=[])
        return self.append(bytes(builder.build()))

    def compact(self) -> int:
        """Keep only the last record of each key; offsets stay. Tombstones (null values) stay too,
        so the last offset survives a reload. Returns how many records were dropped."""
        latest: dict[bytes | None, LogRecord] = {}
        total = 0
        for record in self.read_records(0):
            latest[record.key] = record
            total += 1
        kept = sorted(latest.values(), key=lambda r: r.offset)
        batches = [_single_record_batch(record) for record in kept]
        self._batches, self._base_offsets = [], []
        for batch in batches:
            self._batches.append(batch)
            self._base_offsets.append(_BASE_OFFSET.unpack_from(batch)[0])
        if self.directory is not None:
            self._rewrite_segment()
        return total - len(kept)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    # -- internals ------------------------------------------------------------------
    def _append_batch(self, batch: bytearray) -> None:
        _BASE_OFFSET.pack_into(batch, 0, self._next_offset)
        last_delta = _BATCH_HEADER.unpack_from(batch)[6]
        frozen = bytes(batch)
        if self._file is not None:
            self._file.write(frozen)
            self._file.flush()  # into the page cache: survives a SIGKILL of this process
        self._batches.append(frozen)
        self._base_offsets.append(self._next_offset)
        self._next_offset += last_delta + 1

    def _duplicate_of(self, batches: list[bytes]) -> AppendResult | None:
        producer_id, epoch, sequence = _PRODUCER_FIELDS.unpack_from(batches[-1], _PRODUCER_OFFSET)
        if producer_id < 0 or sequence < 0:
            return None
        seen = self._last_sequence.get(producer_id)
        if seen is not None and seen[:2] == (epoch, sequence):
            return AppendResult(seen[2].base_offset, seen[2].last_offset, duplicate=True)
        return None

    def _remember_sequence(self, batch: bytes, result: AppendResult) -> None:
        producer_id, epoch, sequence = _PRODUCER_FIELDS.unpack_from(batch, _PRODUCER_OFFSET)
        if producer_id >= 0 and sequence >= 0:
            self._last_sequence[producer_id] = (epoch, sequence, result)

    def _load(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / SEGMENT_NAME
        data = path.read_bytes() if path.exists() else b""
        good = split_batches(data, strict=False)
        valid_size = sum(map(len, good))
        if valid_size < len(data):
            os.truncate(path, valid_size)  # a torn write from a killed leader
        for batch in good:
            base = _BASE_OFFSET.unpack_from(batch)[0]
            self._batches.append(batch)
            self._base_offsets.append(base)
            self._next_offset = base + _BATCH_HEADER.unpack_from(batch)[6] + 1
        self._file = open(path, "ab")  # noqa: SIM115 - held open for the life of the log

    def _rewrite_segment(self) -> None:
        assert self.directory is not None
        self.close()
        temporary = self.directory / (SEGMENT_NAME + ".compacting")
        temporary.write_bytes(b"".join(self._batches))
        os.replace(temporary, self.directory / SEGMENT_NAME)
        self._file = open(self.directory / SEGMENT_NAME, "ab")  # noqa: SIM115


def _single_record_batch(record: LogRecord) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=2**31 - 1)
    builder.append(0, timestamp=record.timestamp_ms, key=record.key, value=record.value, headers=[])
    batch = builder.build()
    _BASE_OFFSET.pack_into(batch, 0, record.offset)
    return bytes(batch)
