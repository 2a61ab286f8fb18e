"""The simulation (experiments.sim): a seed replays to the same events, the herd's request counts come from the
coordinators' own state machines and fall where the real runs' do, and the summary reads a simulated run as it
reads a real one."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from experiments.cli.app import app
from experiments.folders.run_folder import RunFolder
from experiments.scenario import load
from experiments.sim.play import simulate
from experiments.sim.playable import NotSimulated
from experiments.sim.validate import changes_of, herd_cells, real_changes, write_into
from rebalance.events import read_events
from tests.fixtures.spark import layout_summarised_with_the_suite

ROOT = Path(__file__).resolve().parent.parent
HERD = ROOT / "experiments" / "scenarios" / "herd.toml"
REAL_CHANGES = ROOT / "docs" / "results-data" / "herd-defaults" / "changes.csv"


def _herd(tmp_path: Path, members: int, *, seed: int | None = None, name: str = "run",
          backend: str = "classic", warm_start: bool = False) -> RunFolder:
    return simulate(load(HERD, overrides=[f"group.members={members}"]), backend, tmp_path / name, seed=seed,
                    warm_start=warm_start)


def _counted_requests(folder: RunFolder) -> dict[str, int]:
    return changes_of(folder.path)


def test_a_seed_replays_to_the_same_events_and_another_seed_to_the_same_counts(tmp_path):
    first, again = _herd(tmp_path, 6, name="a"), _herd(tmp_path, 6, name="b")
    for path in first.event_files():
        assert path.read_bytes() == (again.events / path.name).read_bytes(), path.name
    other = _herd(tmp_path, 6, seed=99, name="c")
    assert (other.events / "runner.jsonl").read_bytes() != (first.events / "runner.jsonl").read_bytes()
    assert _counted_requests(other) == _counted_requests(first)


@pytest.mark.parametrize("members", [10, 25])
def test_the_classic_herd_costs_what_the_coordinator_and_the_clients_requests_make(tmp_path, members):
    """Every member rejoins, syncs and fetches its offsets (3 a member); the newcomer finds the coordinator and is
    asked for its id first (2 more). By the summary's rule a change is charged from its member's own event to the
    next one's, and a leaving member logs its LeaveGroup just before it stops: the join is charged the leaver's
    LeaveGroup (3N + 6, as in the real herd runs), the leave the first LeaveGroup of the teardown (3N + 1)."""
    counts = _counted_requests(_herd(tmp_path, members))
    assert counts["join"] == 3 * (members + 1) + 2 + 1
    assert counts["leave"] == 3 * members + 1


def test_the_simulation_validates_against_the_real_herd_runs_where_the_page_says_it_does(tmp_path):
    """docs/simulation.md's table at the two smallest sizes of herd-defaults, 3 seeds a cell: classic's and
    KIP-848's joins and leaves inside the real runs' range (classic's join 3N + 6 exactly), 0.8's within 10% of
    the real median."""
    small = tmp_path / "changes.csv"
    with REAL_CHANGES.open() as handle:
        rows = [row for row in csv.DictReader(handle) if int(row["N"]) in (10, 25)]
    with small.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    cells = {(cell.backend, cell.kind, cell.members, cell.partitions): cell for cell in herd_cells(small, seeds=3)}
    assert set(real_changes(small)) == set(cells) and {key[0] for key in cells} == {"legacy", "classic", "kip848"}
    for key, cell in cells.items():
        assert cell.inside, cell
        if key[:2] == ("classic", "join"):
            assert set(cell.simulated) == {3 * cell.members + 6} == set(cell.real)


def test_the_validation_block_is_rewritten_in_place(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Page\n\nbefore\n<!-- validation:begin -->\nold\n<!-- validation:end -->\nafter\n")
    write_into(page, "| new |\n")
    assert page.read_text() == "# Page\n\nbefore\n<!-- validation:begin -->\n| new |\n<!-- validation:end -->\nafter\n"
    other = tmp_path / "other.md"
    other.write_text("no block here\n")
    with pytest.raises(ValueError, match="validation"):
        write_into(other, "x")


@pytest.mark.parametrize("members", [10, 50])
def test_kip848_charges_a_change_only_the_members_whose_partitions_move(tmp_path, members):
    """No group-wide barrier: a join or a leave costs the same few heartbeats whatever N (the real runs: 7-12
    and 4-7 at every N); every member's heartbeats between changes are steady."""
    counts = _counted_requests(_herd(tmp_path, members, backend="kip848"))
    assert 5 <= counts["join"] <= 12 and 3 <= counts["leave"] <= 7


def test_a_warm_start_charges_the_herd_as_a_group_that_joined_one_by_one(tmp_path):
    """KIP-848's warm start (the group loaded stable by its coordinator) against the joined warm-up, 8 seeds a side:
    each warm seed's requests at the join and at the leave inside the joined seeds' range; and a warm start does not
    compute the target once per initial member."""
    joined, warm = [], []
    for seed in range(1, 9):
        joined.append(_counted_requests(_herd(tmp_path, 30, seed=seed, name=f"j{seed}", backend="kip848")))
        warm.append(_counted_requests(_herd(tmp_path, 30, seed=seed, name=f"w{seed}", backend="kip848",
                                            warm_start=True)))
    for kind in ("join", "leave"):
        low, high = min(counts[kind] for counts in joined), max(counts[kind] for counts in joined)
        assert all(low <= counts[kind] <= high for counts in warm), (kind, joined, warm)
    targets = [event for event in read_events(RunFolder(tmp_path / "w1").events / "coordinator-0.jsonl")
               if event.get("event") == "target_assignment"]
    assert len(targets) < 10, "the warm group was loaded, not assigned once per member"
    with pytest.raises(NotSimulated, match="warm start"):
        _herd(tmp_path, 4, name="classic-warm", warm_start=True)


def test_the_run_record_says_what_was_simulated(tmp_path):
    folder = _herd(tmp_path, 4)
    record = folder.record()
    assert record.status == "completed" and record.backend == "classic" and record.members == 4
    assert record.versions["simulation"] == "virtual time" and record.scenario.resolved["simulated"]
    from experiments.run.conditions import judge
    from experiments.run.run_evidence import gather

    first = judge(gather(folder.path)).findings[0]   # the run's conditions say first that no machine carried it
    assert first.condition == "simulated" and "virtual time" in first.text
    assert [json.loads(line)["name"] for line in (folder.events / "runner.jsonl").read_text().splitlines()
            if json.loads(line)["type"] == "phase"][:3] == ["setup", "warmup", "timeline"]


def test_an_action_the_simulation_does_not_play_is_refused_by_name(tmp_path):
    with pytest.raises(NotSimulated, match="zk_isolate on legacy: a session of 2000 ms would expire"):
        simulate(load(ROOT / "experiments" / "scenarios" / "split-brain-c.toml",
                      overrides=["group.session_timeout_ms=2000"]), "legacy", tmp_path / "y")
    result = CliRunner().invoke(app, ["sim", "split-brain-b", "--backend", "legacy", "--set",
                                      "group.session_timeout_ms=30000", "--out", str(tmp_path / "z")])
    assert result.exit_code == 2 and "a pause on legacy shorter than the session" in result.output, result.output
    assert not (tmp_path / "z").exists() or not any((tmp_path / "z").iterdir())


def test_a_backend_the_scenario_does_not_list_is_refused_as_run_refuses_it(tmp_path):
    # churn-sticky lists classic alone: its strategy is one 0.8 never had
    result = CliRunner().invoke(app, ["sim", "churn-sticky", "--backend", "legacy", "--out", str(tmp_path / "z")])
    assert result.exit_code == 2, result.output
    assert "scenario 'churn-sticky' is for classic only (its `backends` line)" in result.output
    assert not (tmp_path / "z").exists()
    result = CliRunner().invoke(app, ["sim", "herd", "--backend", "kafka", "--out", str(tmp_path / "z")])
    assert result.exit_code == 2 and "--backend 'kafka': choose one of classic, kip848, legacy" in result.output


@pytest.mark.parametrize(("members", "partitions"), [(5, 80), (20, 320)])
def test_the_legacy_herd_grows_with_the_group_and_its_partitions_as_the_real_runs_do(tmp_path, members, partitions):
    """0.8's herd-legacy-grid: every member re-reads the whole group and re-claims its partitions, and the
    newcomer's first claims meet owner nodes not yet released (an owner conflict, a retry 2 s later)."""
    scenario = load(HERD, overrides=[f"group.members={members}", f"topics.t0.partitions={partitions}"])
    folder = simulate(scenario, "legacy", tmp_path / "run", seed=3)
    counts = _counted_requests(folder)
    with (ROOT / "docs" / "results-data" / "herd-legacy-grid" / "changes.csv").open() as handle:
        real = [row for row in csv.DictReader(handle) if int(row["N"]) == members and int(row["P"]) == partitions]
    for kind in ("join", "leave"):
        values = sorted(float(row["requests"]) for row in real if row["kind"] == kind)
        assert abs(counts[kind] - values[len(values) // 2]) <= 0.10 * values[len(values) // 2], (kind, counts, values)
    attempts = [event for path in folder.event_files() for event in read_events(path)
                if event["type"] == "rebalance_attempt"]
    if members == 5:   # five members in one host process: they release late, the newcomer meets their nodes
        assert any(event["outcome"] == "owner_conflict" for event in attempts)


def test_the_sim_command_writes_one_run_folder_a_seed(tmp_path):
    result = CliRunner().invoke(app, ["sim", "herd", "--set", "group.members=4", "--seeds", "2", "--out",
                                      str(tmp_path / "sims")])
    assert result.exit_code == 0, result.output
    assert sorted(path.name for path in (tmp_path / "sims").iterdir()) == ["seed-1", "seed-2"]
    assert "2 seeds in" in result.output


GENERATIONS = ("classic", "kip848", "legacy")


def _herds(root: Path) -> list[Path]:
    """A herd of 5 simulated on each generation, and 0.8's on the shared ZooKeeper server, for the suite's Spark
    pass."""
    shared = simulate(load(HERD, overrides=["group.members=5"]), "legacy", root / "legacy-shared",
                      shared_zookeeper=True)
    return [*(_herd(root, 5, backend=backend, name=backend).path for backend in GENERATIONS), shared.path]


layout_summarised_with_the_suite("sim-herds", _herds)


@pytest.fixture(scope="module")
def summarised_herds(synthetic_runs):
    """The three herds, summarised in the suite's pass: {backend: (its folder, its summary)}."""
    summaries = synthetic_runs["sim-herds"].summaries
    return {backend: (summary.folder, summary)
            for backend, summary in zip((*GENERATIONS, "legacy-shared"), summaries, strict=True)}


@pytest.mark.spark
@pytest.mark.parametrize("backend", [*GENERATIONS, "legacy-shared"])
def test_the_summary_reads_a_simulated_run_as_a_real_one(summarised_herds, backend):
    """The herd table of the Spark summary charges the join and the leave as the events above do, on every
    generation and on 0.8's shared ZooKeeper server (a get_many counted as the reads it stands for); the run's
    checks read it as a run of the lab's."""
    from experiments.summary.read_back import load_run

    folder, summary = summarised_herds[backend]
    changes = load_run(folder.path).herd_changes()
    assert list(changes["kind"]) == ["join", "leave"]
    assert list(changes["requests"]) == [changes_of(folder.path)["join"], changes_of(folder.path)["leave"]]
    if backend == "classic":
        assert list(changes["requests"]) == [3 * 6 + 2 + 1, 3 * 5 + 1]   # the join charged the leaver's LeaveGroup
    verdicts = {check.check: check.verdict.value for check in summary.checks}
    assert verdicts["double-ownership"] != "false", "a herd without faults never has two owners at once"


SIM_ARGS = ["sim", "herd", "--backend", "kip848", "--set", "group.members=6", "--seeds", "3"]


def _sim_command(out: Path, *extra: str) -> subprocess.CompletedProcess:
    """`./lab sim` in a process of its own (one whose Spark is another cluster's application)."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    return subprocess.run([sys.executable, "-m", "experiments.cli.app", *SIM_ARGS, "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=600, env=env)


def sim_here(out: Path) -> None:
    """The same seeds one after the other, in this process."""
    result = CliRunner().invoke(app, [*SIM_ARGS, "--out", str(out)])
    assert result.exit_code == 0, result.output


def same_events(one: Path, other: Path) -> bool:
    return all((other / path.relative_to(one)).read_bytes() == path.read_bytes()
               for path in sorted(one.rglob("*.jsonl")))


@pytest.mark.spark
def test_seeds_spread_over_spark_replay_to_the_same_events_as_one_after_the_other(tmp_path, spark):
    """Over the suite's local session (`--master` finds it running), one task a seed."""
    spread = CliRunner().invoke(app, [*SIM_ARGS, "--out", str(tmp_path / "spread"), "--master", "local[2]"])
    assert spread.exit_code == 0, spread.output
    assert sorted(path.name for path in (tmp_path / "spread").iterdir()) == ["seed-1", "seed-2", "seed-3"]
    sim_here(tmp_path / "here")
    assert same_events(tmp_path / "here", tmp_path / "spread")


def test_every_built_in_scenario_plays_or_is_refused_by_name(tmp_path):
    """Membership steps play (churn's rolling restarts, seed 002's scaling included), here on the classic backend
    where a scenario lists it (the fastest to simulate), split brain's member faults too (a link cut, a pause) and
    its server faults (a ZooKeeper node isolated, the coordinator's broker killed, the soak's every cycle); a
    scenario with a step the simulation lacks is refused naming the scenario."""
    played, refused = [], []
    for path in sorted((ROOT / "experiments" / "scenarios").glob("*.toml")):
        scenario = load(path)
        for backend in ["classic"] if "classic" in scenario.backends else scenario.backends[:1]:
            try:
                folder = simulate(scenario, backend, tmp_path / f"{path.stem}-{backend}")
            except NotSimulated as error:
                assert path.stem in str(error)
                refused.append(path.stem)
                continue
            assert folder.record().status == "completed", (path.stem, backend)
            played.append(path.stem)
    assert {"herd", "churn-range", "seed002", "seed002-mixed", "herd-1000", "split-brain-a", "split-brain-b",
            "split-brain-c", "split-brain-d", "soak"} <= set(played)


def test_every_built_in_scenario_that_lists_legacy_plays_on_legacy(tmp_path):
    """0.8 without records: split brain's pause and cut link too (a session expired, a new one), the soak's every
    cycle. herd-1000 is left to `benchmarks/bench_sim.py` (N = 1,000 on 0.8 takes about a minute)."""
    played = []
    for path in sorted((ROOT / "experiments" / "scenarios").glob("*.toml")):
        scenario = load(path)
        if "legacy" not in scenario.backends or path.stem == "herd-1000":
            continue
        folder = simulate(scenario, "legacy", tmp_path / path.stem)
        assert folder.record().status == "completed", path.stem
        played.append(path.stem)
    assert {"split-brain-a", "split-brain-b", "demo-split-brain", "soak", "seed002", "herd"} <= set(played), played


def test_a_simulated_run_never_counts_in_the_wall_time_a_scenario_is_expected_to_take(tmp_path):
    from experiments.folders import RUNS_DIR
    from experiments.run import wall_time

    _herd(tmp_path / RUNS_DIR, 4)
    assert (tmp_path / RUNS_DIR / "run").is_dir()
    assert wall_time.recorded_seconds([tmp_path / RUNS_DIR]) == {}
