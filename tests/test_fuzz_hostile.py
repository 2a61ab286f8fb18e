"""The hostile-value generator against a real broker with its coordinator: a short run holds every
invariant, and the checks themselves catch what they are for."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from broker.embedded import EmbeddedBroker
from broker.server import BrokerConfig
from experiments.fuzz import hostile_values
from experiments.fuzz.hostile import HostileRun, answer_codes, listening_pid
from modern.coordinator.classic_group import GroupConfig
from modern.coordinator.config import CoordinatorConfig
from modern.coordinator.service import CoordinatorExtension

pytestmark = pytest.mark.broker

SHORT_RUN_S = 20
# The suite shares a loaded machine: an answer gets more than the command's one second here.
ANSWER_LIMIT_S = 5.0


@pytest.fixture
def broker():
    """The lab's broker with its group coordinator, as `rebalance-lab broker` runs it (no initial delay)."""
    coordinator = CoordinatorExtension(CoordinatorConfig(group=GroupConfig(initial_rebalance_delay_ms=0)))
    with EmbeddedBroker(BrokerConfig(port=0), extensions=[coordinator]) as embedded:
        yield embedded


def test_a_short_hostile_run_holds_every_invariant_and_reports_progress(broker):
    progress = []
    report = HostileRun(broker.bootstrap, answer_limit_s=ANSWER_LIMIT_S).run(
        SHORT_RUN_S, chunk=10, on_progress=lambda so_far, elapsed: progress.append((elapsed, so_far.batches)),
        progress_every_s=0.5)
    # Progress is looked at after every batch, not only between Hypothesis's chunks of ten (on a loaded
    # machine one chunk can outlast the whole run): a line between chunks would always follow a tenth batch.
    assert any(batches % 10 for _, batches in progress), progress
    assert report.ok, report.summary()["first_violations"]
    assert report.batches >= 2
    assert len(progress) >= 1, "a long run says how far it has got"
    assert [elapsed for elapsed, _ in progress] == sorted(elapsed for elapsed, _ in progress)
    assert all(elapsed < SHORT_RUN_S for elapsed, _ in progress), "no progress line after the run's end"
    assert {"JoinGroup", "OffsetCommit", "ConsumerGroupHeartbeat"} <= set(report.requests)
    assert report.rss_mb, "the broker's memory was read (it runs in this process)"


def test_the_broker_process_is_found_from_its_port(broker):
    import os

    assert listening_pid(broker.broker.address[1]) == os.getpid()


def test_a_wrong_error_code_is_a_violation(broker):
    run = HostileRun(broker.bootstrap, answer_limit_s=ANSWER_LIMIT_S)
    target = run.steady.form()

    @settings(max_examples=1, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(hostile=hostile_values.heartbeat(target))
    def send(hostile):
        hostile.expect = {"error": frozenset({12345})}   # no broker answers this
        run._send(hostile)

    send()
    assert [v["check"] for v in run.report.violations] == ["error-codes"]


def test_errors_are_read_where_each_api_carries_them():
    class Answer:
        error_code = 0
        members = [type("M", (), {"member_id": "m", "error_code": 25})()]

    hostile = hostile_values.Hostile("LeaveGroup", request=None)
    assert answer_codes(hostile, Answer()) == [("error", 0), ("m", 25)]


def test_the_command_names_a_bad_or_unreachable_bootstrap_and_starts_nothing():
    import socket

    from typer.testing import CliRunner

    from experiments.cli.app import app

    with socket.socket() as closed:     # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    unreachable = CliRunner().invoke(app, ["fuzz", "hostile", "--bootstrap", f"127.0.0.1:{port}", "--seconds", "1"])
    assert unreachable.exit_code == 2, unreachable.output
    assert f"no broker answers at 127.0.0.1:{port}" in unreachable.output
    malformed = CliRunner().invoke(app, ["fuzz", "hostile", "--bootstrap", "nonsense", "--seconds", "1"])
    assert malformed.exit_code == 2 and "not a HOST:PORT address" in malformed.output, malformed.output


def test_a_long_name_is_committed_with_one_fixed_partner_so_the_stored_offsets_stay_small():
    """Kafka keeps every committed offset, its key naming group and topic: a long name paired freely would
    pile up hundreds of MB over an hour, which the memory check would read as a leak."""
    target = hostile_values.Target(classic_group="steady", classic_member="m", classic_generation=1,
                                   consumer_group="steady-cg", consumer_member="c", consumer_epoch=1, topic="t0")
    pairs = set()

    @settings(max_examples=400, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(hostile=hostile_values.offset_commit(target))
    def draw(hostile):
        if hostile.fresh_group is not None:   # a commit to a group of its own: stored
            for topic in hostile.request.topics:
                pairs.add((hostile.request.group_id, topic.name))

    draw()
    long_pairs = [(group, topic) for group, topic in pairs
                  if max(len(group), len(topic)) >= hostile_values.RECORD_STRING_MAX_BYTES]
    assert long_pairs, "long names were drawn"
    for group, topic in long_pairs:
        assert min(len(group), len(topic)) < hostile_values.RECORD_STRING_MAX_BYTES, "never two long names together"
        assert group == "hostile-commit-long-topic" or topic == target.topic
