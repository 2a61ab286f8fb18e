"""Records in the simulation (`--records`): the producer's records reach the members' applications, each
handled once for its service time and committed after its poll's batch (0.8: by its auto-commit thread); a seed
replays to the same events; the join's steps wait for the application's poll, so a member busy with its batch holds
the group's rebalance."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from experiments.folders.run_folder import RunFolder
from experiments.scenario import loads
from experiments.sim.play import simulate
from experiments.sim.playable import NotSimulated
from experiments.sim.records import PRODUCER_START_MS
from rebalance.events import read_events

SCENARIO = """\
name = "records"
seed = 7
duration = 12
settle = 4

[[topics]]
name = "t0"
partitions = 8

[producer]
rate = {rate}

[workload]
service = "fixed"
service_ms = {service_ms}
commit = "batch"
max_poll_records = {max_poll}

[group]
members = 4
strategy = "{strategy}"
session_timeout_ms = 10000

[[timeline]]
at = 4
action = "join"

[[timeline]]
at = 8
action = "leave"
member = "last"
"""


def _play(tmp_path: Path, *, strategy: str = "range", rate: int = 100, service_ms: float = 5,
          max_poll: int = 500, records: bool = True, name: str = "run", seed: int | None = None,
          backend: str = "classic") -> RunFolder:
    scenario = loads(SCENARIO.format(rate=rate, service_ms=service_ms, max_poll=max_poll, strategy=strategy),
                     source="records.toml", overrides=[f'backends=["{backend}"]'])
    return simulate(scenario, backend, tmp_path / name, seed=seed, records=records)


def _events(folder: RunFolder) -> list[dict]:
    return sorted((event for path in folder.event_files() for event in read_events(path)),
                  key=lambda event: (event["ts_ns"], event.get("process", "")))


def test_the_first_record_waits_for_the_producers_metadata_as_the_real_producer_does(tmp_path):
    """The real producer's first send blocks about 112 ms for the topic's metadata (kafka-python), so in a run where
    nothing else happens its worst latency is its first record's (split brain c's 117-124 ms in every generation)."""
    from experiments.sim.records import METADATA_WAIT_MS

    events = _events(_play(tmp_path, service_ms=1))
    latencies = sorted(((done - made, made) for e in events if e["type"] == "records_processed"
                        for made, done in zip(e["produce_ts_ms"], e["processed_ts_ms"], strict=True)),
                       key=lambda pair: pair[1])
    first, rest = latencies[0][0], [latency for latency, _ in latencies[1:]]
    assert METADATA_WAIT_MS <= first < METADATA_WAIT_MS + 10
    assert sorted(rest)[len(rest) // 2] < 10, "the records after it go out and are handled at once"


@pytest.mark.parametrize(("backend", "strategy"), [("classic", "range"), ("classic", "cooperative-sticky"),
                                                   ("kip848", "uniform"), ("legacy", "range"),
                                                   ("legacy", "roundrobin")])
def test_every_produced_record_is_handled_once_and_committed_in_order(tmp_path, backend, strategy):
    events = _events(_play(tmp_path, strategy=strategy, backend=backend))
    produced = {(e["partition"], offset) for e in events if e["type"] == "records_produced"
                for offset in range(e["first_offset"], e["last_offset"] + 1)}
    handled = Counter((e["partition"], offset) for e in events if e["type"] == "records_processed"
                      for offset in range(e["first_offset"], e["last_offset"] + 1))
    # 100 a second from the producer's first send, its process started with the timeline, to the timeline's end
    assert len(produced) == pytest.approx((12_000 - PRODUCER_START_MS) * 100 / 1000, abs=1)
    assert set(handled) == produced
    assert set(handled.values()) == {1}, "a join and a clean leave duplicate nothing when every batch is committed"
    committed: dict[str, int] = {}
    for event in (e for e in events if e["type"] == "offsets_committed"):
        for partition, offset in event["offsets"].items():
            assert offset > committed.get(partition, -1), "a partition's committed offset only moves forward"
            committed[partition] = offset
    assert len(committed) == 8, "every partition committed"
    for event in (e for e in events if e["type"] == "records_processed"):
        assert all(end - produced_at >= 5 for produced_at, end in zip(event["produce_ts_ms"], event["processed_ts_ms"],
                                                                      strict=True)), "each record takes its service time"


def test_a_seed_replays_to_the_same_events(tmp_path):
    first, again = _play(tmp_path, name="a"), _play(tmp_path, name="b")
    for path in first.event_files():
        assert path.read_bytes() == (again.events / path.name).read_bytes(), path.name


def test_a_member_busy_with_its_batch_holds_the_groups_rebalance(tmp_path):
    """Kafka 3.7 reads the JoinGroup's answer, assigns (the leader) and sends the SyncGroup on the application's
    thread, at its next poll. A cooperative member keeps its partitions, and its batch, while it rejoins: with
    batches of 2 s (20 records of 100 ms) the time from a member's JoinGroup answer to its SyncGroup answer (which
    waits for the leader's) is up to a batch, against a round trip when nobody polls. (An eager member has
    revoked everything before its JoinGroup and waits for the answer inside poll.)"""
    def join_to_sync_ms(folder: RunFolder) -> list[float]:
        events = _events(folder)
        join_at = next(e["ts_ns"] for e in events if e["type"] == "phase" and str(e["name"]).startswith("join-"))
        joined: dict[str, int] = {}
        gaps = []
        for event in (e for e in events if e["type"] == "coordination_request" and e["ts_ns"] > join_at):
            if event["op"] == "JoinGroup" and not event["error"]:
                joined[event["member"]] = event["ts_ns"]
            elif event["op"] == "SyncGroup" and event["member"] in joined:
                gaps.append((event["ts_ns"] - joined.pop(event["member"])) / 1e6)
        return gaps

    busy = join_to_sync_ms(_play(tmp_path, strategy="cooperative-sticky", rate=400, service_ms=100, max_poll=20,
                                 name="busy"))
    idle = join_to_sync_ms(_play(tmp_path, strategy="cooperative-sticky", rate=400, service_ms=100, max_poll=20,
                                 records=False, name="idle"))
    assert idle and max(idle) < 5, idle
    assert max(busy) > 200, busy


def test_a_cooperative_member_busy_through_two_rebalances_keeps_its_generation_and_its_commits(tmp_path):
    """A busy cooperative member's SyncGroup can meet the group's next rebalance (REBALANCE_IN_PROGRESS). As Kafka
    3.7's, it then prepares a rebalance from its new JoinGroup on: no heartbeat of its old generation goes out to be
    fenced (ILLEGAL_GENERATION, its partitions lost and handled again by their new owners). And the SyncGroup that
    takes partitions away makes it stable before onPartitionsRevoked, where Spring commits what it kept for them."""
    events = _events(_play(tmp_path, strategy="cooperative-sticky", rate=400, service_ms=100, max_poll=20))
    requests = [e for e in events if e["type"] == "coordination_request"]
    assert any(e["op"] == "SyncGroup" and e["error"] == "REBALANCE_IN_PROGRESS" for e in requests)
    assert not [e for e in requests if e["op"] == "Heartbeat" and e["error"] == "ILLEGAL_GENERATION"]
    assert not [e for e in events if e["type"] == "partitions_lost"]
    revoked_at = {(e["member"], e["ts_ns"]) for e in events if e["type"] == "partitions_revoked"}
    assert not [e for e in events if e["type"] == "commit_failed" and (e["member"], e["ts_ns"]) in revoked_at]
    handled = Counter((e["partition"], offset) for e in events if e["type"] == "records_processed"
                      for offset in range(e["first_offset"], e["last_offset"] + 1))
    assert set(handled.values()) == {1}


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_a_classic_member_asks_committed_offsets_only_for_partitions_new_to_it(tmp_path, strategy):
    """Kafka 3.7's client fetches committed offsets for the partitions a join gave it that it had no position for;
    a cooperative member that keeps what it had (every follow-up round, and most members in every round) sends no
    OffsetFetch at all, as the lab's real client sends none for an empty set. One OffsetFetch per partitions_assigned."""
    events = _events(_play(tmp_path, strategy=strategy, rate=400, service_ms=20, max_poll=20))
    fetches = Counter(e["member"] for e in events if e["type"] == "coordination_request" and e["op"] == "OffsetFetch")
    assigned = Counter(e["member"] for e in events if e["type"] == "partitions_assigned" and e["partitions"])
    rounds = Counter(e["member"] for e in events if e["type"] == "rebalance_completed")
    assert fetches == assigned
    if strategy == "cooperative-sticky":
        assert sum(rounds.values()) > sum(fetches.values()), "some rounds gave a member nothing new"


def test_a_kip848_warm_up_ends_with_the_target_assignment_reconciled(tmp_path):
    """The warm-up waits for a stable group. On KIP-848 the first member takes every partition and the others'
    first heartbeats bring nothing until it has given some up, at its next heartbeat: stable only once the
    coordinator has the group Stable, so the timeline begins with every member holding its share."""
    events = _events(_play(tmp_path, strategy="uniform", backend="kip848"))
    owned: dict[str, set] = {}
    for event in events:
        if event["type"] == "phase" and event.get("name") == "timeline":
            break
        if event["type"] == "partitions_assigned":
            owned.setdefault(event["member"], set()).update(event["partitions"])
        elif event["type"] in ("partitions_revoked", "partitions_lost"):
            owned.setdefault(event["member"], set()).difference_update(event["partitions"])
    assert sorted(len(partitions) for partitions in owned.values()) == [2, 2, 2, 2], owned


def _builtin(name: str, backend: str, *overrides: str):
    source = Path(__file__).resolve().parent.parent / "experiments" / "scenarios" / f"{name}.toml"
    return loads(source.read_text(), source=source.name, overrides=[f'backends=["{backend}"]', *overrides])


def test_records_are_refused_by_name_where_they_are_not_simulated_yet(tmp_path):
    scenario = _builtin("split-brain-d", "legacy", "cluster.fail_back_delay_ms=1000")
    with pytest.raises(NotSimulated, match="records on legacy: line 51: the restarted broker would lead its "
                                           "partitions again within the run"):
        simulate(scenario, "legacy", tmp_path / "k", records=True)
    simulate(scenario, "legacy", tmp_path / "without", records=False)   # without records it plays


def test_a_dead_brokers_partitions_give_a_legacy_member_nothing_until_they_move(tmp_path):
    """Split brain d on 0.8 with records: the group lives in ZooKeeper and does not notice, but the partitions the
    dead broker led take and give no record until a survivor declares it dead (the broker session, 9 s) and leads
    them; their records are then handled late, once each, and no partition changes owner."""
    events = _events(simulate(_builtin("split-brain-d", "legacy"), "legacy", tmp_path / "run", records=True))
    killed = next(e["ts_ns"] for e in events if e["type"] == "fault_started")
    late = [e for e in events if e["type"] == "records_consumed" and e["ts_ns"] > killed
            and max(e["ts_ms"] - stamp for stamp in e["produce_ts_ms"]) > 9_000]
    assert late and len({e["partition"] for e in late}) == 2, "the two partitions the dead broker led"
    assert not [e for e in events if e["type"] in ("partitions_revoked", "partitions_lost") and killed < e["ts_ns"]
                and e["ts_ns"] < killed + 20_000_000_000]
    handled: Counter = Counter()
    for event in events:
        if event["type"] == "records_consumed":
            handled.update((event["partition"], offset) for offset in range(event["first_offset"],
                                                                              event["last_offset"] + 1))
    assert max(handled.values()) == 1


def test_a_legacy_member_whose_zookeeper_node_is_cut_off_reconnects_and_loses_no_record(tmp_path):
    """Split brain c on 0.8 with records: the members of the cut-off node reconnect to another within their session;
    meanwhile they go on handling, and their auto-commit's set, held, goes through on the same session: no record
    handled twice, none moved back, nothing lost."""
    events = _events(simulate(_builtin("split-brain-c", "legacy"), "legacy", tmp_path / "run", records=True,
                              seed=6))   # a seed whose three members all sit on the node cut off
    assert sum(e["type"] == "session_state" and e["state"] == "SUSPENDED" for e in events) == 3
    started, healed = (e["ts_ns"] for e in events if e["type"] in ("fault_started", "fault_stopped"))
    assert not [e for e in events if e["type"] in ("partitions_lost", "partitions_revoked")
                and started < e["ts_ns"] < healed + 5_000_000_000], "no rebalance: every session lived on"
    handled: Counter = Counter()
    for event in events:
        if event["type"] == "records_consumed":
            handled.update((event["partition"], offset) for offset in range(event["first_offset"],
                                                                              event["last_offset"] + 1))
    produced = sum(e["last_offset"] - e["first_offset"] + 1 for e in events if e["type"] == "records_produced")
    assert len(handled) == produced and max(handled.values()) == 1
    stored: dict[str, int] = {}
    for event in events:
        if event["type"] == "offsets_committed":
            assert all(offset >= stored.get(tp, 0) for tp, offset in event["offsets"].items()), event
            stored.update(event["offsets"])


@pytest.mark.parametrize("scenario", ["split-brain-a", "split-brain-b"])
def test_a_split_legacy_member_hands_out_records_twice_and_its_blocked_commit_moves_offsets_back(tmp_path, scenario):
    """Split brain on 0.8 (a: the member's ZooKeeper link cut, b: its process paused, each for three sessions): the
    others take its partitions from its last commit before the split and handle them again; its auto-commit, blocked
    in a ZooKeeper set meanwhile, is retried in its new session and writes the positions it took when it began, below
    what the new owners have committed since."""
    events = _events(simulate(_builtin(scenario, "legacy"), "legacy", tmp_path / "run", records=True))
    started, stopped = (e["ts_ns"] for e in events if e["type"] in ("fault_started", "fault_stopped"))
    zombie = next(e for e in events if e["type"] == "fault_started")["member_ids"][0]
    lost_at = next(e["ts_ns"] for e in events if e["type"] == "partitions_lost" and e["member"] == zombie)
    handled: Counter = Counter()
    for event in events:
        if event["type"] == "records_consumed":
            handled.update((event["partition"], offset) for offset in range(event["first_offset"],
                                                                              event["last_offset"] + 1))
    twice = sum(count - 1 for count in handled.values() if count > 1)
    assert 500 < twice < 700, "about 19 s of the split member's two partitions at 33 records/s, handled twice"
    paused = scenario == "split-brain-b"
    during = [e for e in events if e["type"] == "records_consumed" and e["member"] == zombie
              and started < e["ts_ns"] < stopped]
    assert bool(during) is not paused, "a cut member goes on handling records; a paused one does not"
    stale = next(e for e in events if e["type"] == "offsets_committed" and e["member"] == zombie
                 and e["ts_ns"] > stopped)
    assert stale["ts_ns"] >= lost_at, "the blocked commit is written in the new session"
    stored = {}
    for event in events:
        if event["type"] == "offsets_committed" and event["ts_ns"] < stale["ts_ns"]:
            stored.update(event["offsets"])
    assert all(offset < stored[tp] for tp, offset in stale["offsets"].items()), (stale, stored)


def test_a_legacy_member_takes_one_record_at_a_time_and_commits_before_it_releases(tmp_path):
    """0.8's data path (legacy_zk/fetcher.py): the iterator hands out one record at a time, with no generation; at
    the join every member that owned partitions stops fetching and writes its consumed positions to ZooKeeper before
    it releases them, and the member that took a partition starts from what was written."""
    events = _events(_play(tmp_path, backend="legacy"))
    consumed = [e for e in events if e["type"] == "records_consumed"]
    assert consumed and all(e["count"] == 1 and "generation" not in e for e in consumed)
    join_at = next(e["ts_ns"] for e in events if e["type"] == "phase" and str(e["name"]).startswith("join-"))
    after = [e for e in events if join_at < e["ts_ns"] < join_at + 3_000_000_000]   # the leave comes 4 s after the join
    released = {e["member"]: e["ts_ns"] for e in reversed(after) if e["type"] == "partitions_revoked"}
    assert len(released) == 4, "the four members that owned partitions release them at the join"
    for member, at in released.items():
        assert any(e["type"] == "offsets_committed" and e["member"] == member and e["ts_ns"] <= at for e in after), member
    joiner_first: dict[str, dict] = {}
    for event in after:
        if event["type"] == "records_consumed" and event["member"] not in released:
            joiner_first.setdefault(f"{event['topic']}-{event['partition']}", event)
    assert joiner_first, "the joiner took partitions"
    for tp, first in joiner_first.items():
        written = [e["offsets"][tp] for e in events if e["type"] == "offsets_committed" and tp in e["offsets"]
                   and e["ts_ns"] <= first["ts_ns"]]
        assert first["first_offset"] == written[-1], f"{tp}: the joiner starts where the last owner committed"


def test_a_phase_cell_validates_when_the_simulated_median_lies_inside_the_real_range(tmp_path):
    """experiments.statistics.phase_validation on planted summaries: each scenario phase's three measures and the
    whole run are set beside the real runs of the same backend and strategy; the runner's phases are not."""
    import pandas as pd

    from experiments.statistics.phase_validation import phase_cells, phase_cells_markdown

    def simulated_run(name: str, lost: int) -> Path:
        run = RunFolder(tmp_path / name)
        run.summary.mkdir(parents=True)
        pd.DataFrame({"phase": ["warmup", "timeline", "steady", "scale-to-50", "teardown"],
                      "start_s": [0.0, 5.0, 5.0, 20.0, 40.0], "end_s": [5.0, 5.0, 20.0, 40.0, 41.0],
                      "records_lost": [9, 0, 0, lost, 9], "max_latency_ms": 100.0, "rebalance_ms": 50.0,
                      "double_ownership_s": 0.0}).to_parquet(run.summary_table("phases"))
        return run.path

    real = pd.DataFrame([{"scenario": "seed002", "backend": "classic", "strategy": "range", "sweep": "-",
                          "metric": metric, "value": value}
                         for metric, values in {"scale-to-50: records lost": (40, 60, 80), "warmup: records lost": (1, 2),
                                                "whole run: records lost": (0, 5), "steady: max latency (ms)": (90, 95)}.items()
                         for value in values])
    cells = {cell.metric: cell for cell in phase_cells(real, {("seed002", "classic", "range"): [
        simulated_run("a", 50), simulated_run("b", 70)]})}
    assert set(cells) == {"scale-to-50: records lost", "whole run: records lost", "steady: max latency (ms)"}
    assert cells["scale-to-50: records lost"].inside                 # median 60 inside [40-80]
    assert not cells["whole run: records lost"].inside               # 60 against [0-5]
    assert not cells["steady: max latency (ms)"].inside              # 100 against [90-95]
    table = phase_cells_markdown(list(cells.values()), source="seed002", seeds=2,
                                 unplayed={("seed002", "legacy", "range"): "records are not simulated for legacy"})
    assert "1 of 3 cells validate." in table and "60 [50-70], n = 2" in table
    assert "Not simulated: seed002 on legacy range (records are not simulated for legacy)." in table
    # a cell played without records (0.8's) is set beside the real runs on what it still measures only
    real.loc[len(real)] = ["seed002", "legacy", "range", "-", "scale-to-50: rebalancing (ms)", 40.0]
    real.loc[len(real)] = ["seed002", "legacy", "range", "-", "scale-to-50: records lost", 40.0]
    real.loc[len(real)] = ["seed002", "legacy", "range", "-", "double-ownership (s)", 0.0]
    recordless = {("seed002", "legacy", "range")}
    legacy = phase_cells(real, {("seed002", "legacy", "range"): [simulated_run("c", 0)]}, recordless)
    assert [cell.metric for cell in legacy] == ["scale-to-50: rebalancing (ms)", "double-ownership (s)"]
    assert "Without records: seed002 on legacy range" in phase_cells_markdown(legacy, source="seed002", seeds=1,
                                                                              recordless=recordless)


@pytest.mark.spark
def test_the_cell_validation_command_simulates_summarises_and_compares(tmp_path, spark):
    """`./lab sim-validate --cells DATA`: the data folder's classic cell simulated with records, summarised by Spark
    (the suite's session) and set beside the real runs; the table goes into the page's block named after the
    folder."""
    import pandas as pd
    from typer.testing import CliRunner

    from experiments.cli.app import app

    data = tmp_path / "data"
    data.mkdir()
    pd.DataFrame([{"run": f"herd-r{k}", "scenario": "herd", "backend": "classic", "strategy": "range", "sweep": "-",
                   "repetition": k, "seed": k, "commit": "x", "n": 4, "at_once": 1, "metric": metric, "value": value}
                  for k in range(3) for metric, value in (("stable: records lost", 0), ("whole run: records lost", 0),
                                                          ("stable: max latency (ms)", 10 + k))]).to_csv(
        data / "runs.csv", index=False)
    page = tmp_path / "page.md"
    page.write_text("<!-- validation-data:begin -->\nold\n<!-- validation-data:end -->\n")
    result = CliRunner().invoke(app, ["sim-validate", "--cells", str(data), "--seeds", "1", "--write", str(page),
                                      "--master", "local[2]", "--set", 'workload.commit="batch"'])
    assert result.exit_code == 0, result.output
    table = page.read_text()
    rows = {line.split(" | ")[3]: line for line in table.splitlines() if line.startswith("| herd | classic | range |")}
    assert set(rows) == {"stable: records lost", "whole run: records lost", "stable: max latency (ms)"}
    assert rows["stable: records lost"].endswith("| 0.0 [0.0-0.0], n = 3 | 0.0 [0.0-0.0], n = 1 | inside |")
    assert rows["stable: max latency (ms)"].endswith("| **outside** |"), "a few ms simulated against 10-12 real"
    assert "old" not in table and "of 3 cells validate." in table


@pytest.mark.parametrize("backend", ["classic", "kip848"])
def test_the_clients_auto_commit_commits_every_interval_and_before_giving_partitions_up(tmp_path, backend):
    """`commit = "auto"`: the client commits the positions every auto.commit.interval.ms (5 s) at a poll, without
    the application waiting; a member giving partitions up commits first, so nothing consumed twice but what a
    commit interval leaves open, and every produced record is consumed."""
    scenario = loads(SCENARIO.format(rate=100, service_ms=5, max_poll=500, strategy="range").replace(
        'commit = "batch"', 'commit = "auto"'), source="records.toml", overrides=[f'backends=["{backend}"]'])
    events = _events(simulate(scenario, backend, tmp_path / "auto", records=True))
    produced = {(e["partition"], offset) for e in events if e["type"] == "records_produced"
                for offset in range(e["first_offset"], e["last_offset"] + 1)}
    consumed = Counter((e["partition"], offset) for e in events if e["type"] == "records_consumed"
                       for offset in range(e["first_offset"], e["last_offset"] + 1))
    assert set(consumed) == produced
    commits = [e for e in events if e["type"] == "offsets_committed"]
    by_member: dict[str, list[int]] = {}
    for commit in commits:
        by_member.setdefault(commit["member"], []).append(commit["ts_ns"])
    owned: dict[str, set] = {}
    since: dict[str, int | None] = {}   # a member's last commit, or when it took partitions holding none
    gaps = []
    for event in events:
        member, kind = event["member"], event["type"]
        if kind == "partitions_assigned":
            if not owned.get(member):
                since[member] = event["ts_ns"]
            owned.setdefault(member, set()).update(event["partitions"])
        elif kind in ("partitions_revoked", "partitions_lost"):
            owned.setdefault(member, set()).difference_update(event["partitions"])
        elif kind == "offsets_committed":
            if since.get(member) is not None:
                gaps.append((event["ts_ns"] - since[member]) / 1e9)
            since[member] = event["ts_ns"]
        if kind != "offsets_committed" and not owned.get(member):
            since[member] = None
    assert gaps and max(gaps) < 5.6, "a commit at least every interval (and a poll) while the member owns partitions"
    for revoked in (e for e in events if e["type"] == "partitions_revoked" and e["partitions"]):
        assert any(0 <= (revoked["ts_ns"] - at) / 1e6 < 50 for at in by_member[revoked["member"]]), \
            "a member commits its positions just before it gives partitions up"
    stored: dict[str, int] = {}
    for commit in commits:
        for partition, offset in commit["offsets"].items():
            assert offset >= stored.get(partition, -1)
            stored[partition] = offset


def test_a_joining_kip848_members_poll_ends_at_the_joins_answer(tmp_path):
    """As the lab's client (modern.kip848.member._wait_idle, Kafka's pollForFetches with no heartbeat interval
    given yet): a joining member's idle poll ends at the join's answer, so its rebalance completes then, with
    nothing to take yet (the others give their partitions up at their own heartbeats first), not a poll wait
    later. Once in the group, an idle poll waits until the next heartbeat is due or the poll wait is over."""
    scenario = loads(SCENARIO.format(rate=100, service_ms=5, max_poll=500, strategy="uniform").replace(
        'member = "last"', "member = 0"), source="records.toml", overrides=['backends=["kip848"]'])
    events = _events(simulate(scenario, "kip848", tmp_path / "run", records=True))
    started = {event["member"]: event["ts_ns"] for event in events if event["type"] == "member_started"}
    joiner = max(started, key=started.get)
    mine = [event for event in events if event.get("member") == joiner]
    first_done = next(event for event in mine if event["type"] == "rebalance_completed")
    assert (first_done["ts_ns"] - started[joiner]) / 1e6 < 20, "the join's answer ends the joining poll's wait"
    assert first_done["assigned"] == []
    assert any(event["type"] == "partitions_assigned" for event in mine), "its partitions taken at a later poll"


def test_an_idle_kip848_members_poll_that_comes_round_as_a_heartbeat_falls_due_waits_for_its_answer(tmp_path):
    """modern.kip848.member._wait_idle: a poll with nothing to fetch that finds a heartbeat due now waits for the
    group's news, so the assignment that heartbeat's answer brings is taken at once, not a poll wait (500 ms)
    later; the real runs' idle members take it some 35 ms after the heartbeat fell due."""
    scenario = loads(SCENARIO.format(rate=100, service_ms=5, max_poll=500, strategy="uniform").replace(
        'member = "last"', "member = 0"), source="records.toml", overrides=['backends=["kip848"]'])
    events = _events(simulate(scenario, "kip848", tmp_path / "run", records=True))
    started = {event["member"]: event["ts_ns"] for event in events if event["type"] == "member_started"}
    joiner = max(started, key=started.get)
    mine = sorted((event for event in events if event.get("member") == joiner), key=lambda event: event["ts_ns"])
    assigned = next(event for event in mine if event["type"] == "partitions_assigned")
    beat = max(event["ts_ns"] for event in mine if event["type"] == "coordination_request"
               and event.get("op") == "ConsumerGroupHeartbeat" and event["ts_ns"] <= assigned["ts_ns"])
    assert (assigned["ts_ns"] - beat) / 1e6 < 20


@pytest.mark.parametrize("backend", ["classic", "kip848"])
def test_a_restarted_members_new_process_starts_once_the_old_one_has_closed(tmp_path, backend):
    """The runner stops a host and waits for it to exit (each member leaving after the batch it is handling) before
    it starts the new process: a new instance never overlaps the old one, so no record is handled twice."""
    from experiments.sim.play import RESTART_PROCESS_START_MS

    scenario = loads(SCENARIO.format(rate=200, service_ms=40, max_poll=100, strategy="range").replace(
        'action = "leave"\nmember = "last"', 'action = "restart"\nmember = 0'), source="records.toml",
        overrides=[f'backends=["{backend}"]'])
    events = _events(simulate(scenario, backend, tmp_path / "run", records=True))
    mine = [event for event in events if event.get("process") == "sim:h000"]
    stopped = next(event["ts_ns"] for event in mine if event["type"] == "member_stopped")
    restarted = [event["ts_ns"] for event in mine if event["type"] == "member_started"][1]
    assert (restarted - stopped) / 1e6 == pytest.approx(RESTART_PROCESS_START_MS, abs=1)
    assert not any(event["type"] == "records_processed" and stopped < event["ts_ns"] < restarted for event in mine)
    handled = Counter((event["partition"], offset) for event in events if event["type"] == "records_processed"
                      for offset in range(event["first_offset"], event["last_offset"] + 1))
    assert handled and max(handled.values()) == 1, "no record handled twice"


@pytest.mark.parametrize("backend", ["kip848", "legacy"])
def test_a_host_restarted_whole_comes_back_as_one_process_once_every_member_has_closed(tmp_path, backend):
    """experiments.faults.members.restart: a host process covered whole gets SIGTERM (each member leaves after the
    batch it is handling), the runner waits for the process to exit, then starts a new one, whose members begin
    one after another once it is up (0.8's later and further apart, as measured); none of them comes back before
    the last of the old ones has closed."""
    from experiments.sim import play

    process_ms, member_ms = ((play.LEGACY_RESTART_PROCESS_START_MS, play.LEGACY_RESTART_MEMBER_START_MS)
                             if backend == "legacy" else (play.RESTART_PROCESS_START_MS, play.RESTART_MEMBER_START_MS))
    scenario = loads(SCENARIO.format(rate=200, service_ms=40, max_poll=100, strategy="range").replace(
        "members = 4\n", "members = 4\nper_process = 2\n").replace(
        'action = "leave"\nmember = "last"', 'action = "rolling_restart"\ncount = 2'), source="records.toml",
        overrides=[f'backends=["{backend}"]'])
    events = _events(simulate(scenario, backend, tmp_path / "run", records=True))
    mine = [event for event in events if event.get("process") == "sim:h000"]
    stopped = [event["ts_ns"] for event in mine if event["type"] == "member_stopped"]
    started = [event["ts_ns"] for event in mine if event["type"] == "member_started"]
    assert len(stopped) >= 2 and len(started) == 4
    last_closed, again = max(stopped[:2]), sorted(started[2:])
    assert (again[0] - last_closed) / 1e6 == pytest.approx(process_ms, abs=1)
    assert (again[1] - again[0]) / 1e6 == pytest.approx(member_ms, abs=1)
