"""How a scenario's 0.8 members commit, made the way a run makes them (`experiments.run.member_configs`).

0.8.2.2's `ZookeeperConsumerConnector` commits through auto-commit (`auto.commit.enable`, on by default): a
scheduler thread runs `autoCommit` every `auto.commit.interval.ms`, and `closeFetchersForQueues` commits
before a rebalance releases the owner znodes; both write `commitOffsets`'s consumed offsets (what the
iterator has handed out). An application on it takes one message at a time from a `ConsumerIterator`: it has
no poll's batch to commit after. A scenario's `commit = "batch"` (Spring Kafka's AckMode.BATCH) is the other
generations' application; the legacy profile says its application commits through auto-commit instead
(`BackendProfile.commits_after_batch`). Against a real ZooKeeper and the lab's broker registered in it the
0.8 way.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import fields
from pathlib import Path

import pytest

from experiments.run.member_configs import host_argv, member_config
from experiments.run.member_host import Host
from experiments.scenario import load as load_scenario
from experiments.scenario import loads
from experiments.scenario.model import WorkloadSpec, on_backend
from legacy_zk.config import LegacyConfig
from legacy_zk.member import LegacyMember
from rebalance.backends import profile
from rebalance.events import EventRecorder, read_events
from rebalance.member import MemberConfig
from tests import test_legacy_config as settings_check
from tests import test_legacy_zk as legacy
from tests import test_poll_loop_legacy as loop

TOPIC, PARTITIONS, PER_PARTITION = loop.TOPIC, loop.PARTITIONS, loop.PER_PARTITION
LEGACY = profile("legacy")

# The fixtures of the other legacy tests: a chroot of the shared ZooKeeper, a client in it, the broker.
zk_connect, kz, bootstrap = legacy.zk_connect, legacy.kz, loop.bootstrap


def scenario(group: str, *, service_ms: float, extra: str = ""):
    """seed002's way of committing (`commit = "batch"`) with a fixed service time, on the fixtures' topic."""
    return loads(f"""\
seed = 2
duration = 60

[[topics]]
name = "{TOPIC}"
partitions = {PARTITIONS}

[producer]
rate = 600

[group]
name = "{group}"
members = 2

[group.legacy]
"rebalance.backoff.ms" = 200
"zookeeper.sync.time.ms" = 200
{extra}
[workload]
service = "fixed"
service_ms = {service_ms}
commit = "batch"
""", source="legacy-commits.toml")


def host_of(run, zk: str, tmp_path: Path, name: str, recorder: EventRecorder, stop: threading.Event) -> Host:
    """A member host as a run starts one: its members' configs and its workload are what `host_argv` gives the
    host process (`experiments.run.member_cli` reads them back the same way)."""
    config_path = tmp_path / f"{name}.json"
    argv = host_argv(run, LEGACY, (name,), config_path=config_path, address_of=lambda _: zk,
                     events=tmp_path / f"{name}.jsonl", run_id="r")
    configs = {c["member_name"]: MemberConfig.from_json(c) for c in json.loads(config_path.read_text())}
    workload, seed = WorkloadSpec(), 0
    if "--workload" in argv:
        document = json.loads(argv[argv.index("--workload") + 1])
        seed = document.pop("seed")
        workload = WorkloadSpec.from_json(document)
    host = Host(LEGACY.make, configs, recorder, stop, workload=workload, seed=seed)
    host.make(name)
    return host


def offsets_writes(events: list[dict]) -> list[dict]:
    """The requests that wrote an offset znode (a first write is a set refused with NoNode, then a create)."""
    return [e for e in events if e["type"] == "coordination_request" and e["op"] in ("set", "create")
            and "/offsets/" in e["path"] and e["error"] is None]


@pytest.mark.zk
@pytest.mark.broker
def test_a_legacy_member_handling_batches_writes_its_offsets_on_auto_commits_not_per_record(
        zk_connect, kz, bootstrap, tmp_path):
    """A scenario with `commit = "batch"`: each 0.8 poll hands out one record, so an application commit after
    each poll's records wrote one offset to ZooKeeper per record handled (600 here; 600 a second in
    seed002), on the polling thread. 0.8's application left commits to auto-commit: a write per owned
    partition whose consumed offset moved, at each tick of `auto.commit.interval.ms` (the shared 5 s), and
    at the close."""
    group = f"g-{uuid.uuid4().hex[:6]}"
    run = scenario(group, service_ms=5)
    recorder = EventRecorder(tmp_path / "events.jsonl", backend="legacy")
    stop = threading.Event()
    host = host_of(run, zk_connect, tmp_path, "m0", recorder, stop)
    member = host.slots["m0"].member

    thread = threading.Thread(target=host.run, daemon=True)
    began = time.monotonic()
    thread.start()
    try:
        loop.wait_until(lambda: member.idle and len(member.assignment()) == PARTITIONS, "m0 to own every partition")
        loop.produce(bootstrap)
        handled = lambda: sum(e["count"] for e in read_events(tmp_path / "events.jsonl")  # noqa: E731
                              if e["type"] == "records_processed")
        loop.wait_until(lambda: handled() >= PARTITIONS * PER_PARTITION, "every record handled")
    finally:
        stop.set()
        thread.join(60)
        ran_s = time.monotonic() - began
        recorder.close()
    events = list(read_events(tmp_path / "events.jsonl"))
    assert sum(e["count"] for e in events if e["type"] == "records_processed") == PARTITIONS * PER_PARTITION
    writes = offsets_writes(events)
    # at most: a write per partition at each auto-commit tick, at the one rebalance and at the close
    occasions = 2 + int(ran_s * 1000 // member.config.auto_commit_interval_ms)
    assert len(writes) <= PARTITIONS * occasions, \
        f"{len(writes)} offsets writes for {PARTITIONS * PER_PARTITION} records handled in {ran_s:.1f} s"
    assert loop.committed(kz, group) == {p: PER_PARTITION for p in range(PARTITIONS)}
    assert (member.config.auto_commit_enable, member.config.auto_commit_interval_ms) == (True, 5000)


@pytest.mark.zk
@pytest.mark.broker
def test_a_legacy_member_handling_batches_commits_before_its_rebalance_releases_what_it_owns(
        zk_connect, kz, bootstrap, tmp_path):
    """`closeFetchersForQueues` with auto-commit on: the rebalance stops fetching, clears the queues and
    commits the consumed offsets before `releasePartitionOwnership`. The application here has taken one
    record and is still handling it (it polls no more); a newcomer joins. The watcher thread writes the offset
    after that record before it deletes a single owner znode, with no tick of the scheduler in between (its
    interval is ten minutes here), so the new owner of the partition starts after it. With the application's
    commit after each poll instead, auto-commit was off, nothing was committed before the release, and the
    record in hand was never committed."""
    group = f"g-{uuid.uuid4().hex[:6]}"
    run = scenario(group, service_ms=5, extra='"auto.commit.interval.ms" = 600000\n')
    recorder = EventRecorder(tmp_path / "events.jsonl", backend="legacy")
    a = LegacyMember(member_config(run, LEGACY, "a", zk_connect), recorder=recorder)
    b = LegacyMember(member_config(run, LEGACY, "b", zk_connect), recorder=recorder)
    try:
        a.start()
        loop.wait_until(lambda: a.idle and len(a.assignment()) == PARTITIONS, "a to own every partition")
        loop.produce(bootstrap)
        in_hand: list = []
        deadline = time.monotonic() + loop.WAIT_S
        while not in_hand:
            assert time.monotonic() < deadline, "a handed out no record"
            in_hand = a.poll(1.0)
        record = in_hand[0]
        # a handles the record: no poll, no commit from here on.
        b.start()
        loop.wait_until(lambda: a.idle and b.idle and len(loop.owners(kz, group)) == PARTITIONS
                        and len(a.assignment()) == len(b.assignment()) == PARTITIONS // 2,
                        "a to share the partitions with b while it is not polling")
        assert loop.committed(kz, group).get(record.partition) == record.offset + 1, "the record in hand not committed"
        moved = {tp.partition for tp in b.assignment()}
        if record.partition in moved:
            taken = loop.drain(b, lambda records: any(r.partition == record.partition for r in records))
            assert min(r.offset for r in taken if r.partition == record.partition) == record.offset + 1
    finally:
        a.close()
        b.close()
        recorder.close()
    events = [e for e in read_events(tmp_path / "events.jsonl") if e["member"] == a.member_id]
    released = next(i for i, e in enumerate(events) if e["type"] == "coordination_request" and e["op"] == "delete"
                    and "/owners/" in e["path"])
    path = f"/consumers/{group}/offsets/{TOPIC}/{record.partition}"
    before = [e for e in offsets_writes(events[:released]) if e["path"].endswith(path)]
    assert before, "nothing committed before the release"
    started = max(i for i, e in enumerate(events[:released]) if e["type"] == "rebalance_started")
    assert any(e["path"].endswith(path) for e in offsets_writes(events[started:released])), \
        "the commit before the release was not the rebalance's"


@pytest.mark.parametrize("path", settings_check.LEGACY_SCENARIOS, ids=lambda path: path.stem)
def test_the_08_settings_a_scenarios_comments_are_checked_against_are_those_its_run_gives_its_members(path):
    """tests/test_legacy_config.py holds each scenario's comments to the 0.8 settings it runs; those must be the
    settings a run makes its members with, workload included. seed002's `commit = "batch"` once turned
    auto-commit off for 0.8 (the application's commit instead) while its comments said it ran the shared 5 s
    auto-commit, and the check, reading the group alone, could not see it."""
    run = on_backend(load_scenario(path), LEGACY.name)
    runs = LegacyConfig.from_member_config(member_config(run, LEGACY, "m000", "127.0.0.1:2181"))
    checked = settings_check.legacy_settings(path)
    tuned = [f.name for f in fields(LegacyConfig) if f.name not in settings_check.NAMES_THE_RUN]
    assert {name: getattr(runs, name) for name in tuned} == {name: getattr(checked, name) for name in tuned}
