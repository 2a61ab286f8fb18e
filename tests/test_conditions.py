"""The run conditions check, pinned by planted logs: for every threshold one log that must read ok, one
suspect and one invalid; and the pieces it stands on (the steady-state model, the quiet windows, the
machine's counters, the producer's pace).

A planted log is a run folder written by hand: lock.json and a few event files, a steady group of 10 members
on 10 partitions at 100 records/s, handled in 10 ms each (utilisation 0.1), for 60 s of timeline.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.folders.run_folder import RunFolder
from experiments.run.conditions import THRESHOLDS, Grade, judge, steady_share
from experiments.run.host_load import Counters, read_counters, sample
from experiments.run.run_evidence import gather
from rebalance import events as ev

T0_MS = 1_780_000_000_000
T0_NS = 9_000_000_000_000
RATE, MEMBERS, SERVICE_MS, SECONDS = 100, 10, 10.0, 60


class Log:
    """A run folder being planted: `event(...)` appends to one process's file."""

    def __init__(self, root: Path, *, utilisation: float = RATE * SERVICE_MS / 1000 / MEMBERS,
                 service_ms: float = SERVICE_MS) -> None:
        self.root = root
        RunFolder(root).events.mkdir(parents=True)
        self.lock = {"name": "planted", "backend": "classic", "strategy": "range", "topics": {"t0": MEMBERS},
                     "members": MEMBERS, "status": "completed", "applied": [],
                     "schedule": {"initial_members": [f"m{i:03d}" for i in range(MEMBERS)], "steps": []},
                     "member_ids": {}, "workload": {"service": "fixed", "service_ms": service_ms,
                                                    "service_p99_ms": None, "hang_fraction": 0.0,
                                                    "hang_ms": [3000.0, 20000.0], "commit": "auto",
                                                    "max_poll_records": 500, "offered_per_s": RATE,
                                                    "mean_service_ms": service_ms, "members": MEMBERS,
                                                    "busy_members": MEMBERS, "utilisation": utilisation}}

    def event(self, process: str, kind: str, at_s: float, **fields) -> None:
        line = {"run_id": "r", "backend": "classic", "ts_ns": T0_NS + int(at_s * 1e9), "ts_ms": T0_MS + int(at_s * 1000),
                "process": process, "member": fields.pop("member", ""), "type": kind, **fields}
        with open(RunFolder(self.root).events / f"{process}.jsonl", "a") as handle:
            handle.write(json.dumps(line, separators=(",", ":")) + "\n")

    def steady(self, *, late_s: float = 0.0, late_from: float = 0.0, late_share: float = 0.0,
               behind_ms: float = 0.0, pressure: float = 5.0, steal: float = 0.0) -> Log:
        """A quiet run: phases, the producer's pace and records, each record handled 50 ms after it was made, a
        share (`late_share`) of those produced after `late_from` handled `late_s` late instead."""
        self.event("runner", ev.PHASE, 0.0, name="setup")
        self.event("runner", ev.PHASE, 5.0, name="timeline")
        self.event("runner", ev.PHASE, 5.0 + SECONDS, name="heal")
        for second in range(SECONDS + 10):
            self.event("runner", ev.HOST_SAMPLE, second, interval_ms=1000.0, cpu_pressure_pct=pressure,
                       steal_pct=steal, busy_pct=40.0, load1=1.5, cores=2)
        for second in range(1, SECONDS + 1):
            self.event("producer", ev.PRODUCER_PACE, 5.0 + second, rate=RATE, due=RATE * second + 1,
                       sent=RATE * second + 1 - int(behind_ms * RATE / 1000), behind_ms=behind_ms,
                       longest_gap_ms=10.0)
        every = round(1 / late_share) if late_share else 0
        for partition in range(MEMBERS):
            stamps = [T0_MS + 5000 + int(1000 * (i * MEMBERS + partition) / RATE) for i in range(SECONDS * RATE // MEMBERS)]
            self.event("producer", ev.RECORDS_PRODUCED, 5.0 + SECONDS, topic="t0", partition=partition, first_offset=0,
                       last_offset=len(stamps) - 1, count=len(stamps), seqs=list(range(len(stamps))),
                       produce_ts_ms=stamps)
            done = [stamp + 50 + (int(late_s * 1000) if every and stamp >= T0_MS + late_from * 1000 and i % every == 0
                                  else 0) for i, stamp in enumerate(stamps)]
            self.event(f"h{partition:03d}", ev.RECORDS_PROCESSED, 5.0 + SECONDS, member=f"m{partition:03d}", topic="t0",
                       partition=partition, first_offset=0, last_offset=len(stamps) - 1, count=len(stamps),
                       produce_ts_ms=stamps, processed_ts_ms=done)
        return self

    def wave(self, *, late_s: float, at_s: float = 30.0, size: int = 4) -> Log:
        members = [f"m{MEMBERS + i:03d}" for i in range(size)]
        due = T0_NS + int(at_s * 1e9)
        self.event("runner", ev.JOIN_WAVE, at_s, fault_id="f001", members=members, due_ns=[due] * size, armed=True)
        for index, member in enumerate(members):
            self.event(f"w{index}", ev.MEMBER_STARTED, at_s + late_s * (index + 1) / size, member=member)
        return self

    def done(self) -> Path:
        RunFolder(self.root).lock.write_text(json.dumps(self.lock))
        return self.root


def grade(root: Path) -> tuple[Grade, dict[str, Grade], str]:
    conditions = judge(gather(root))
    return conditions.grade, {f.condition: f.grade for f in conditions.findings}, conditions.line()


def test_a_quiet_steady_run_reads_ok(tmp_path):
    overall, by_condition, line = grade(Log(tmp_path).steady().done())
    assert overall is Grade.OK, line
    assert set(by_condition) >= {"producer-behind", "quiet-over-limit", "cpu-pressure", "steal"}
    assert line.startswith("conditions: ok - ")


@pytest.mark.parametrize("behind_ms, expected", [(100, Grade.OK), (1200, Grade.SUSPECT), (4000, Grade.INVALID)])
def test_a_producer_behind_its_schedule(tmp_path, behind_ms, expected):
    overall, by_condition, line = grade(Log(tmp_path).steady(behind_ms=behind_ms).done())
    assert by_condition["producer-behind"] is expected and overall is expected, line
    if expected is not Grade.OK:
        assert f"{behind_ms / 1000:.2f} s behind" in line


@pytest.mark.parametrize("share, expected", [(0.002, Grade.OK), (0.01, Grade.SUSPECT), (0.05, Grade.INVALID)])
def test_members_that_did_not_keep_up_where_nothing_changed(tmp_path, share, expected):
    overall, by_condition, line = grade(Log(tmp_path).steady(late_s=4.0, late_share=share).done())
    assert by_condition["quiet-over-limit"] is expected and overall is expected, line


@pytest.mark.parametrize("pressure, expected", [(60.0, Grade.OK), (85.0, Grade.SUSPECT), (96.0, Grade.INVALID)])
def test_cpu_pressure(tmp_path, pressure, expected):
    overall, by_condition, line = grade(Log(tmp_path).steady(pressure=pressure).done())
    assert by_condition["cpu-pressure"] is expected and overall is expected, line


@pytest.mark.parametrize("steal, expected", [(1.0, Grade.OK), (8.0, Grade.SUSPECT), (25.0, Grade.INVALID)])
def test_stolen_cpu(tmp_path, steal, expected):
    overall, by_condition, line = grade(Log(tmp_path).steady(steal=steal).done())
    assert by_condition["steal"] is expected and overall is expected, line


@pytest.mark.parametrize("lag_ms, expected", [(100.0, Grade.OK), (800.0, Grade.SUSPECT), (2500.0, Grade.INVALID)])
def test_broker_loop_lag(tmp_path, lag_ms, expected):
    log = Log(tmp_path).steady()
    log.event("broker-0", ev.BROKER_LIVENESS, 20.0, state="sample", node=0, loop_lag_ms=lag_ms)
    overall, by_condition, line = grade(log.done())
    assert by_condition["broker-lag"] is expected and overall is expected, line


@pytest.mark.parametrize("late_s, expected", [(0.2, Grade.OK), (2.0, Grade.SUSPECT), (9.0, Grade.INVALID)])
def test_a_join_wave_started_late(tmp_path, late_s, expected):
    overall, by_condition, line = grade(Log(tmp_path).steady().wave(late_s=late_s).done())
    assert by_condition["join-late"] is expected and overall is expected, line
    if expected is not Grade.OK:
        assert f"the latest {late_s:.2f} s after it was due" in line


def test_a_wait_for_a_stable_group_that_timed_out_is_invalid(tmp_path):
    log = Log(tmp_path).steady()
    log.lock["applied"] = [{"fault_id": "f003", "op": "start", "at": 55, "waited_s": 180.0, "stable": False}]
    overall, by_condition, line = grade(log.done())
    assert overall is Grade.INVALID and by_condition["stable-wait"] is Grade.INVALID
    assert "f003 went ahead without a stable group" in line


def test_records_made_late_by_a_rebalance_are_not_the_hosts(tmp_path):
    """The same late records, but during a rebalance: they are the protocol's, and the windows around it are
    not quiet (the latency limit before it, its backlog's drain and the limit after it)."""
    log = Log(tmp_path).steady(late_s=4.0, late_from=30.0, late_share=0.05)
    log.event("h000", ev.REBALANCE_STARTED, 34.0, member="m000", trigger="join")
    log.event("h000", ev.REBALANCE_COMPLETED, 64.0, member="m000", generation=2)
    overall, by_condition, line = grade(log.done())
    assert by_condition["quiet-over-limit"] is Grade.OK, line
    evidence = gather(tmp_path)
    assert 20 < evidence.quiet.seconds < 30     # from 5 s to 31 s, less the limit: the rest follows the rebalance


def test_the_steady_model_gives_the_queue_its_own_share():
    """At a low utilisation the service times alone put nothing over 3 s; with hanging calls longer than the
    limit, at least that share is over, and the judge does not blame the host for it."""
    class Evidence:
        latency_limit_ms = 3000
        workload = {"service": "fixed", "service_ms": 10.0, "offered_per_s": 100, "busy_members": 10}

    assert steady_share(Evidence()) == 0.0
    Evidence.workload = {"service": "fixed", "service_ms": 10.0, "hang_fraction": 0.01, "hang_ms": [4000.0, 5000.0],
                         "offered_per_s": 100, "busy_members": 10}
    assert steady_share(Evidence()) > 0.01


def test_every_threshold_has_its_reason_and_suspect_comes_before_invalid():
    for threshold in THRESHOLDS.values():
        assert threshold.suspect < threshold.invalid and len(threshold.reason) > 40, threshold.name


def test_the_host_counters_give_shares_of_the_interval(tmp_path):
    pressure, stat = tmp_path / "pressure", tmp_path / "stat"
    pressure.write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=1000000\nfull avg10=0 avg60=0 avg300=0 total=0\n")
    stat.write_text("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3\n")
    before = read_counters(0, pressure=pressure, stat=stat)
    pressure.write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=1250000\n")
    stat.write_text("cpu  150 0 150 750 100 0 0 50 0 0\n")
    after = read_counters(1_000_000_000, pressure=pressure, stat=stat)
    assert sample(before, after) | {"load1": 0, "cores": 2} == {
        "interval_ms": 1000.0, "cpu_pressure_pct": 25.0, "steal_pct": 25.0, "busy_pct": 75.0, "load1": 0, "cores": 2}
    assert read_counters(0, pressure=tmp_path / "none", stat=stat).pressure_us is None   # no PSI: no made-up zero
    assert sample(Counters(0, None, 0, 0, 0), Counters(10, None, 0, 0, 0))["cpu_pressure_pct"] is None


def test_the_member_hosts_cpu_is_read_from_every_threads_schedstat(tmp_path):
    """Two processes of two threads each: their run and wait times summed, as threads on average over the
    interval; a process gone meanwhile counts nothing."""
    from experiments.run.member_cpu import read, sample

    def write(pid: int, tid: int, run_ns: int, wait_ns: int) -> None:
        task = tmp_path / str(pid) / "task" / str(tid)
        task.mkdir(parents=True, exist_ok=True)
        (task / "schedstat").write_text(f"{run_ns} {wait_ns} 7\n")

    for pid, tid in ((10, 10), (10, 11), (20, 20), (20, 21)):
        write(pid, tid, 1_000_000_000, 2_000_000_000)
    before = read([10, 20, 30], proc=tmp_path)
    assert (before.run_ns, before.wait_ns, before.threads) == (4_000_000_000, 8_000_000_000, 4)
    for pid, tid in ((10, 10), (10, 11), (20, 20), (20, 21)):
        write(pid, tid, 1_250_000_000, 3_000_000_000)   # each: a quarter of the second running, a whole waiting
    after = read([10, 20], proc=tmp_path)
    assert sample(before, after, 1_000_000_000) == {"member_threads": 4, "member_running": 1.0, "member_waiting": 4.0}
