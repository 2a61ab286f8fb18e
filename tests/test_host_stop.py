"""A member host that is stopped (SIGTERM to a pod's container): each of its members leaves the group as soon as
its own batch is handled, as each pod's one consumer does; a neighbour's long batch holds nobody else up, and a
batch still under way when the host gives up is named."""

from __future__ import annotations

import pytest

from experiments.run.member_host import STOP_WAIT_S
from experiments.scenario.model import WorkloadSpec
from rebalance.events import read_events
from tests.modern_support import produce, wait_until
from tests.test_workload import Running


@pytest.fixture
def cluster(broker_cluster, monkeypatch):
    monkeypatch.setenv("REBALANCE_LAB_GROUP_INITIAL_REBALANCE_DELAY_MS", "200")
    return broker_cluster(1)


@pytest.mark.broker
def test_each_member_of_a_stopping_host_leaves_after_its_own_batch(cluster, tmp_path):
    with Running(cluster, tmp_path, WorkloadSpec(service="fixed", service_ms=500, commit="batch"), count=2,
                 partitions=2) as run:
        owner = {tp.partition: name for name, slot in run.host.slots.items() for tp in slot.member.assignment()}
        busy, idle = owner[1], owner[0]
        for seq in range(1, 21, 2):           # ten records for partition 1: a batch of about 5 s
            produce(run.bootstrap, run.topic, 1, partitions=2, start=seq)
        wait_until(lambda: sum(e["count"] for e in run.events("records_consumed", busy)) == 10,
                   "the busy member's records delivered", 60)
    events = list(read_events(run.path))
    idle_left = next(e["ts_ns"] for e in events if e["type"] == "member_stopped" and e["member"] == idle)
    busy_done = max(e["ts_ns"] for e in events if e["type"] == "records_processed" and e["member"] == busy)
    busy_left = next(e["ts_ns"] for e in events if e["type"] == "member_stopped" and e["member"] == busy)
    assert idle_left < busy_done, "the idle member waited for its neighbour's batch before it left"
    assert busy_left > busy_done, "the busy member left before its own batch was handled"
    assert STOP_WAIT_S < 20.0     # the runner kills a host 20 s after its SIGTERM: the batch's limit comes first
