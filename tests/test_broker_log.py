"""Partition logs: offsets, CRC checks, reads, segment files, torn tails, compaction, idempotent retries."""

from __future__ import annotations

import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from broker.log import SEGMENT_NAME, InvalidBatch, PartitionLog


def batch(values, *, producer_id=-1, sequence=-1) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                                        base_sequence=sequence, batch_size=2**20)
    for delta, value in enumerate(values):
        builder.append(delta, timestamp=1_000 + delta, key=None, value=value, headers=[])
    return bytes(builder.build())


def values(log: PartitionLog, start: int = 0) -> list[tuple[int, bytes]]:
    return [(record.offset, record.value) for record in log.read_records(start)]


def test_offsets_are_assigned_by_the_log_and_crc_stays_valid():
    log = PartitionLog("t", 0)
    assert log.append(batch([b"a", b"b", b"c"])).base_offset == 0
    result = log.append(batch([b"d"]))
    assert (result.base_offset, result.last_offset, log.next_offset) == (3, 3, 4)
    second = DefaultRecordBatch(log.read(3, 1 << 20))
    assert second.base_offset == 3 and second.validate_crc()
    assert values(log) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]


def test_corrupt_batch_is_rejected_and_log_unchanged():
    log = PartitionLog("t", 0)
    damaged = bytearray(batch([b"payload"]))
    damaged[-1] ^= 0xFF
    with pytest.raises(InvalidBatch, match="CRC"):
        log.append(bytes(damaged))
    with pytest.raises(InvalidBatch, match="magic"):
        log.append(bytes(batch([b"x"])[:16]) + b"\x01" + batch([b"x"])[17:])
    with pytest.raises(InvalidBatch):
        log.append(b"")
    assert log.next_offset == 0


def test_read_starts_at_the_batch_holding_the_offset_and_respects_max_bytes():
    log = PartitionLog("t", 0)
    for i in range(5):
        log.append(batch([b"%d-%d" % (i, j) for j in range(10)]))
    one_batch = len(log.read(0, 1))  # the first batch comes whole even over max_bytes
    assert one_batch > 1
    assert DefaultRecordBatch(log.read(25, one_batch)).base_offset == 20
    assert len(log.read(0, one_batch * 2)) == one_batch * 2
    assert values(log, 47)[0] == (47, b"4-7")


def test_segment_file_survives_reopen_and_torn_tail_is_cut(tmp_path):
    log = PartitionLog("t", 3, directory=tmp_path)
    log.append(batch([b"a", b"b"]))
    log.append(batch([b"c"]))
    log.close()
    segment = tmp_path / SEGMENT_NAME
    intact = segment.stat().st_size
    with open(segment, "ab") as handle:  # a leader killed half way through writing a batch
        handle.write(batch([b"torn"])[:30])
    reopened = PartitionLog("t", 3, directory=tmp_path)
    assert values(reopened) == [(0, b"a"), (1, b"b"), (2, b"c")]
    assert segment.stat().st_size == intact
    assert reopened.append(batch([b"d"])).base_offset == 3
    reopened.close()
    assert values(PartitionLog("t", 3, directory=tmp_path))[-1] == (3, b"d")


def test_compaction_keeps_last_value_per_key_with_offsets(tmp_path):
    log = PartitionLog("__consumer_offsets", 0, directory=tmp_path)
    log.append_records([(b"k1", b"v1"), (b"k2", b"v1")])
    log.append_records([(b"k1", b"v2"), (b"k3", b"v1")])
    log.append_records([(b"k2", None)])  # tombstone
    assert log.compact() == 2
    kept = [(r.offset, r.key, r.value) for r in log.read_records(0)]
    assert kept == [(2, b"k1", b"v2"), (3, b"k3", b"v1"), (4, b"k2", None)]
    assert log.start_offset == 0 and DefaultRecordBatch(log.read(0, 1)).base_offset == 2
    log.close()
    reopened = PartitionLog("__consumer_offsets", 0, directory=tmp_path)
    assert reopened.next_offset == 5
    assert [(r.offset, r.key) for r in reopened.read_records(0)] == [(2, b"k1"), (3, b"k3"), (4, b"k2")]


def test_idempotent_retry_is_not_appended_twice():
    log = PartitionLog("t", 0)
    first = log.append(batch([b"a", b"b"], producer_id=7, sequence=0))
    retry = log.append(batch([b"a", b"b"], producer_id=7, sequence=0))
    assert retry.duplicate and retry.base_offset == first.base_offset == 0
    assert log.append(batch([b"c"], producer_id=7, sequence=2)).base_offset == 2
    assert log.next_offset == 3


def test_batch_header_layout_matches_kafka():
    # base offset int64, length int32, leader epoch int32, magic int8 at byte 16
    raw = batch([b"x"])
    assert raw[16] == 2
    assert struct.unpack_from(">i", raw, 8)[0] == len(raw) - 12
