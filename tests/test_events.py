"""The event recorder: thread safety, whole lines only, torn last line skipped, schema fields."""

import json
import multiprocessing
import os
import signal
import threading

import pytest

from experiments.folders.run_folder import RunFolder
from rebalance.events import (
    EVENT_TYPES,
    PARTITIONS_ASSIGNED,
    RECORD_PRODUCED,
    RECORDS_CONSUMED,
    REQUIRED_FIELDS,
    VOCABULARY,
    EventRecorder,
    FieldType,
    NullRecorder,
    field_types,
    read_events,
)
from rebalance.types import TopicPartition


def test_every_event_carries_the_common_fields(tmp_path):
    with EventRecorder(tmp_path / "p.jsonl", run_id="r1", backend="classic", process="h:1") as recorder:
        recorder.emit(PARTITIONS_ASSIGNED, member="m1", partitions={TopicPartition("t0", 1), TopicPartition("t0", 0)})
    (event,) = read_events(tmp_path / "p.jsonl")
    assert set(REQUIRED_FIELDS) <= set(event)
    assert (event["run_id"], event["backend"], event["process"], event["member"]) == ("r1", "classic", "h:1", "m1")
    assert event["partitions"] == ["t0-0", "t0-1"]  # sets are written sorted, partitions as "topic-N"


def test_unknown_event_type_fails_at_the_call_site(tmp_path):
    with EventRecorder(tmp_path / "p.jsonl") as recorder, pytest.raises(ValueError, match="unknown event type"):
        recorder.emit("partitions_asigned")
    with pytest.raises(ValueError):
        NullRecorder().emit("nope")
    assert NullRecorder().emit(PARTITIONS_ASSIGNED, partitions=[]) == {}


def test_many_threads_never_interleave_lines(tmp_path):
    path = tmp_path / "threads.jsonl"
    recorder = EventRecorder(path)
    threads, per_thread = 8, 300
    padding = "x" * 6000  # longer than PIPE_BUF, so only the recorder's own guarantees keep lines whole
    errors = []
    start = threading.Barrier(threads)

    def work(index):
        try:
            start.wait()
            for seq in range(per_thread):
                recorder.emit(RECORDS_CONSUMED, member=f"m{index}", seq=seq, padding=padding)
        except Exception as error:  # surfaced below, never lost in the thread
            errors.append(error)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    recorder.close()
    assert errors == []
    events = list(read_events(path))
    assert len(events) == threads * per_thread
    for index in range(threads):
        seqs = [e["seq"] for e in events if e["member"] == f"m{index}"]
        assert seqs == list(range(per_thread))  # each thread's events in its own order, none lost


def _append_from_process(path, tag, count):
    recorder = EventRecorder(path, process=tag)
    for seq in range(count):
        recorder.emit(RECORDS_CONSUMED, member=tag, seq=seq, padding="y" * 5000)
    recorder.close()


def test_lines_stay_whole_when_processes_append_to_one_file(tmp_path):
    path = tmp_path / "shared.jsonl"
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=_append_from_process, args=(str(path), f"p{i}", 200)) for i in range(3)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=120)
        assert proc.exitcode == 0
    events = list(read_events(path))
    assert len(events) == 600
    assert all(len(e["padding"]) == 5000 for e in events)


def test_a_torn_last_line_is_skipped_at_every_cut(tmp_path):
    path = tmp_path / "torn.jsonl"
    with EventRecorder(path) as recorder:
        for seq in range(3):
            recorder.emit(RECORDS_CONSUMED, seq=seq)
    data = path.read_bytes()
    last_start = data.rstrip(b"\n").rfind(b"\n") + 1
    for cut in range(last_start + 1, len(data) - 1):
        path.write_bytes(data[:cut])
        assert [e["seq"] for e in read_events(path)] == [0, 1], cut


def test_a_malformed_line_in_the_middle_is_an_error(tmp_path):
    path = tmp_path / "bad.jsonl"
    lines = [json.dumps({"type": t, "seq": i}) for i, t in enumerate(sorted(EVENT_TYPES)[:3])]
    lines[1] = lines[1][:10]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=":2: malformed"):
        list(read_events(path))


def _write_until_killed(path, ready):
    recorder = EventRecorder(path)
    recorder.emit(RECORDS_CONSUMED, seq=-1)
    ready.set()
    seq = 0
    while True:
        recorder.emit(RECORDS_CONSUMED, seq=seq, padding="z" * 3000)
        seq += 1


def test_sigkill_loses_at_most_the_last_line(tmp_path):
    path = tmp_path / "killed.jsonl"
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    proc = context.Process(target=_write_until_killed, args=(str(path), ready))
    proc.start()
    try:
        assert ready.wait(60)
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(timeout=30)
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=30)
    seqs = [e["seq"] for e in read_events(path)]
    assert seqs[0] == -1
    assert seqs[1:] == list(range(len(seqs) - 1))  # a gapless prefix: nothing but possibly the tail lost


def test_read_events_walks_directories(tmp_path):
    for name in ("a", "b"):
        with EventRecorder(RunFolder(tmp_path).events / f"{name}.jsonl", process=name) as recorder:
            recorder.emit(PARTITIONS_ASSIGNED, partitions=[])
    assert sorted(e["process"] for e in read_events(RunFolder(tmp_path).events)) == ["a", "b"]


def test_the_vocabulary_declares_every_type_once_with_typed_fields():
    assert EVENT_TYPES == frozenset(VOCABULARY) and RECORDS_CONSUMED in VOCABULARY
    assert all(isinstance(kind, FieldType) for event in VOCABULARY.values() for kind in event.fields.values())
    assert field_types({RECORDS_CONSUMED}, ("ts_ns", "produce_ts_ms")) == {"ts_ns": FieldType.INT,
                                                                           "produce_ts_ms": FieldType.INTS}
    with pytest.raises(ValueError, match="several types"):   # one name, two shapes: a reader must choose
        field_types({RECORDS_CONSUMED, RECORD_PRODUCED}, ("produce_ts_ms",))
    with pytest.raises(ValueError, match="declared by none"):
        field_types({PARTITIONS_ASSIGNED}, ("first_offset",))
