"""Faults on single members of a shared host process (per_process = 2), end to end on both backends,
with real ZooKeeper, real brokers and real member processes.

Two hosts of two members each: h000 (h000-0, h000-1) and h001 (h001-0, h001-1). At t = 2 h000-1 is
crashed by emulation (its links black-holed, then its host drops it without a word) while a coord-link
black hole hits h001-0 and a data-link black hole h001-1, until t = 10. At t = 14, or once the survivors
own every partition if that takes longer (a busy machine slows 0.8's rebalance retries), h000-1 is
restarted (a fresh instance in the same process) and h001-1 paused by emulation for 3 s; 4 s later h000-0
leaves. Checked:
- the fault events say emulated = true and name only the member hit; the link fault and the leave name
  only their member and are not emulated;
- the crashed member writes nothing after its host acknowledged the crash, and its partner in the same
  process keeps running and consuming;
- its session expires on the server as after SIGKILL: legacy, its /consumers/<group>/ids node outlives
  the crash (no closeSession) and then disappears; on both backends the group rebalances without it;
- each link fault reaches only its member (coord: legacy, only it loses its ZooKeeper connection;
  classic, only its heartbeats stop; data: only it stops consuming, through the brokers' advertise map
  keyed by its own client id);
- the restarted member comes back under its name; the paused member consumes nothing while paused;
  the leaving member closes cleanly while its host process runs on.

Also, on one host process alone: the control channel's commands and refusals, watched from ZooKeeper,
and the member command's checks of per-member addresses and of its members' JSON configs.
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from experiments.faults.process import processes_with_marker
from experiments.folders.run_folder import RunFolder
from experiments.run import runner
from experiments.scenario import load
from rebalance.events import read_events

SCENARIO = """\
name = "shared-host-faults"
seed = 5
duration = 22
settle = 3

[cluster]
zookeeper_nodes = 1
brokers = 1

[[topics]]
name = "t0"
partitions = 6

[producer]
rate = 20

[group]
members = 4
per_process = 2
session_timeout_ms = 6000

[group.classic]
"heartbeat.interval.ms" = 1000

[[timeline]]
at = 2
action = "crash"
member = 1

[[timeline]]
at = 2
action = "link"
member = 2
link = "coord"
fault = "partition"
duration = 8

[[timeline]]
at = 2
action = "link"
member = 3
link = "data"
fault = "partition"
duration = 8

[[timeline]]
at = 14
action = "restart"
member = 1
after = "stable"
timeout = 90

[[timeline]]
at = 14
action = "pause"
member = 3
duration = 3

[[timeline]]
at = 18
action = "leave"
member = 0
"""

GROUP = "lab-group"


def named(registered: str) -> str:
    """A registered consumer id, `<group>_<tag>.<name>`, as the events name its member: `<group>_<name>`."""
    return re.sub(r"_[0-9a-f]{8}\.", "_", registered)


class IdsSampler(threading.Thread):
    """Reads /consumers/<group>/ids of a legacy run every 100 ms, from its own ZooKeeper client."""

    def __init__(self, run_dir: Path) -> None:
        super().__init__(daemon=True)
        self.run_dir = run_dir
        self.samples: list[tuple[int, tuple[str, ...]]] = []
        self.done = threading.Event()

    def run(self) -> None:
        lock = RunFolder(self.run_dir).lock
        connect = None
        while connect is None and not self.done.wait(0.1):
            try:
                connect = json.loads(lock.read_text())["cluster"]["zookeeper"]
            except (OSError, ValueError, KeyError):
                continue
        if connect is None:
            return
        client = KazooClient(hosts=connect)
        client.start(timeout=30)
        try:
            while not self.done.wait(0.1):
                try:
                    children = tuple(sorted(map(named, client.get_children(f"/consumers/{GROUP}/ids"))))
                except NoNodeError:
                    children = ()
                except Exception:  # noqa: BLE001 - ZooKeeper stopping at the end of the run
                    break
                self.samples.append((time.monotonic_ns(), children))
        finally:
            client.stop()
            client.close()


def member_id(backend: str, name: str) -> str:
    return f"{GROUP}_{name}" if backend == "legacy" else name


@pytest.mark.zk
@pytest.mark.broker
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["legacy", "classic"])
def test_one_member_of_a_shared_host_crashed_by_emulation(tmp_path, backend):
    path = tmp_path / "scenario.toml"
    path.write_text(SCENARIO)
    run_dir = (tmp_path / "run").resolve()
    sampler = IdsSampler(run_dir)
    if backend == "legacy":
        sampler.start()
    try:
        result = runner.run(load(path), runner.RunOptions(backend=backend, run_dir=run_dir, progress=False))
    finally:
        sampler.done.set()
        if sampler.is_alive():
            sampler.join(30)
    assert result.status == "completed", result.reason
    assert processes_with_marker(str(run_dir)) == [], "a child of the run survived it"
    lock = json.loads(RunFolder(run_dir).lock.read_text())
    assert lock["hosts"] == {"h000": ["h000-0", "h000-1"], "h001": ["h001-0", "h001-1"]}
    assert sorted(lock["proxies"]) == ["h000-1", "h001-0", "h001-1"], "each member has proxies of its own"

    crashed, partner = member_id(backend, "h000-1"), member_id(backend, "h000-0")
    linked, neighbour = member_id(backend, "h001-0"), member_id(backend, "h001-1")
    runner_events = list(read_events(RunFolder(run_dir).events / "runner.jsonl"))
    teardown_ns = lock_teardown_ns(runner_events)
    faults = {(event["type"], event["fault_id"]): event for event in runner_events
              if event["type"] in ("fault_started", "fault_stopped")}
    assert {key: (event["kind"], event["targets"], event["member_ids"], event["emulated"])
            for key, event in faults.items()} == {
        ("fault_started", "f001"): ("crash", ["h000-1"], [crashed], True),
        ("fault_stopped", "f001"): ("crash", ["h000-1"], [crashed], True),
        ("fault_started", "f002"): ("partition", ["h001-0"], [linked], False),
        ("fault_stopped", "f002"): ("partition", ["h001-0"], [linked], False),
        ("fault_started", "f003"): ("partition", ["h001-1"], [neighbour], False),
        ("fault_stopped", "f003"): ("partition", ["h001-1"], [neighbour], False),
        ("fault_started", "f004"): ("restart", ["h000-1"], [crashed], True),
        ("fault_stopped", "f004"): ("restart", ["h000-1"], [crashed], True),
        ("fault_started", "f005"): ("pause", ["h001-1"], [neighbour], True),
        ("fault_stopped", "f005"): ("pause", ["h001-1"], [neighbour], True),
        ("fault_started", "f006"): ("leave", ["h000-0"], [partner], False),
        ("fault_stopped", "f006"): ("leave", ["h000-0"], [partner], False),
    }
    assert faults[("fault_stopped", "f001")]["healed_by"] == "f004", "the restart ended the crash"
    crash_ns = faults[("fault_started", "f001")]["ts_ns"]
    dropped_ns = faults[("fault_stopped", "f001")]["observed_ts_ns"]   # the host's acknowledgment
    restart_ns = faults[("fault_started", "f004")]["ts_ns"]
    assert dropped_ns is not None and crash_ns <= dropped_ns < restart_ns
    link_start, link_stop = faults[("fault_started", "f002")]["ts_ns"], faults[("fault_stopped", "f002")]["ts_ns"]

    events = list(read_events(RunFolder(run_dir).events))
    late = [event for event in events if event["member"] == crashed and dropped_ns < event["ts_ns"] < restart_ns]
    assert late == [], f"the crashed member kept writing: {late[:3]}"
    consumed = [event for event in events if event["member"] == partner and event["type"] == "records_consumed"
                and dropped_ns + 6_000_000_000 < event["ts_ns"] < restart_ns]
    assert consumed, "the other member of the crashed member's process kept consuming"

    # The group rebalanced without the crashed member: before its restart the survivors own everything.
    owned: dict[str, set[str]] = {}
    rebalanced = False
    for event in events:
        if event["ts_ns"] >= restart_ns or event["member"] not in (partner, linked, neighbour):
            continue
        if event["type"] == "partitions_assigned":
            owned.setdefault(event["member"], set()).update(event["partitions"])
        elif event["type"] in ("partitions_revoked", "partitions_lost"):
            owned.setdefault(event["member"], set()).difference_update(event["partitions"])
        elif event["type"] == "rebalance_completed" and event["ts_ns"] > dropped_ns:
            rebalanced = True
    assert rebalanced
    assert set().union(*owned.values()) == {f"t0-{index}" for index in range(6)}, owned

    # Each link fault reached only its member. Data: the black-holed member consumed nothing (records
    # fetched before it are handed out within a second); on legacy the coord-faulted one in the same
    # process went on consuming.
    def consumed_in_window(member: str) -> int:
        return sum(event["count"] for event in events if event["type"] == "records_consumed"
                   and event["member"] == member and link_start + 1_000_000_000 < event["ts_ns"] < link_stop)

    assert consumed_in_window(neighbour) == 0, "records passed the data black hole"
    # Both keep fetching while cut off from coordination (classic commits asynchronously, as Kafka's consumer does).
    assert consumed_in_window(linked) > 0, "a member cut off from its coordination service keeps fetching"
    if backend == "legacy":
        suspended = {event["member"] for event in events if event["type"] == "session_state"
                     and event.get("state") == "SUSPENDED" and link_start < event["ts_ns"] < link_stop}
        assert suspended == {linked}, suspended
    else:
        def beats(member: str) -> list[int]:
            return [event["ts_ns"] for event in events if event["type"] == "coordination_request"
                    and event.get("op") == "Heartbeat" and event["member"] == member
                    and event.get("error") != "NETWORK_EXCEPTION"   # answered: it reached the coordinator
                    and link_start + 1_000_000_000 < event["ts_ns"] < link_stop]

        assert beats(linked) == [], "heartbeats passed the black hole"
        assert beats(neighbour), "the other member of the same process kept its heartbeats"

    # The restarted member came back under its name, in the same process, and was given partitions.
    restarted = [event for event in events if event["member"] == crashed and event["ts_ns"] > restart_ns]
    assert [event["type"] for event in restarted][:1] == ["member_started"]
    assert any(event["type"] == "partitions_assigned" for event in restarted)
    stopped = [event["member"] for event in events if event["type"] == "member_stopped"]
    assert sorted(stopped) == sorted([partner, linked, neighbour, crashed]), \
        "each member stopped once: the crashed instance never said goodbye, its successor did"

    # The paused member was not polled while paused.
    pause = faults[("fault_stopped", "f005")]
    paused_from, paused_to = pause["observed_ts_ns"], pause["healed_ts_ns"]
    assert paused_from is not None and paused_to is not None and paused_from < paused_to
    assert not [event for event in events if event["member"] == neighbour and event["type"] == "records_consumed"
                and paused_from < event["ts_ns"] < paused_to]

    # The leave closed only h000-0, before the teardown; its host process ran on.
    [left] = [event for event in events if event["type"] == "member_stopped" and event["member"] == partner]
    assert faults[("fault_started", "f006")]["ts_ns"] < left["ts_ns"] < teardown_ns
    assert any(event["member"] == crashed and event["ts_ns"] > left["ts_ns"] for event in events)

    if backend == "legacy":
        # The crashed member's ephemeral node outlived the crash (no closeSession reached the server),
        # then went when its session expired.
        before = [ids for ts, ids in sampler.samples if ts < crash_ns]
        after = [ids for ts, ids in sampler.samples if dropped_ns < ts < restart_ns]
        assert before and crashed in before[-1], before[-1:]
        assert after and crashed in after[0], "the session was closed at once, not left to expire"
        assert crashed not in after[-1] and partner in after[-1], after[-1]


def lock_teardown_ns(runner_events: list[dict]) -> int:
    """Revocations at teardown (the clean leave) do not count for "what the group settled on"."""
    return next(event["ts_ns"] for event in runner_events
                if event["type"] == "phase" and event["name"] == "teardown")


def test_the_member_command_checks_per_member_addresses():
    from typer.testing import CliRunner

    from experiments.cli.app import app

    def run(*args: str):
        return CliRunner().invoke(app, ["member", "--group", "g", "--topic", "t", *args])

    wrong = run("--backend", "legacy", "--id", "h000", "--count", "3", "--zk", "a:1", "--zk", "b:2")
    assert wrong.exit_code == 2
    assert "--zk was given 2 times: give it once (shared by all members) or once per member (--count 3)" \
        in wrong.output
    single = run("--backend", "classic", "--id", "m000", "--bootstrap", "a:1", "--bootstrap", "b:2")
    assert single.exit_code == 2 and "--bootstrap was given 2 times" in single.output
    bad_fd = run("--backend", "classic", "--id", "m000", "--bootstrap", "a:1", "--control-fd", "987")
    assert bad_fd.exit_code == 2 and "--control-fd 987" in bad_fd.output


def test_the_member_command_takes_its_members_configs_as_one_json_file(tmp_path):
    from typer.testing import CliRunner

    from experiments.cli.app import app
    from rebalance.member import MemberConfig

    config = MemberConfig(group="g", topics=("t",), member_name="h000-0", bootstrap="a:1",
                          extra={"heartbeat.interval.ms": 500})
    assert MemberConfig.from_json(json.loads(json.dumps(config.to_json()))) == config
    assert MemberConfig.from_json({"group": "g", "topics": ["t"]}).session_timeout_ms == \
        MemberConfig(group="g", topics=("t",)).session_timeout_ms   # one default, the config type's

    def run(documents, *args: str):
        path = tmp_path / "members.json"
        path.write_text(json.dumps(documents))
        return CliRunner().invoke(app, ["member", "--backend", "classic", "--member-configs", str(path), *args])

    mixed = run([config.to_json()], "--group", "g")
    assert mixed.exit_code == 2 and "--member-configs replaces --group" in mixed.output
    typo = run([{**config.to_json(), "sesion_timeout_ms": 1}])
    assert typo.exit_code == 2 and "unknown member config field(s): sesion_timeout_ms" in typo.output
    unnamed = run([{**config.to_json(), "member_name": None}])
    assert unnamed.exit_code == 2 and "every member needs a name of its own" in unnamed.output
    no_address = run([{**config.to_json(), "bootstrap": None}])
    assert no_address.exit_code == 2 and "--bootstrap HOST:PORT is required for the classic backend" in no_address.output


@pytest.mark.zk
def test_the_host_control_channel_acts_on_single_members(zk, tmp_path):
    """Commands to one legacy host process of two members, watched from ZooKeeper: a crash leaves the
    member's session (and ids node) to the server, a leave removes it at once, bad commands are refused."""
    import asyncio
    import sys

    from experiments.faults.process import ChildProcess

    connect = zk.chroot()
    hosts, _, chroot = connect.partition("/")
    root = KazooClient(hosts=hosts)
    root.start(timeout=30)
    root.ensure_path("/" + chroot)
    root.stop()
    root.close()
    client = KazooClient(hosts=connect)
    client.start(timeout=30)
    events = tmp_path / "h000.jsonl"
    ids_path = "/consumers/g/ids"

    def ids() -> set[str]:
        try:
            return set(map(named, client.get_children(ids_path)))
        except NoNodeError:
            return set()

    async def wait_for(predicate, what: str) -> None:
        deadline = time.monotonic() + 60
        while not predicate():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.05)

    async def play() -> None:
        process = ChildProcess("h000", [
            sys.executable, "-m", "experiments.cli.app", "member", "--backend", "legacy", "--zk", connect,
            "--group", "g", "--topic", "t", "--id", "h000", "--count", "2", "--session-timeout-ms", "30000",
            "--events", str(events), "--run-id", "test"], log_path=tmp_path / "h000.log", control=True)
        await process.start()
        try:
            await wait_for(lambda: ids() == {"g_h000-0", "g_h000-1"}, "both members registered")
            crashed_ns = await process.command("crash", "h000-1")
            with pytest.raises(RuntimeError, match="cannot pause h000-1: it is crashed"):
                await process.command("pause", "h000-1")
            with pytest.raises(RuntimeError, match="no member 'nobody' in this process"):
                await process.command("crash", "nobody")
            with pytest.raises(RuntimeError, match="unknown op 'explode'"):
                await process.command("explode", "h000-0")
            await process.command("pause", "h000-0")
            with pytest.raises(RuntimeError, match="cannot pause h000-0: it is paused"):
                await process.command("pause", "h000-0")
            await process.command("resume", "h000-0")
            await process.command("leave", "h000-0")
            # The clean leave closed h000-0's session at once; h000-1's session was not closed (30 s).
            assert ids() == {"g_h000-1"}
            assert process.running, "the host process runs on"
        finally:
            await process.stop()
        written = list(read_events(events))
        assert not [event for event in written if event["member"] == "g_h000-1" and event["ts_ns"] > crashed_ns]
        assert [event["member"] for event in written if event["type"] == "member_stopped"] == ["g_h000-0"]

    try:
        asyncio.run(play())
    finally:
        client.stop()
        client.close()
