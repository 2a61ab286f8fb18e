"""The broker's own liveness and the server-stall check.

The stall is made inside the broker, as a slow callback would make it: a function run on the broker's event
loop (EmbeddedBroker.call) that sleeps 3 s. SIGSTOP would not do: it stops the sampler thread with the loop.
The broker is the real one (the same Broker class, sockets and sampler thread as in a broker process), in
the test's process so that its loop can be reached; the healthy run uses broker processes as the runner does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from pathlib import Path

import pytest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import MetadataRequest

from broker.embedded import EmbeddedBroker
from broker.liveness import RequestLedger, running_callback
from broker.server import BrokerConfig
from broker.topics import TopicSpec
from experiments.folders.run_folder import RunFolder
from experiments.summary.check_queries import Verdict
from experiments.synthetic.simulation import SyntheticRun, write_run
from rebalance import events as ev
from rebalance.backends import backend_names, profile
from rebalance.events import read_events
from rebalance.kafka_frames import encode_request
from tests.fixtures.run_record import write_record
from tests.fixtures.spark import summarised_with_the_suite

STALL_S = 3.0


def _parked_fetch(topic: str) -> FetchRequest:
    """A Fetch the broker parks for 10 s: nothing to read, one byte wanted (Kafka's DelayedFetch)."""
    return FetchRequest[12](max_wait_ms=10_000, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
                            session_epoch=-1, forgotten_topics_data=[], rack_id="", topics=[FetchRequest.FetchTopic(
                                topic=topic, partitions=[FetchRequest.FetchTopic.FetchPartition(
                                    partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])


def _liveness(path: Path, state: str | None = None) -> list[dict]:
    if not path.exists():
        return []
    return [e for e in read_events(path) if e["type"] == ev.BROKER_LIVENESS and state in (None, e["state"])]


def _wait_for(condition, timeout_s: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.05)


def _hold_the_loop(broker) -> None:   # what a slow callback does: the loop runs nothing else meanwhile
    time.sleep(STALL_S)


def _write_broker_run(run_dir: Path, events: Path) -> Path:
    """A run folder holding one broker's events (the other checks have nothing to read: unknown)."""
    RunFolder(run_dir).events.mkdir(parents=True)
    (RunFolder(run_dir).events / "broker-0.jsonl").write_bytes(events.read_bytes())
    write_record(run_dir, topics={"t": 1})
    return run_dir


@pytest.fixture(scope="module")
def stalled_broker(tmp_path_factory):
    """A broker whose loop was held 3 s while a client's Fetch was parked in it, another client's Metadata
    request sat unread and a third client's connection waited to be accepted; first 3 s with only the parked
    Fetch and the loop free."""
    root = tmp_path_factory.mktemp("stall")
    events = root / "broker-0.jsonl"
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("broker.liveness")
    # Another test in this worker may have configured logging (dictConfig disables the loggers it does not
    # name, a level may have been raised): this fixture reads the liveness warnings whatever ran before it.
    was = (logger.disabled, logger.level)
    logger.disabled, logger.level = False, logging.WARNING
    logger.addHandler(handler)
    try:
        with EmbeddedBroker(BrokerConfig(port=0, events_path=events, run_id="stall")) as embedded:
            embedded.run(embedded.broker.create_topic(TopicSpec(name="quiet", partitions=1)))
            parked = socket.create_connection(embedded.broker.address)
            other = socket.create_connection(embedded.broker.address)
            parked.sendall(encode_request(_parked_fetch("quiet"), 1, "parked"))
            _wait_for(lambda: embedded.broker.requests.outstanding == 1, what="the Fetch is parked")
            time.sleep(STALL_S)      # the parked Fetch alone, the loop free: no stall
            free_loop = _liveness(events, "stalled")
            late = threading.Timer(0.5, other.sendall, [encode_request(MetadataRequest[1](topics=None), 2, "late")])
            newcomer: list[socket.socket] = []
            knocks = threading.Timer(0.5, lambda: newcomer.append(socket.create_connection(embedded.broker.address)))
            late.start()             # sent while the loop is held
            knocks.start()           # a connection the loop cannot accept meanwhile
            embedded.call(_hold_the_loop, timeout_s=30)
            late.join()
            knocks.join()
            newcomer[0].close()
            other.settimeout(30)
            answered = other.recv(4)   # the late request is answered once the loop runs again
            _wait_for(lambda: _liveness(events, "resumed"), what="the broker writes the end of the stall")
            parked.close()
            other.close()
    finally:
        logger.removeHandler(handler)
        logger.disabled, logger.level = was
    return {"events": events, "free_loop": free_loop, "answered": answered, "log": [r.getMessage() for r in records]}


@pytest.mark.broker
def test_a_parked_request_with_a_free_loop_is_not_a_stall(stalled_broker):
    assert stalled_broker["free_loop"] == []


@pytest.mark.broker
def test_a_held_loop_is_written_as_a_stall_with_the_stack_that_held_it(stalled_broker):
    (stalled,) = _liveness(stalled_broker["events"], "stalled")
    (resumed,) = _liveness(stalled_broker["events"], "resumed")
    assert stalled["node"] == 0 and stalled["outstanding"] >= 1 and stalled["loop_lag_ms"] >= 2000
    assert stalled["stack"].split("\n")[0].endswith(" in _hold_the_loop")     # the innermost frame: the cause
    assert stalled["unread_bytes"] > 0                                        # the late request, not read yet
    assert stalled["unaccepted"] >= 1                                         # the newcomer, not accepted yet
    assert resumed["start_ns"] == stalled["start_ns"] and resumed["stalled_ms"] >= STALL_S * 1000
    assert " in _hold_the_loop" in resumed["stack"] and resumed["stack_seen"] >= 1
    # The loop slept: neither on a CPU nor waiting for one, which is how a stall of the broker's own making
    # (a callback waiting on something) is told from one of a starved machine (waiting for a CPU).
    assert 0 <= resumed["loop_cpu_ms"] + resumed["loop_waited_ms"] < resumed["stalled_ms"] / 2
    assert stalled_broker["answered"]                                         # and then it answered


@pytest.mark.broker
def test_the_slow_callback_is_named_in_the_brokers_log(stalled_broker):
    log = "\n".join(stalled_broker["log"])
    assert "the event loop has not turned for" in log and "_hold_the_loop" in log
    assert "answering again after" in log


def test_prompt_requests_count_as_held_up_and_parked_ones_do_not():
    clock = iter(range(0, 10**6, 1000))
    ledger = RequestLedger(clock=lambda: next(clock))
    ledger.arrived(1)                    # Fetch: parked by design
    ledger.arrived(11)                   # JoinGroup: parked by design
    assert (ledger.outstanding, ledger.prompt_outstanding) == (2, 0)
    ledger.arrived(12)                   # Heartbeat: answered at once
    assert ledger.prompt_outstanding == 1
    ledger.done(12)
    ledger.done(1)
    assert (ledger.outstanding, ledger.prompt_outstanding) == (1, 0)


def test_the_running_callback_is_the_tasks_coroutine():
    stack = ["broker/server.py:300 in _dispatch", "broker/server.py:257 in _serve_connection",
             "asyncio/tasks.py:267 in __step", "asyncio/events.py:80 in _run", "asyncio/base_events.py:1922 in _run_once"]
    assert running_callback(stack) == "broker/server.py:257 in _serve_connection"
    assert running_callback(["a.py:1 in f"]) == "a.py:1 in f"


HEALTHY = """\
name = "healthy-brokers"
seed = 1
duration = 6
settle = 2

[cluster]
brokers = 1

[[topics]]
name = "t0"
partitions = 2

[producer]
rate = 20

[group]
members = 2
"""


@pytest.mark.spark
@pytest.mark.broker
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_check_reads_a_real_stall_and_a_healthy_run(spark, stalled_broker, tmp_path):
    from experiments.run import runner
    from experiments.scenario import load
    from experiments.summary import summarize_runs

    scenario = tmp_path / "healthy.toml"
    scenario.write_text(HEALTHY)
    healthy = tmp_path / "healthy"
    backend = next(name for name in backend_names()               # a group in the brokers, no ZooKeeper
                   if profile(name).coordinator_in_brokers and not profile(name).needs_zookeeper)
    result = runner.run(load(scenario), runner.RunOptions(backend=backend, run_dir=healthy, progress=False))
    assert result.status == "completed", result.reason
    samples = _liveness(RunFolder(healthy).events / "broker-0.jsonl")     # the runner gave the broker its events file
    assert samples and {e["state"] for e in samples} == {"sample"} and samples[-1]["answered"] > 0
    assert {e["run_id"] for e in samples} == {json.loads(RunFolder(healthy).lock.read_text())["run_id"]}

    stalled = _write_broker_run(tmp_path / "stalled", stalled_broker["events"])
    stalled_summary, healthy_summary = summarize_runs(spark, [stalled, healthy])
    check = next(c for c in stalled_summary.checks if c.check == "server-stall")
    assert check.verdict is Verdict.FALSE and check.count == 1
    row = check.evidence.iloc[0]
    assert row["broker"] == 0 and row["length_s"] >= STALL_S and row["ended"]
    assert row["top_frames"].startswith("tests/test_server_stall.py") and "_hold_the_loop" in row["top_frames"]
    assert "in tests/test_server_stall.py" in check.detail
    ok = next(c for c in healthy_summary.checks if c.check == "server-stall")
    assert ok.verdict is Verdict.TRUE and "1 broker process sampled" in ok.detail, ok.detail


summarised_with_the_suite("stalls", lambda folder: write_run(folder, SyntheticRun(
    name="stalls", duration_s=16.0, broker_stalls=((4.0, 3.5), (9.0, 2.5)))))
summarised_with_the_suite("stalls-quiet", lambda folder: write_run(folder, SyntheticRun(name="quiet", duration_s=16.0)))
summarised_with_the_suite("stalls-older", lambda folder: write_run(folder, SyntheticRun(
    name="older", duration_s=6.0, timeline=(), broker_samples=False)))


@pytest.mark.spark
def test_the_check_over_synthetic_logs(synthetic_runs):
    summaries = [synthetic_runs[name] for name in ("stalls", "stalls-quiet", "stalls-older")]
    found, clean, unknown = (next(c for c in s.checks if c.check == "server-stall") for s in summaries)
    assert found.verdict is Verdict.FALSE and found.count == 2
    assert list(found.evidence["start"].round(2)) == [4.0, 9.0]
    assert list(found.evidence["length_s"]) == [3.5, 2.5]
    assert found.detail.startswith("2 windows of more than 2 s in which a broker answered no request")
    assert "the longest 3.5 s (broker 0 at t=4.0 s" in found.detail
    assert "modern/coordinator/classic_group.py:1 in complete_join" in found.detail
    assert clean.verdict is Verdict.TRUE and clean.count == 0
    assert unknown.verdict is Verdict.UNKNOWN and "no broker liveness events" in unknown.detail


@pytest.mark.broker
def test_the_event_declares_every_field_the_sampler_writes(stalled_broker):
    declared = set(ev.VOCABULARY[ev.BROKER_LIVENESS].fields) | set(ev.REQUIRED_FIELDS)
    written = _liveness(stalled_broker["events"])
    assert {e["state"] for e in written} == {"sample", "stalled", "resumed"}
    assert all(set(event) <= declared for event in written), [set(e) - declared for e in written]


@pytest.mark.broker
def test_asyncio_names_a_callback_over_half_a_second_in_debug_mode(caplog):
    with EmbeddedBroker(BrokerConfig(port=0)) as embedded:
        assert embedded.call(lambda broker: asyncio.get_running_loop().slow_callback_duration) == 0.5
        embedded.call(lambda broker: asyncio.get_running_loop().set_debug(True))   # what --asyncio-debug does
        with caplog.at_level(logging.WARNING, logger="asyncio"):
            embedded.call(_hold_briefly)
    warnings = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert any(w.startswith("Executing") and "invoke" in w and " took " in w for w in warnings), warnings


def _hold_briefly(broker) -> None:
    time.sleep(0.7)


def test_a_threads_scheduler_statistics_count_its_time_on_a_cpu():
    from broker.liveness import thread_schedstat

    def spin() -> None:
        started = time.thread_time()
        while time.thread_time() - started < 0.2:    # 0.2 s of this thread's own CPU time, however long it takes
            pass
        found.append(thread_schedstat(threading.get_native_id()))

    found: list[tuple[int, int]] = []
    worker = threading.Thread(target=spin)
    worker.start()
    worker.join()
    (on_cpu, waiting), = found
    assert on_cpu >= 0.19e9 and waiting >= 0
    assert thread_schedstat(None) == (0, 0) and thread_schedstat(2**31 - 2) == (0, 0)   # no such thread
