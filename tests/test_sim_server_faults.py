"""The server faults in the simulation, on the lab's own scenario files:

- d: the broker hosting the group's coordinator killed (3 brokers, a 9 s broker session, a 200 ms load, no
  fail-back within the run). The survivors declare it dead after the session, the group's partition moves and is
  loaded from the records the old coordinator wrote; the members look it up again and carry on without a
  rebalance; the dead broker's data partitions wait for their new leader;
- c: one ZooKeeper node isolated: the classic and KIP-848 brokers never use ZooKeeper, so nothing happens.

Each replays from its seed; what is not played is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.folders.run_folder import RunFolder
from experiments.scenario import loads
from experiments.sim.brokers import REFUSED, Cluster
from experiments.sim.kernel import Simulation
from experiments.sim.play import simulate
from experiments.sim.playable import NotSimulated
from modern.common import errors
from rebalance import heartbeat_kinds
from rebalance.events import read_events
from rebalance.javahash import coordinator_partition

SCENARIOS = Path(__file__).resolve().parent.parent / "experiments" / "scenarios"
GROUP_APIS = ("JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit", "OffsetFetch", heartbeat_kinds.API)
NO_COORDINATOR = ("NETWORK_EXCEPTION", "NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS")
SESSION_S, LOAD_S, PROBE_S = 9.0, 0.2, 0.2


def _play(tmp_path: Path, name: str, *, backend: str = "classic", records: bool = True, folder: str | None = None,
          seed: int | None = None) -> RunFolder:
    text = (SCENARIOS / f"{name}.toml").read_text()
    scenario = loads(text, source=f"{name}.toml", overrides=[f'backends=["{backend}"]'])
    return simulate(scenario, backend, tmp_path / (folder or f"{name}-{backend}"), records=records, seed=seed)


def _events(folder: RunFolder) -> list[dict]:
    return sorted((event for path in folder.event_files() for event in read_events(path)),
                  key=lambda event: (event["ts_ns"], event.get("process", "")))


def _kill(events: list[dict]) -> tuple[dict, int]:
    started = next(e for e in events if e["type"] == "fault_started" and e["action"] == "coordinator_kill")
    stopped = next(e for e in events if e["type"] == "fault_stopped" and e["fault_id"] == started["fault_id"])
    return started, stopped["observed_ts_ns"]


def _timeline_end(events: list[dict]) -> int:
    """The timeline's end (the runner's heal): the members' teardown after it rebalances as they leave one by one."""
    return next(e["ts_ns"] for e in events if e["type"] == "phase" and e["name"] == "heal")


def _gaps(events: list[dict], kill_ns: int) -> dict[str, float]:
    """Each member's time without a coordinator, as experiments.summary.coordinator_gaps defines it: from the kill
    seen to its first group request a coordinator answered."""
    gaps = {}
    for event in events:
        if event["type"] == "coordination_request" and event["ts_ns"] > kill_ns and event["op"] in GROUP_APIS \
                and event.get("error") not in NO_COORDINATOR and event["member"] not in gaps:
            gaps[event["member"]] = (event["ts_ns"] - kill_ns) / 1e9
    return gaps


@pytest.mark.parametrize("backend", ["classic", "kip848"])
def test_the_coordinator_moves_after_the_broker_session_and_the_load_and_the_members_follow_it(tmp_path, backend):
    events = _events(_play(tmp_path, "split-brain-d", backend=backend))
    started, kill_ns = _kill(events)
    dead = int(started["target"].rsplit("-", 1)[1])
    assert dead == coordinator_partition("split-d") % 3, "the broker leading the group's partition"
    loaded = [e for e in events if e["type"] == "coordinator_event" and e.get("event") == "loaded"]
    assert len(loaded) == 1 and loaded[0]["node"] != dead
    moved_s = (loaded[0]["ts_ns"] - kill_ns) / 1e9
    assert SESSION_S - PROBE_S + LOAD_S <= moved_s <= SESSION_S + LOAD_S + 0.01, "the session, then the load"
    assert loaded[0]["members"] == 3, "the group replayed with its members from the old coordinator's records"
    gaps = _gaps(events, kill_ns)
    assert len(gaps) == 3
    assert all(moved_s - LOAD_S <= gap <= moved_s + 1.5 for gap in gaps.values()), gaps
    after = [e for e in events if e["type"] == "coordination_request" and kill_ns < e["ts_ns"]]
    assert {"NETWORK_EXCEPTION"} <= {e.get("error") for e in after}, "the dead broker refuses the connections"
    lookups = [e for e in after if e["op"] == "FindCoordinator" and e["ts_ns"] < kill_ns + max(gaps.values()) * 1e9]
    assert len(lookups) >= 3 * 5, "each member looks the coordinator up again and again while it is gone"
    assert not any(e["type"] in ("rebalance_started", "partitions_lost") for e in events
                   if kill_ns < e["ts_ns"] < _timeline_end(events)), "the group lives on at its new coordinator"


def test_a_member_that_meets_the_loading_coordinator_backs_off_and_tries_the_same_broker(tmp_path):
    """Over a few seeds some KIP-848 heartbeat reaches the new coordinator while it loads the group: answered
    COORDINATOR_LOAD_IN_PROGRESS, the member tries the same broker again after its backoff, without a lookup."""
    met = 0
    for seed in range(1, 7):
        events = _events(_play(tmp_path, "split-brain-d", backend="kip848", folder=f"s{seed}", seed=seed))
        beats = [e for e in events if e["type"] == "coordination_request"
                 and e["op"] in (heartbeat_kinds.API, "FindCoordinator")]
        for index, event in enumerate(beats):
            if event["op"] == heartbeat_kinds.API and event.get("error") == "COORDINATOR_LOAD_IN_PROGRESS":
                met += 1
                following = next(e for e in beats[index + 1:] if e["member"] == event["member"])
                assert following["op"] == heartbeat_kinds.API, "the same broker again: no lookup"
                assert following.get("error") in (None, "COORDINATOR_LOAD_IN_PROGRESS")
                assert (following["ts_ns"] - event["ts_ns"]) / 1e6 >= 0.8 * 100, "after the backoff"
    assert met


@pytest.mark.parametrize("backend", ["classic", "kip848"])
def test_the_dead_brokers_partitions_wait_for_their_new_leader_and_nothing_breaks(tmp_path, backend):
    events = _events(_play(tmp_path, "split-brain-d", backend=backend))
    started, kill_ns = _kill(events)
    dead = int(started["target"].rsplit("-", 1)[1])
    worst: dict[bool, float] = {True: 0.0, False: 0.0}
    handled: set[tuple[int, int]] = set()
    for event in (e for e in events if e["type"] == "records_consumed"):
        for offset, produced in enumerate(event["produce_ts_ms"], start=event["first_offset"]):
            key = (event["partition"], offset)
            assert key not in handled, "no record handled twice: no rebalance, no offset moved back"
            handled.add(key)
            led = event["partition"] % 3 == dead
            worst[led] = max(worst[led], event["ts_ms"] - produced)
    assert worst[False] < 1_000, "the survivors' partitions flow on"
    assert SESSION_S * 1000 < worst[True] < 20_000, "the dead broker's wait for the move and the producer's retry"
    produced = sum(e["count"] for e in events if e["type"] == "records_produced")
    assert len(handled) == produced, "every record produced is handled"
    failed = [e for e in events if e["type"] == "commit_failed" and e["error"] in
              ("UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION", "STALE_MEMBER_EPOCH", "FENCED_MEMBER_EPOCH")]
    assert not failed, "no commit fenced"
    stored: dict[str, int] = {}
    for event in (e for e in events if e["type"] == "offsets_committed"):
        for partition, offset in event["offsets"].items():
            assert offset >= stored.get(partition, -1), "the committed offsets never move back"
            stored[partition] = offset


def test_a_server_fault_seed_replays_to_the_same_events(tmp_path):
    first = _play(tmp_path, "split-brain-d", folder="one", seed=5)
    again = _play(tmp_path, "split-brain-d", folder="two", seed=5)
    other = _play(tmp_path, "split-brain-d", folder="three", seed=6)
    for path in first.event_files():
        assert path.read_bytes() == (again.events / path.name).read_bytes(), path.name
    assert any(path.read_bytes() != (other.events / path.name).read_bytes() for path in first.event_files()
               if (other.events / path.name).exists())


@pytest.mark.parametrize("backend", ["classic", "kip848"])
def test_a_zookeeper_isolation_leaves_the_coordinator_protocols_untouched(tmp_path, backend):
    events = _events(_play(tmp_path, "split-brain-c", backend=backend))
    started = next(e for e in events if e["type"] == "fault_started")
    stopped = next(e for e in events if e["type"] == "fault_stopped" and e["fault_id"] == started["fault_id"])
    assert started["action"] == "zk_isolate" and (stopped["ts_ns"] - started["ts_ns"]) / 1e9 == pytest.approx(20)
    assert started["member_ids"] == [], "a server fault names no member"
    assert not any(e["type"] in ("rebalance_started", "partitions_lost") or e.get("error") in NO_COORDINATOR
                   for e in events if started["ts_ns"] < e["ts_ns"] < _timeline_end(events))


@pytest.mark.parametrize(("node", "seed"), [(0, 1), (2, 1)])
def test_a_legacy_session_on_the_isolated_node_moves_to_another_node_without_a_rebalance(tmp_path, node, seed):
    """Node 0 is a follower: only the members whose session sits there are dropped; node 2 leads the ensemble:
    everyone is dropped and waits for the election."""
    from experiments.sim.server_faults import QUORUM_LOST_MS, ZkEnsemble

    text = (SCENARIOS / "split-brain-c.toml").read_text().replace('node = "random"', f"node = {node}")
    scenario = loads(text, source="split-brain-c.toml", overrides=['backends=["legacy"]'])
    folder = simulate(scenario, "legacy", tmp_path / "c", seed=seed)
    events = _events(folder)
    started = next(e for e in events if e["type"] == "fault_started")
    assert started["target"] == f"zk-{node}"
    ensemble = ZkEnsemble(None, 3, seed)
    leader = node == ensemble.leader
    hit = {member for member in folder.record().member_ids.values() if leader or ensemble.home(member) == node}
    states = [e for e in events if e["type"] == "session_state"]
    assert hit and {e["member"] for e in states} == hit
    assert leader or len(hit) < 4, "a follower cut off drops only its own clients"
    for member in hit:
        suspended, connected = (next(e for e in states if e["member"] == member and e["state"] == state)
                                for state in ("SUSPENDED", "CONNECTED"))
        assert (suspended["ts_ns"] - started["ts_ns"]) / 1e6 == pytest.approx(QUORUM_LOST_MS)
        assert (connected["ts_ns"] - started["ts_ns"]) / 1e6 == pytest.approx(ZkEnsemble.outage_ms(leader))
        assert (connected["ts_ns"] - started["ts_ns"]) / 1e6 < 6_000, "within the session"
    assert not any(e["type"] in ("rebalance_started", "partitions_lost") for e in events
                   if started["ts_ns"] < e["ts_ns"] < _timeline_end(events)), "the same session: no rebalance"
    rereads = [e for e in events if e["type"] == "coordination_request" and e["member"] in hit
               and e["ts_ns"] > started["ts_ns"] and e["op"] in ("get_children", "get")]
    assert len(rereads) >= 2 * len(hit), "each reconnected member reads its watched paths again"


def test_legacy_lives_through_the_coordinators_broker_in_zookeeper(tmp_path):
    events = _events(_play(tmp_path, "split-brain-d", backend="legacy", records=False))
    started, _ = _kill(events)
    assert not any(e["type"] in ("rebalance_started", "partitions_lost") for e in events
                   if started["ts_ns"] < e["ts_ns"] < _timeline_end(events)), "the group lives in ZooKeeper"
    assert sum(e["type"] == "rebalance_started" for e in events) >= 3, "(it did rebalance to start)"


def test_the_cluster_declares_a_dead_broker_after_the_session_and_loads_the_group_after_the_load_delay():
    sim = Simulation(3)
    made: list[tuple[int, bool]] = []

    class Coordinator:
        def __init__(self, node: int, loaded: bool) -> None:
            self.node, self.loaded = node, loaded
            made.append((node, loaded))

        def stop(self, *, unload: bool) -> None:
            pass

    cluster = Cluster(sim, brokers=3, group="split-d", make_coordinator=lambda node, log, loaded: Coordinator(node, loaded),
                      session_timeout_ms=9_000, load_delay_ms=200, fail_back_delay_ms=300_000)
    first = cluster.leader_of_group()
    survivors = sorted({0, 1, 2} - {first})
    assert made == [(first, False)] and cluster.find_coordinator(survivors[0]) == (errors.NONE, first)

    def ask(broker: int):
        answers = []
        cluster.serve(broker, answers.append, lambda coordinator, reply: reply(coordinator.node), lambda error: error)
        return answers[0]

    sim.run_until(1_000)
    cluster.kill(first)
    assert ask(first) is REFUSED and cluster.find_coordinator(first) is REFUSED
    seen = []   # every 10 ms: (ms since the kill, what each survivor's FindCoordinator names, each one's answer)
    while sim.now_ms < 1_000 + 10_000:
        seen.append((sim.now_ms - 1_000, [cluster.find_coordinator(s)[1] for s in survivors],
                     [ask(s) for s in survivors]))
        sim.run_until(sim.now_ms + 10)
    quiet = [row for row in seen if row[0] < 9_000 - 200]
    assert all(row[1] == [first, first] and row[2] == [errors.NOT_COORDINATOR] * 2 for row in quiet), \
        "nobody declares it dead before the session is over"
    successor = seen[-1][1][0]
    assert successor in survivors and seen[-1][1] == [successor, successor]
    index = survivors.index(successor)
    served = next(row[0] for row in seen if row[2][index] == successor)
    loading = [row[0] for row in seen if row[2][index] is errors.COORDINATOR_LOAD_IN_PROGRESS]
    assert loading and served - loading[0] == pytest.approx(200, abs=10), "the load delay"
    assert 9_000 - 200 + 200 <= served <= 9_000 + 200 + 10
    assert seen[-1][2][1 - index] is errors.NOT_COORDINATOR and made[-1] == (successor, True)
    cluster.restart(first)
    sim.run_until(sim.now_ms + 1_000)
    assert cluster.find_coordinator(first) == (errors.NONE, successor), "held back: no fail-back within the run"
    assert ask(first) is errors.NOT_COORDINATOR and len(made) == 2


@pytest.mark.parametrize(("name", "backend", "sets", "options", "message"), [
    ("split-brain-c", "legacy", ["group.session_timeout_ms=2000"], {},
     "zk_isolate on legacy: a session of 2000 ms would expire before its member reconnects"),
    ("split-brain-d", "kip848", [], {"warm_start": True}, "a warm start with a server fault is not simulated"),
    ("split-brain-d", "legacy", ["cluster.fail_back_delay_ms=1000"], {"records": True},
     "records on legacy: line 51: the restarted broker would lead its partitions again within the run"),
    ("split-brain-d", "classic", ["cluster.fail_back_delay_ms=1000"], {},
     "the restarted broker would lead its partitions again within the run"),
])
def test_what_is_not_simulated_is_refused_by_name(tmp_path, name, backend, sets, options, message):
    scenario = loads((SCENARIOS / f"{name}.toml").read_text(), source=f"{name}.toml",
                     overrides=[f'backends=["{backend}"]', *sets])
    with pytest.raises(NotSimulated, match=message):
        simulate(scenario, backend, tmp_path / "x", **options)
