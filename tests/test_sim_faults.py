"""Split brain's member faults in the simulation (classic and KIP-848 with `--records`, 0.8 without), on the lab's own
scenario files:

- a: the member's coordination link black-holed for 18 s. It keeps fetching (its data link is up) while the
  coordinator evicts it and the others take its partitions; what it sent meanwhile is held and delivered at the heal,
  where its auto-commit is fenced and it learns it is out;
- b: the member's process paused (SIGSTOP) for 18 s: nothing of it runs; at the resume it finds its session gone.

On 0.8 the link is the member's ZooKeeper connection: its session expires, the others take its partitions, and at the
heal (or the resume) it learns of the expiry, forgets its partitions and rebalances twice on a new session.

Both replay from their seed; what the simulation does not play is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.folders.run_folder import RunFolder
from experiments.scenario import loads
from experiments.sim.play import simulate
from experiments.sim.playable import NotSimulated
from rebalance.events import read_events

SCENARIOS = Path(__file__).resolve().parent.parent / "experiments" / "scenarios"


def _play(tmp_path: Path, name: str, *, backend: str = "classic", edits=(), folder: str | None = None,
          records: bool = True):
    text = (SCENARIOS / f"{name}.toml").read_text()
    for old, new in edits:
        assert old in text
        text = text.replace(old, new)
    scenario = loads(text, source=f"{name}.toml", overrides=[f'backends=["{backend}"]'])
    return simulate(scenario, backend, tmp_path / (folder or name), records=records)


def _events(folder: RunFolder) -> list[dict]:
    return sorted((event for path in folder.event_files() for event in read_events(path)),
                  key=lambda event: (event["ts_ns"], event.get("process", "")))


def _fault(events: list[dict]) -> tuple[str, int, int]:
    """The faulted member and the fault's start and heal (ns)."""
    started = next(e for e in events if e["type"] == "fault_started")
    stopped = next(e for e in events if e["type"] == "fault_stopped" and e["fault_id"] == started["fault_id"])
    return started["member_ids"][0], started["ts_ns"], stopped["ts_ns"]


def _partitions(event: dict) -> set[str]:
    return set(event.get("partitions") or event.get("assigned") or [])


FENCING = ("UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION", "STALE_MEMBER_EPOCH", "FENCED_MEMBER_EPOCH")


@pytest.mark.parametrize("backend", ["classic", "kip848"])
def test_a_member_cut_from_its_coordinator_consumes_on_is_evicted_and_its_held_commit_is_fenced_at_the_heal(
        tmp_path, backend):
    events = _events(_play(tmp_path, "split-brain-a", backend=backend))
    zombie, cut, heal = _fault(events)
    assert (heal - cut) / 1e9 == pytest.approx(18, abs=0.01)
    owned = _partitions(next(e for e in reversed(events) if e["member"] == zombie and e["ts_ns"] < cut
                             and e["type"] == "rebalance_completed"))
    assert owned
    during = [e for e in events if cut < e["ts_ns"] < heal]
    assert any(e["type"] == "records_consumed" and e["member"] == zombie for e in during), "its data link is up"
    assert not any(e["type"] == "offsets_committed" and e["member"] == zombie for e in during)
    taken = [e for e in during if e["type"] == "partitions_assigned" and e["member"] != zombie
             and _partitions(e) & owned]
    assert taken, "the coordinator evicted it and gave its partitions to the others"
    assert (taken[0]["ts_ns"] - cut) / 1e9 < 6 + 2 * 1 + 1, "within a session (6 s) and a heartbeat or two"
    after = [e for e in events if e["ts_ns"] >= heal and e["member"] == zombie]
    fenced = [e for e in after if e["type"] == "commit_failed" and e["error"] in FENCING]
    assert len(fenced) == 1, "the auto-commit held in the black hole is fenced when it arrives"
    lost = next(e for e in after if e["type"] == "partitions_lost")
    assert (lost["ts_ns"] - heal) / 1e9 < 1 and _partitions(lost) == owned
    stored: dict[str, int] = {}
    for event in (e for e in events if e["type"] == "offsets_committed"):
        for partition, offset in event["offsets"].items():
            assert offset >= stored.get(partition, -1), "the group's committed offsets never move back"
            stored[partition] = offset


@pytest.mark.parametrize("backend", ["classic", "kip848"])
def test_a_paused_member_does_nothing_until_it_resumes_then_finds_itself_evicted(tmp_path, backend):
    events = _events(_play(tmp_path, "split-brain-b", backend=backend))
    paused, stop, resume = _fault(events)
    assert not any(e["member"] == paused and stop < e["ts_ns"] < resume for e in events)
    after = [e for e in events if e["ts_ns"] >= resume and e["member"] == paused]
    lost = next(e for e in after if e["type"] == "partitions_lost")
    assert (lost["ts_ns"] - resume) / 1e9 < 1
    assert sum(e["type"] == "commit_failed" for e in after if e["ts_ns"] <= lost["ts_ns"]) <= 1
    rejoined = next(e for e in after if e["type"] == "rebalance_completed")
    assert rejoined["ts_ns"] > lost["ts_ns"], "it joins the group again as a new member"


def test_a_split_brain_seed_replays_to_the_same_events(tmp_path):
    first, again = _play(tmp_path, "split-brain-a", folder="one"), _play(tmp_path, "split-brain-a", folder="two")
    for path in first.event_files():
        assert path.read_bytes() == (again.events / path.name).read_bytes(), path.name


@pytest.mark.parametrize(("edits", "backend", "message"), [
    ([('link = "coord"', 'link = "data"')], "classic", "a partition of the coord link both ways so far, not "
                                                        "partition of the data link"),
    ([('fault = "partition"', 'fault = "latency"\nlatency_ms = 100')], "classic", "not latency of the coord link"),
])
def test_member_faults_the_simulation_does_not_play_are_refused_by_name(tmp_path, edits, backend, message):
    with pytest.raises(NotSimulated, match=message):
        _play(tmp_path, "split-brain-a", backend=backend, edits=edits)
    with pytest.raises(NotSimulated, match="a pause on legacy shorter than the session"):
        _play(tmp_path, "split-brain-b", backend="legacy", records=False, edits=[("duration = 18", "duration = 5")])


SESSION_S = 6.0   # split brain's session.timeout / zookeeper.session.timeout.ms


def _seconds(events: list[dict], since_ns: int, member: str, kind: str, **fields) -> list[float]:
    return [(e["ts_ns"] - since_ns) / 1e9 for e in events if e["member"] == member and e["type"] == kind
            and all(e.get(key) == value for key, value in fields.items())]


@pytest.mark.parametrize(("scenario", "fault"), [("split-brain-a", "cut"), ("split-brain-b", "pause")])
def test_a_legacy_member_out_of_contact_loses_its_session_and_comes_back_on_a_new_one(tmp_path, scenario, fault):
    folder = _play(tmp_path, scenario, backend="legacy", records=False)
    events = _events(folder)
    zombie, start, heal = _fault(events)
    out_s = (heal - start) / 1e9
    held = _partitions(next(e for e in reversed(events) if e["member"] == zombie and e["ts_ns"] < start
                            and e["type"] == "partitions_assigned"))
    # the server heard its last request (an auto-commit, each second) before the fault, and expires the session at
    # the first 500 ms tick past a session timeout from it: the others take its partitions then
    claims = [(e["ts_ns"] - start) / 1e9 for e in events if e["type"] == "partitions_assigned"
              and e["member"] != zombie and start < e["ts_ns"] < heal and _partitions(e) & held]
    assert claims and SESSION_S - 1.0 < min(claims) < SESSION_S + 0.6, claims
    states = [(t, e["state"]) for t, e in zip(_seconds(events, start, zombie, "session_state"),
                                              [e for e in events if e["member"] == zombie
                                               and e["type"] == "session_state"], strict=True)]
    suspended, lost, connected = (next(t for t, state in states if state == name)
                                  for name in ("SUSPENDED", "LOST", "CONNECTED"))
    if fault == "cut":   # its held auto-commit, then kazoo's unanswered ping, a third of the session each
        assert 2 * SESSION_S / 3 - 1.0 < suspended < 2 * SESSION_S / 3 + 1.0, states
    else:                # a stopped process notices nothing until it runs again
        assert suspended == pytest.approx(out_s, abs=0.01), states
    # kazoo's next attempt after the heal: a cut member's third attempt since SUSPENDED breaks at the heal and the
    # fourth comes 0.8 s later (as a real run's does); a resumed one tries again after 0.1 s. A new session 0.1 s on.
    assert lost - out_s == pytest.approx(0.8 if fault == "cut" else 0.1, abs=0.01), states
    assert connected - lost == pytest.approx(0.1, abs=0.01), states
    (forgotten,) = _seconds(events, start, zombie, "partitions_lost")
    assert forgotten == pytest.approx(connected, abs=0.01)
    triggers = [e["trigger"] for e in events if e["member"] == zombie and e["type"] == "rebalance_started"
                and e["ts_ns"] > heal]
    assert triggers[:2] == ["new-session", "ids-changed,topic-changed"], triggers
    again = _play(tmp_path, scenario, backend="legacy", records=False, folder="again")
    for path in folder.event_files():
        assert path.read_bytes() == (again.events / path.name).read_bytes(), path.name


def test_the_seeds_that_broke_a_safety_check_are_the_violations_and_duplicates_are_not(tmp_path):
    from types import SimpleNamespace

    from experiments.statistics.safety import violations
    from experiments.summary.check_queries import CheckResult, Verdict

    def run(name: str, *checks: CheckResult):
        return SimpleNamespace(folder=RunFolder(tmp_path / name), checks=list(checks))

    clean = run("a", CheckResult("duplicates", Verdict.FALSE, 670, "670 records"),
                CheckResult("offset-regressions", Verdict.TRUE, 0, "none"))
    broken = run("b", CheckResult("offset-regressions", Verdict.FALSE, 2, "2 commits moved back"),
                 CheckResult("lost-records", Verdict.UNKNOWN, 0, "no records"))
    (found,) = violations([7, 8], [clean, broken])
    assert found.seed == 8 and [check.check for check in found.broken] == ["offset-regressions"]


@pytest.mark.spark
def test_a_safety_sweep_tallies_every_seed_without_writing_it_and_keeps_only_what_broke(tmp_path, spark):
    import json

    from typer.testing import CliRunner

    from experiments.cli.app import app

    out = tmp_path / "sweep"
    result = CliRunner().invoke(app, ["sim", str(SCENARIOS / "split-brain-a.toml"), "--backend", "classic",
                                      "--records", "--seeds", "3", "--safety", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "0 of 3 seeds broke a safety check (lost-records, offset-regressions, convergence)" in result.output
    kept = json.loads((out / "violations.json").read_text())
    assert kept["seeds"] == 3 and kept["first_seed"] == 11 and kept["violations"] == []
    assert not list(out.glob("seed-*")), "a clean seed's folder is not kept"
