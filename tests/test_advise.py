"""`./lab advise`: the measures tallied while a simulated run plays equal the Spark summary's of the same run, and the
command ranks every simulated cell with its spread, its tests, its mechanism and the command that confirms it."""

from __future__ import annotations

import math
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from experiments.cli.app import app
from experiments.scenario import loads
from experiments.sim.play import simulate
from experiments.statistics import advice
from experiments.statistics.phase_tally import PhaseTally
from tests.fixtures.spark import layout_summarised_with_the_suite

# Crashes that wait for a session and a join, with a service time that makes records late while the group stops.
SCENARIO = """\
name = "advised"
seed = 3
duration = 30
settle = 4
backends = ["legacy", "classic", "kip848"]

[[topics]]
name = "t0"
partitions = 8

[producer]
rate = 200

[workload]
service = "lognormal"
service_ms = 8
service_p99_ms = 40
commit = "batch"

[group]
members = 4
strategy = "range"
session_timeout_ms = 6000

[[timeline]]
at = 0
action = "phase"
name = "steady"

[[timeline]]
at = 6
action = "scale"
to = 6
name = "grow"

[[timeline]]
at = 16
action = "scale"
to = 3
how = "crash"
name = "crash"
"""


def _scenario(tmp_path: Path, *overrides: str):
    path = tmp_path / "advised.toml"
    path.write_text(SCENARIO)
    return loads(SCENARIO, source=str(path), overrides=list(overrides)), path


CELLS = (("classic", "range"), ("classic", "cooperative-sticky"), ("kip848", "uniform"), ("legacy", "range"))
TALLY = "tally.pickle"   # each played cell's tally, kept beside its run folder


def _play_and_tally(root: Path) -> list[Path]:
    """Each cell played once with its event files written and tallied at the same time, for the suite's Spark
    pass."""
    root.mkdir(parents=True)
    folders = []
    for backend, strategy in CELLS:
        scenario, _ = _scenario(root, f'group.strategy="{strategy}"', f'backends=["{backend}"]')
        tally = PhaseTally(3000)
        folder = simulate(scenario, backend, root / f"{backend}-{strategy}", records=True, tap=tally.feed)
        (root / f"{backend}-{strategy}.{TALLY}").write_bytes(pickle.dumps(tally.measures()))
        folders.append(folder.path)
    return folders


layout_summarised_with_the_suite("advise-tally", _play_and_tally)


@pytest.fixture(scope="module")
def played(synthetic_runs) -> list[tuple[str, list, object]]:
    """(cell, its tally's measures, its summary) for each cell."""
    layout = synthetic_runs["advise-tally"]
    return [(f"{backend}/{strategy}", pickle.loads((layout.root / f"{backend}-{strategy}.{TALLY}").read_bytes()), summary)
            for (backend, strategy), summary in zip(CELLS, layout.summaries, strict=True)]


def test_the_tally_equals_the_spark_summary_phase_by_phase(played):
    lost_somewhere = False
    for cell, measures, summary in played:
        table = summary.tables["phases"]
        assert list(table["phase"]) == [row.phase for row in measures], cell
        for row, (_, expected) in zip(measures, table.iterrows(), strict=True):
            assert row.records_lost == expected["records_lost"], (cell, row.phase)
            if pd.isna(expected["max_latency_ms"]):
                assert row.max_latency_ms is None, (cell, row.phase)
            else:
                assert row.max_latency_ms == expected["max_latency_ms"], (cell, row.phase)
            assert math.isclose(row.rebalance_ms, expected["rebalance_ms"], abs_tol=1e-6), (cell, row.phase)
            lost_somewhere |= row.records_lost > 0
    assert lost_somewhere, "the scenario makes records late somewhere, so the comparison counts something"


def test_a_run_tallied_without_its_files_gives_the_same_measures(tmp_path, played):
    scenario, _ = _scenario(tmp_path, 'group.strategy="range"', 'backends=["classic"]')
    tally = PhaseTally(3000)
    folder = simulate(scenario, "classic", tmp_path / "unwritten", records=True, events=False, tap=tally.feed)
    assert not list(folder.event_files())
    assert tally.measures() == played[0][1]


def test_the_cells_are_every_assignor_of_every_generation_the_simulation_plays_with_records(tmp_path):
    scenario, _ = _scenario(tmp_path)
    cells, left_out = advice.cells_of(scenario)
    assert [cell.label for cell in cells] == ["legacy/range", "legacy/roundrobin", "classic/range",
                                              "classic/roundrobin", "classic/sticky", "classic/cooperative-sticky",
                                              "kip848/uniform", "kip848/range", "kip848/uniform-4.1"]
    assert not left_out


def test_a_generation_whose_records_the_scenario_cannot_play_is_left_out_with_its_reason():
    source = Path(__file__).resolve().parent.parent / "experiments" / "scenarios" / "split-brain-d.toml"
    scenario = loads(source.read_text(), source=str(source), overrides=['backends=["legacy", "classic"]',
                                                                         "cluster.fail_back_delay_ms=1000"])
    cells, left_out = advice.cells_of(scenario)
    assert {cell.backend for cell in cells} == {"classic"}
    assert len(left_out) == 1 and left_out[0].startswith("legacy: records on legacy: line 51: the restarted broker")


def test_advise_ranks_the_cells_with_their_spread_tests_mechanism_and_confirming_command(tmp_path):
    _, path = _scenario(tmp_path)
    result = CliRunner().invoke(app, ["advise", str(path), "--seeds", "5", "--set", 'backends=["classic"]',
                                      "--workers", "2"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "4 cells x 5 seeds" in out
    assert "median [min-max] over the seeds" in out   # the spread's name printed, not read as markup
    for cell in ("classic/range", "classic/roundrobin", "classic/sticky", "classic/cooperative-sticky"):
        assert cell in out
    assert "exact two-sided Mann-Whitney" in out and "Why classic/" in out
    assert "compare " in out and "--repeat 5" in out
    ranking = [line for line in out.splitlines() if line.strip().startswith(("│ 1 ", "│ 2 ", "│ 3 ", "│ 4 "))]
    assert len(ranking) == 4


def test_advise_within_a_budget_stops_starting_seeds_and_compares_the_cells_on_the_seeds_they_all_finished(tmp_path):
    """A budget of no time: every cell still gets the tests' 5 seeds, the ones under way then are stopped, and each
    cell keeps only the seeds every cell finished, well short of the 12 asked."""
    scenario, _ = _scenario(tmp_path)
    cells = [advice.Cell("classic", "range"), advice.Cell("classic", "cooperative-sticky")]
    runs = advice.play(scenario, cells, seeds=12, overrides=['backends=["classic"]'], latency_limit_ms=3000,
                       workers=2, within_s=0)
    seeds = {cell: set(runs.loc[(runs["backend"] == cell.backend) & (runs["strategy"] == cell.strategy), "seed"])
             for cell in cells}
    assert seeds[cells[0]] == seeds[cells[1]]
    assert 5 <= len(seeds[cells[0]]) < 12
    assert min(seeds[cells[0]]) == scenario.seed and max(seeds[cells[0]]) == scenario.seed + len(seeds[cells[0]]) - 1

    _, path = _scenario(tmp_path)
    result = CliRunner().invoke(app, ["advise", str(path), "--seeds", "12", "--within", "0", "--set",
                                      'backends=["classic"]', "--workers", "2"])
    assert result.exit_code == 0, result.output
    assert "or as many as 0 s of wall time allow, at least 5" in result.output
    assert "The budget of 0 s was spent at " in result.output and "of the 12 asked; the 5 the tests take went past it" \
        in result.output


def test_an_interrupted_advise_stops_its_seeds_and_keeps_the_ones_every_cell_finished(tmp_path):
    """Ctrl-C while seeds play (here raised where the loop reports a finished seed, as the signal would be): no
    seed goes on, no worker is left, and the seeds every cell finished are kept."""
    scenario, _ = _scenario(tmp_path)
    cells = [advice.Cell("classic", "range"), advice.Cell("classic", "cooperative-sticky")]
    finished = []

    def done() -> None:
        finished.append(1)
        if len(finished) == 4:
            raise KeyboardInterrupt

    runs = advice.play(scenario, cells, seeds=30, overrides=['backends=["classic"]'], latency_limit_ms=3000,
                       workers=2, done=done)
    assert runs.attrs["interrupted"] is True
    assert multiprocessing.active_children() == []
    assert len(finished) == 4
    seeds = [set(runs.loc[runs["strategy"] == cell.strategy, "seed"]) for cell in cells]
    assert seeds[0] == seeds[1] and len(seeds[0]) <= 2


def test_advise_interrupted_from_the_terminal_exits_130_and_leaves_no_process(tmp_path):
    _, path = _scenario(tmp_path)
    command = [sys.executable, "-m", "experiments.cli.app", "advise", str(path), "--seeds", "30", "--set",
               'backends=["classic"]', "--workers", "2"]
    scratch = tmp_path / "tmp"   # where the seeds' scratch folders go
    scratch.mkdir()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True, cwd=Path(__file__).resolve().parent.parent,
                               env={**os.environ, "TMPDIR": str(scratch)})
    time.sleep(12)
    os.killpg(process.pid, signal.SIGINT)   # as a terminal's Ctrl-C reaches its whole foreground group
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 130, out
    assert "Interrupted at " in out or "nothing to rank" in out, out
    with pytest.raises(ProcessLookupError):
        os.killpg(process.pid, 0)   # no worker of the group is left
    assert list(scratch.iterdir()) == []   # the seeds stopped under way removed their scratch folders


def test_advise_refuses_a_scenario_none_of_whose_backends_is_simulated_with_records(tmp_path):
    source = Path(__file__).resolve().parent.parent / "experiments" / "scenarios" / "split-brain-d.toml"
    result = CliRunner().invoke(app, ["advise", str(source), "--set", 'backends=["legacy"]',
                                      "--set", "cluster.fail_back_delay_ms=1000"])
    assert result.exit_code == 2
    assert "none of its backends (legacy) is simulated with records" in result.output


def test_advise_on_a_scenario_without_phases_of_its_own_ranks_its_timeline_and_says_so(tmp_path):
    """Split brain a names no phase: the per-phase table would be one column of cell names, so a line says why
    there is none; 0.8 is ranked there with records, its split member's faults played."""
    source = Path(__file__).resolve().parent.parent / "experiments" / "scenarios" / "split-brain-a.toml"
    result = CliRunner().invoke(app, ["advise", str(source), "--seeds", "5", "--set", 'backends=["legacy"]',
                                      "--workers", "2"])
    assert result.exit_code == 0, result.output
    assert "2 cells x 5 seeds" in result.output and "legacy/range" in result.output
    assert "the scenario names no phase of its own" in result.output
    assert "Per phase: records lost" not in result.output
