"""A workload with service time: the scenario's [workload] table, the capacity a run records, and the member
host handling each poll's records in the polling thread (real members against a real broker): records are
handled at the service rate, a crash ends a long call at once, a pause is acknowledged mid-batch, a batch
commit comes after the handling. The summary's latency then counts from the handling's end."""

from __future__ import annotations

import json
import threading
import time
import uuid
from functools import partial

import pytest

from broker.admin import create_topic
from experiments.folders.run_folder import RunFolder
from experiments.run.handling import CHUNK_S, ServiceTimes
from experiments.run.member_configs import host_argv, member_config
from experiments.run.member_host import Host
from experiments.scenario import ScenarioError, loads
from experiments.scenario.model import WorkloadSpec
from rebalance.backends import profile
from rebalance.events import EventRecorder, read_events
from rebalance.member import MemberConfig
from tests.fixtures.run_record import write_record
from tests.fixtures.spark import summarised_with_the_suite
from tests.modern_support import produce, wait_until

BASE = """\
seed = 7
duration = 30

[[topics]]
name = "t0"
partitions = 50

[producer]
rate = 600

[group]
members = 50
"""


def problems(text: str) -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        loads(BASE + text, source="s.toml")
    return caught.value.lines()


# ---------------------------------------------------------------- the table


def test_without_a_workload_table_members_handle_records_at_once():
    scenario = loads(BASE)
    assert scenario.workload == WorkloadSpec() and not scenario.workload.handles
    assert scenario.load().utilisation is None
    hosts_argv = host_argv(scenario, profile("classic"), ("m000",), config_path=_tmp_json(), address_of=lambda _: "h:1",
                           events=_tmp_json(), run_id="r")
    assert "--workload" not in hosts_argv      # herd and split-brain hosts run as before


def test_the_workload_gives_service_time_commit_and_capacity():
    scenario = loads(BASE + '[workload]\nservice = "fixed"\nservice_ms = 50\ncommit = "batch"\n')
    assert scenario.workload.mean_service_ms == 50 and scenario.workload.commit == "batch"
    load = scenario.load()
    assert load.capacity_per_s == pytest.approx(1000) and load.utilisation == pytest.approx(0.6)
    assert load.line() == "utilisation 0.60: 600 records/s offered, capacity 1000 records/s at 50 members"
    config = member_config(scenario, profile("classic"), "m000", "h:1")
    assert config.auto_commit is False                   # batch: the host commits, not the client's timer
    argv = host_argv(scenario, profile("classic"), ("m000",), config_path=_tmp_json(), address_of=lambda _: "h:1",
                     events=_tmp_json(), run_id="r")
    workload = json.loads(argv[argv.index("--workload") + 1])
    assert workload["seed"] == 7 and workload["service_ms"] == 50


def test_a_lognormal_mean_counts_its_tail_and_the_hanging_calls():
    spec = loads(BASE + '[workload]\nservice = "lognormal"\nservice_ms = 50\nservice_p99_ms = 200\n'
                        'hang_fraction = 0.01\nhang_ms = [3000, 20000]\n').workload
    sigma = 0.5959   # ln(200 / 50) / 2.326
    assert spec.sigma == pytest.approx(sigma, abs=1e-4)
    base = 50 * 2.718281828 ** (sigma ** 2 / 2)
    assert spec.mean_service_ms == pytest.approx(0.99 * base + 0.01 * 11_500, rel=1e-4)


def test_service_times_are_drawn_per_member_from_the_seed():
    spec = WorkloadSpec(service="lognormal", service_ms=50, service_p99_ms=200, hang_fraction=0.01)
    draws = [ServiceTimes(spec, 7, "m000").next_s() for _ in range(3)]
    again = ServiceTimes(spec, 7, "m000")
    assert [again.next_s() for _ in range(1)] == draws[:1]
    first = ServiceTimes(spec, 7, "m000")
    sample = sorted(first.next_s() for _ in range(20_000))
    assert sample[10_000] == pytest.approx(0.050, rel=0.05)          # the median
    hangs = [s for s in sample if s >= 3.0]
    assert 150 < len(hangs) < 250 and max(hangs) <= 20.0               # about 1 % of the calls hang
    assert sample[int(0.99 * 20_000) - len(hangs)] == pytest.approx(0.2, rel=0.1)   # p99 of the calls that answer
    other = ServiceTimes(spec, 7, "m001")
    assert [other.next_s() for _ in range(5)] != [ServiceTimes(spec, 7, "m000").next_s() for _ in range(5)]


@pytest.mark.parametrize(("text", "expected"), [
    ('[workload]\nservice = "fixed"\n', "s.toml:13: workload.service_ms: missing: service = 'fixed' needs service_ms"),
    ('[workload]\nservice = "slow"\n', "s.toml:14: workload.service: unknown value 'slow' (expected one of: none, "
                                       "fixed, lognormal)"),
    ('[workload]\nservice_ms = 50\n', "s.toml:14: workload.service_ms: not used with service = 'none' "
                                      "(zero service time)"),
    ('[workload]\nservice = "fixed"\nservice_ms = 50\nservice_p99_ms = 90\n',
     "s.toml:16: workload.service_p99_ms: not used with service = 'fixed' (a lognormal's only)"),
    ('[workload]\nservice = "lognormal"\nservice_ms = 50\nservice_p99_ms = 40\n',
     "s.toml:16: workload.service_p99_ms: the 99th percentile (40 ms) must exceed the median service_ms (50 ms)"),
    ('[workload]\nservice = "fixed"\nservice_ms = -1\n', "s.toml:15: workload.service_ms: must be positive, got -1"),
    ('[workload]\nservice = "fixed"\nservice_ms = 5\nhang_fraction = 1\n',
     "s.toml:16: workload.hang_fraction: a share of the records, below 1, got 1"),
    ('[workload]\nservice = "fixed"\nservice_ms = 5\nhang_ms = [20000, 3000]\n',
     "s.toml:16: workload.hang_ms: must be [shortest, longest] in ms, 0 <= shortest <= longest, got [20000, 3000]"),
    ('[workload]\ncommit = "sometimes"\n', "s.toml:14: workload.commit: unknown value 'sometimes' (expected one of: "
                                           "auto, batch)"),
    ('[workload]\nmax_poll_records = 0\n', "s.toml:14: workload.max_poll_records: must be positive, got 0"),
    ('[workload]\nservice_time = 5\n', "s.toml:14: workload.service_time: unknown field"),
])
def test_a_bad_workload_names_its_field_and_line(text, expected):
    assert any(line.startswith(expected) for line in problems(text)), problems(text)


_counter = iter(range(1_000_000))


def _tmp_json():
    import tempfile
    from pathlib import Path

    return Path(tempfile.gettempdir()) / f"workload-test-{uuid.uuid4().hex[:8]}-{next(_counter)}.json"


# ---------------------------------------------------------------- the member host, against a real broker


@pytest.fixture
def cluster(broker_cluster, monkeypatch):
    monkeypatch.setenv("REBALANCE_LAB_GROUP_INITIAL_REBALANCE_DELAY_MS", "200")
    return broker_cluster(1)


class RecordingHost(Host):
    """A member host run in this process: its control replies are kept (id -> monotonic time) instead of sent."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.replies: dict[object, tuple[bool, float]] = {}

    def reply(self, ident: object, *, error: str | None = None, at_ns: int | None = None) -> None:
        self.replies[ident] = (error is None, time.monotonic() if at_ns is None else at_ns / 1e9)

    def command(self, ident: int, op: str, member: str) -> float:
        """Send a command; the time it was sent."""
        sent = time.monotonic()
        self.commands.put({"id": ident, "op": op, "member": member})
        return sent


class Running:
    """A host of `count` classic members on a fresh topic, run on a thread, stopped at the end."""

    def __init__(self, cluster, tmp_path, spec: WorkloadSpec, *, count: int = 1, partitions: int = 2) -> None:
        suffix = uuid.uuid4().hex[:8]
        self.topic, group = f"topic-{suffix}", f"group-{suffix}"
        self.bootstrap = cluster.bootstrap
        self.partitions = partitions
        create_topic(self.bootstrap, self.topic, partitions)
        self.path = tmp_path / "events.jsonl"
        self.recorder = EventRecorder(self.path, run_id="r", backend="classic")
        configs = {f"m{index}": MemberConfig(group=group, topics=(self.topic,), member_name=f"m{index}",
                                             bootstrap=self.bootstrap, auto_commit=spec.commit == "auto")
                   for index in range(count)}
        self.stop = threading.Event()
        self.host = RecordingHost(profile("classic").make, configs, self.recorder, self.stop, workload=spec, seed=3)
        for name in configs:
            self.host.make(name)
        self.thread = threading.Thread(target=self.host.run, daemon=True)

    def __enter__(self) -> Running:
        self.thread.start()
        owners = lambda: sum(len(slot.member.assignment()) for slot in self.host.slots.values()  # noqa: E731
                             if slot.state == "running")
        wait_until(lambda: owners() == self.partitions, "every partition owned", 60)
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(60)
        self.recorder.close()

    def produce(self, count: int) -> None:
        produce(self.bootstrap, self.topic, count, partitions=self.partitions)

    def events(self, kind: str, member: str | None = None) -> list[dict]:
        return [e for e in read_events(self.path) if e["type"] == kind and (member is None or e["member"] == member)]

    def processed(self) -> int:
        return sum(e["count"] for e in self.events("records_processed"))


class _LateClock:
    """The handler's clock, moved on by its waits: the first wait ends `late_s` after its deadline, the rest on time."""

    def __init__(self, late_s: float) -> None:
        self.now, self.late_s = 100.0, late_s

    def monotonic(self) -> float:
        return self.now

    def time_ns(self) -> int:
        return int(self.now * 1e9)

    def wait(self, timeout: float) -> bool:
        self.now += timeout + self.late_s
        self.late_s = 0.0
        return False

    def clear(self) -> None:
        pass


class _Emitted:
    def __init__(self) -> None:
        self.chunks: list[dict] = []

    def emit(self, kind: str, member_id: str, **fields) -> None:
        self.chunks.append(fields)


def test_a_chunk_holds_at_most_its_planned_handling_when_the_first_record_ends_late(monkeypatch):
    """20 ms a record, the first ending 30 ms late (under LATE_S, so the schedule holds): every records_processed
    event covers at most CHUNK_S of planned handling, the first record and five more, late start or not."""
    from types import SimpleNamespace

    from experiments.run import handling
    from rebalance.types import Record

    clock = _LateClock(late_s=0.030)
    monkeypatch.setattr(handling, "time", clock)
    member = SimpleNamespace(member_id="m")
    slot = SimpleNamespace(name="m", member=member, state="running", lock=threading.Lock(), wake=clock,
                           gate=_Emitted())
    handler = handling.Handler(WorkloadSpec(service="fixed", service_ms=20), seed=1, stop=threading.Event())
    records = [Record(topic="t", partition=0, offset=offset, key=None, value=b"{}", timestamp_ms=0)
               for offset in range(20)]
    assert handler.handle(slot, member, records)
    counts = [chunk["count"] for chunk in slot.gate.chunks]
    assert sum(counts) == 20 and max(counts) == round(CHUNK_S / 0.020) + 1, counts


@pytest.mark.broker
def test_records_are_handled_at_the_service_rate_after_their_delivery(cluster, tmp_path):
    with Running(cluster, tmp_path, WorkloadSpec(service="fixed", service_ms=20), count=2) as run:
        run.produce(200)
        wait_until(lambda: run.processed() >= 200, "200 records handled", 60)
    consumed, handled = run.events("records_consumed"), run.events("records_processed")
    delivered_at = {(e["partition"], e["first_offset"] + i): e["ts_ms"]
                    for e in consumed for i in range(e["count"])}
    for member in ("m0", "m1"):
        mine = [e for e in handled if e["member"] == member]
        count = sum(e["count"] for e in mine)
        first_delivery = min(e["ts_ns"] for e in consumed if e["member"] == member)
        span_s = (max(e["ts_ns"] for e in mine) - first_delivery) / 1e9
        assert span_s >= count * 0.020, f"{member}: {count} records of 20 ms in {span_s:.2f} s"
    assert sum(e["count"] for e in handled if e["member"] == "m0") + sum(
        e["count"] for e in handled if e["member"] == "m1") >= 200
    assert max(sum(e["count"] for e in handled if e["member"] == m) for m in ("m0", "m1")) >= 100   # >= 2 s alone
    for event in handled:
        assert len(event["processed_ts_ms"]) == len(event["produce_ts_ms"]) == event["count"]
        assert event["processed_ts_ms"] == sorted(event["processed_ts_ms"])
        # one chunk: at most 100 ms of planned handling, so the first record and five more of 20 ms (the end times
        # themselves may run late on a busy host, which the chunk's rule does not count)
        assert event["count"] <= round(CHUNK_S / 0.020) + 1
        for index, done in enumerate(event["processed_ts_ms"]):
            assert done > delivered_at[(event["partition"], event["first_offset"] + index)]


@pytest.mark.broker
def test_a_crash_ends_a_hanging_call_at_once(cluster, tmp_path):
    spec = WorkloadSpec(service="fixed", service_ms=1, hang_fraction=0.999, hang_ms=(60_000.0, 60_000.0))
    with Running(cluster, tmp_path, spec, partitions=1) as run:
        run.produce(5)
        wait_until(lambda: run.events("records_consumed", "m0"), "records delivered", 60)
        poller = run.host._pollers[0]
        assert poller.is_alive()
        run.host.command(1, "crash", "m0")
        poller.join(15)     # a call hangs for 60 s: only a sleep that wakes on the crash ends this soon
        assert not poller.is_alive()
    assert not run.events("records_processed")


@pytest.mark.broker
def test_a_pause_is_acknowledged_mid_batch_and_stops_the_handling(cluster, tmp_path):
    with Running(cluster, tmp_path, WorkloadSpec(service="fixed", service_ms=1000), partitions=1) as run:
        run.produce(20)    # a batch of 20 s
        wait_until(lambda: run.events("records_processed", "m0"), "a first record handled", 60)
        sent = run.host.command(1, "pause", "m0")
        wait_until(lambda: 1 in run.host.replies, "the pause acknowledged", 60)
        ok, acked = run.host.replies[1]
        assert ok and acked - sent < 5.0      # not after the batch (about 18 s more), nor after PAUSE_WAIT_S
        handled_at_pause = run.processed()
        time.sleep(3.0)     # three service times
        assert run.processed() == handled_at_pause, "a paused member handled records"
        resumed = run.host.command(2, "resume", "m0")
        wait_until(lambda: run.processed() > handled_at_pause, "handling resumed", 30)
        wait_until(lambda: 2 in run.host.replies, "the resume acknowledged", 30)
        ok, effect = run.host.replies[2]
        assert ok and resumed <= effect, "the resume is stamped when it takes effect, after it was sent"


@pytest.mark.broker
def test_a_batch_commit_comes_once_the_polls_records_are_handled(cluster, tmp_path):
    with Running(cluster, tmp_path, WorkloadSpec(service="fixed", service_ms=50, commit="batch"),
                 partitions=1) as run:
        run.produce(20)
        wait_until(lambda: any(run.events("offsets_committed", "m0")), "a commit", 60)
        wait_until(lambda: run.processed() >= 20, "20 records handled", 60)
        wait_until(lambda: any(max(e["offsets"].values(), default=0) >= 20 for e in run.events("offsets_committed")),
                   "the last offset committed", 60)
        events = [e for e in read_events(run.path) if e["member"] == "m0"]
    tp = f"{run.topic}-0"
    handled_up_to = -1    # the highest offset handled so far, in event order
    commits = 0
    for event in events:
        if event["type"] == "records_processed":
            handled_up_to = max(handled_up_to, event["last_offset"])
        elif event["type"] == "offsets_committed" and tp in event["offsets"]:
            commits += 1
            assert event["offsets"][tp] <= handled_up_to + 1, "committed past what was handled"
        elif event["type"] == "member_stopped":
            break
    assert commits >= 1


def test_the_run_record_keeps_the_workload_offered_load_capacity_and_utilisation(tmp_path):
    from types import SimpleNamespace

    from experiments.folders.run_folder import RunFolder
    from experiments.run.describe import describe_run
    from experiments.scenario import resolve

    scenario = loads(BASE + '[workload]\nservice = "fixed"\nservice_ms = 50\ncommit = "batch"\n', source="s.toml")
    run = SimpleNamespace(scenario=scenario, schedule=resolve(scenario), run_id="r", backend="classic", applied=[],
                          t0_ns=None, started_ms=0, members_proxied={},
                          server_processes=SimpleNamespace(zk_connect=None, ensemble=None, cluster=None),
                          member_id=lambda name: name)
    RunFolder(tmp_path).write_record(describe_run(run, "running"))
    workload = RunFolder(tmp_path).record().workload
    assert workload["service"] == "fixed" and workload["commit"] == "batch"
    assert (workload["offered_per_s"], workload["capacity_per_s"], workload["utilisation"]) == (600, 1000, 0.6)


@pytest.mark.broker
def test_a_leave_finishes_the_batch_before_the_member_closes(cluster, tmp_path):
    with Running(cluster, tmp_path, WorkloadSpec(service="fixed", service_ms=200, commit="batch"),
                 partitions=1) as run:
        run.produce(10)    # one batch of 2 s
        wait_until(lambda: run.events("records_processed", "m0"), "a first record handled", 60)
        run.host.command(1, "leave", "m0")
        wait_until(lambda: 1 in run.host.replies, "the leave acknowledged", 60)
        events = [e for e in read_events(run.path) if e["member"] == "m0"]
    kinds = [e["type"] for e in events]
    stopped = kinds.index("member_stopped")
    delivered = sum(e["count"] for e in events if e["type"] == "records_consumed")
    handled = sum(e["count"] for e in events[:stopped] if e["type"] == "records_processed")
    assert delivered == handled > 0, (delivered, handled)      # every record delivered was handled first
    last_handled = max(i for i, kind in enumerate(kinds) if kind == "records_processed")
    assert "offsets_committed" in kinds[last_handled:stopped]      # the batch's commit, then the close


# ---------------------------------------------------------------- the summary


def _line(t_s: float, **fields) -> str:
    return json.dumps({"run_id": "r", "backend": "classic", "ts_ns": int(t_s * 1e9), "ts_ms": int(t_s * 1e3),
                       "process": fields.get("member") or "runner", **fields}) + "\n"


def _write_run(folder, *, handled_at_s: float | None):
    """Ten records produced at 1.9 s, delivered at 2.0 s and, when `handled_at_s`, handled by then: the last
    one ends at `handled_at_s`, each of the others 100 ms before the next."""
    events = RunFolder(folder).events
    events.mkdir(parents=True)
    (events / "producer.jsonl").write_text(_line(
        1.9, member="", type="records_produced", topic="t", partition=0, first_offset=0, last_offset=9, count=10,
        seqs=list(range(10)), produce_ts_ms=[1900] * 10))
    member = (_line(1.0, member="m0", type="member_started")
              + _line(1.5, member="m0", type="rebalance_completed", generation=1, assigned=["t-0"])
              + _line(2.0, member="m0", type="records_consumed", topic="t", partition=0, first_offset=0, last_offset=9,
                      count=10, produce_ts_ms=[1900] * 10))
    if handled_at_s is not None:
        ends = [int(handled_at_s * 1000) - 100 * (9 - index) for index in range(10)]
        member += _line(handled_at_s, member="m0", type="records_processed", topic="t", partition=0, first_offset=0,
                        last_offset=9, count=10, produce_ts_ms=[1900] * 10, processed_ts_ms=ends)
    (events / "m0.jsonl").write_text(member)
    write_record(folder, topics={"t": 1}, members=1)
    return folder


summarised_with_the_suite("latency-handled", partial(_write_run, handled_at_s=6.0))   # ends 5.1 .. 6.0 s: 3.2 .. 4.1 s late
summarised_with_the_suite("latency-delivered", partial(_write_run, handled_at_s=None))


@pytest.mark.spark
def test_the_summarys_latency_counts_from_the_handlings_end_when_a_run_has_it(synthetic_runs):
    by_handling, by_delivery = synthetic_runs["latency-handled"], synthetic_runs["latency-delivered"]
    slow = {name: next(c for c in summary.checks if c.check == "slow-records")
            for name, summary in (("handled", by_handling), ("delivered", by_delivery))}
    assert slow["handled"].count == 10 and "worst 4100 ms" in slow["handled"].detail
    assert slow["delivered"].count == 0 and slow["delivered"].verdict.value == "true"
    phases = by_handling.tables["phases"]
    assert phases["max_latency_ms"].max() == 4100 and phases["over_limit"].sum() == 10
    assert by_delivery.tables["phases"]["max_latency_ms"].max() == 100
