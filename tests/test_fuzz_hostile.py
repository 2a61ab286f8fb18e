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


def test_a_short_hostile_run_holds_every_invariant(broker):
    report = HostileRun(broker.bootstrap, answer_limit_s=ANSWER_LIMIT_S).run(SHORT_RUN_S)
    assert report.ok, report.summary()["first_violations"]
    assert report.batches >= 2
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
