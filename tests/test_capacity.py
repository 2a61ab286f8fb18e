"""What this machine carries, held against a scenario before it runs (experiments.run.capacity), and the
`doctor` command's checks. The probe's own runs are the `doctor --capacity` command's, not the suite's."""

from __future__ import annotations

import json
import subprocess
import sys

from experiments.run.capacity import Measured, check, peak_members, read, store
from experiments.run.machine import MachineIndex, pressure_avg10
from experiments.scenario import load, resolve

SEED002 = "experiments/scenarios/seed002.toml"


def test_a_scenarios_peak_is_its_largest_group_at_once():
    assert peak_members(resolve(load(SEED002))) == 100            # 50 -> 100 -> 50, then restarts
    assert peak_members(resolve(load("experiments/scenarios/herd.toml"))) == 11   # 10, one joins, one leaves
    capacity = load("experiments/scenarios/capacity.toml", overrides=["group.members=100", "timeline.grow.to=200"])
    assert peak_members(resolve(capacity)) == 200


def _stored(tmp_path, carried):
    path = tmp_path / "capacity.json"
    store([Measured(backend="legacy", carried=carried, failed_at=100, reason="a task waited for a CPU 61% of the "
                    "time", runs=[])], rate=600, machine={}, machine_line="machine index: python 0.62 s", commit="abc",
          path=path)
    return path


def test_a_scenario_above_the_measured_capacity_is_named_with_the_figure(tmp_path):
    path = _stored(tmp_path, carried=50)
    warning = check(load(SEED002), "legacy", path=path)
    assert warning is not None
    assert "peaks at 100 members on legacy" in warning and "carried 50 members" in warning
    assert "61%" in warning and "machine index: python 0.62 s" in warning
    assert check(load("experiments/scenarios/herd.toml"), "legacy", path=path) is None
    assert check(load(SEED002), "classic", path=path) is None      # not measured on classic: nothing to hold
    assert read(tmp_path / "none.json") is None


def test_run_stops_before_a_scenario_too_large_for_the_machine_unless_forced(tmp_path):
    path = _stored(tmp_path, carried=50)
    command = [sys.executable, "-m", "experiments.cli.app", "run", "seed002", "--backend", "legacy",
               "--out", str(tmp_path / "run")]
    env = {"LAB_CAPACITY_FILE": str(path), "PATH": "/usr/bin:/bin"}
    refused = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert refused.returncode == 2, refused.stderr
    assert "peaks at 100 members on legacy" in refused.stderr and "--force" in refused.stderr
    assert not (tmp_path / "run").exists()


def test_the_machine_index_line_reads_like_the_workplaces(tmp_path):
    index = MachineIndex(python_s=0.62, all_cores_s=0.71, cores=2, jvm_start_s=0.16, load1=0.8, cpu_pressure_10s=1.95)
    assert index.line() == ("machine index: python 0.62 s, on all 2 cores at once 0.71 s, jvm start 0.16 s, "
                            "load 0.8, cpu pressure 10 s 1.95%")
    (tmp_path / "psi").write_text("some avg10=12.50 avg60=3.00 avg300=1.00 total=5\n")
    assert pressure_avg10(tmp_path / "psi") == 12.5 and pressure_avg10(tmp_path / "missing") is None
    assert json.loads(json.dumps(index.to_json()))["python_s"] == 0.62


def test_doctor_rejects_bad_sizes_with_one_line():
    answer = subprocess.run([sys.executable, "-m", "experiments.cli.app", "doctor", "--sizes", "50,x"],
                            capture_output=True, text=True, timeout=60)
    assert answer.returncode == 2 and answer.stderr.strip().startswith("error: --sizes '50,x'")


def test_a_campaign_says_what_becomes_of_a_run_whose_conditions_are_invalid(tmp_path):
    from experiments.campaign import load_campaign
    from experiments.scenario import ScenarioError

    kept = load_campaign("experiments/campaigns/join-wave.toml")
    assert kept.invalid_runs == "keep"
    assert load_campaign("experiments/campaigns/seed002.toml").invalid_runs == "replace"
    bad = tmp_path / "bad.toml"
    bad.write_text(kept.text.replace('invalid_runs = "keep"', 'invalid_runs = "drop"'))
    import pytest
    with pytest.raises(ScenarioError, match="invalid_runs: must be one of 'replace', 'keep'"):
        load_campaign(bad)
