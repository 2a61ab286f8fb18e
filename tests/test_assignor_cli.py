"""`rebalance-lab assign` and `rebalance-lab movement`."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from experiments.cli import assign as cli

app = typer.Typer()
cli.register(app)
runner = CliRunner()

BASE = ["assign", "--topic", "t0=3", "--topic", "t1=3", "--member", "C0=t0,t1", "--member", "C1=t0,t1"]


def run(*args):
    return runner.invoke(app, list(args))


def json_of(*args):
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_range_json_is_exact():
    assert json_of(*BASE, "--strategy", "range") == {"C0": ["t0-0", "t0-1", "t1-0", "t1-1"], "C1": ["t0-2", "t1-2"]}


def test_roundrobin_json_is_exact():
    assert json_of(*BASE, "--strategy", "roundrobin") == {"C0": ["t0-0", "t0-2", "t1-1"], "C1": ["t0-1", "t1-0", "t1-2"]}


def test_json_output_is_one_line_one_object():
    result = run(*BASE, "--strategy", "sticky", "--json")
    assert result.stdout.count("\n") == 1 and result.stdout.startswith("{")


def test_members_with_nothing_get_an_empty_list():
    out = json_of("assign", "--topic", "t0=1", "--member", "A=t0", "--member", "B=t0", "--strategy", "range")
    assert out == {"A": ["t0-0"], "B": []}


def test_static_member_sorts_first():
    out = json_of(*BASE, "--strategy", "range", "--static", "C1=instance-a")
    assert out["C1"] == ["t0-0", "t0-1", "t1-0", "t1-1"]


def test_sticky_keeps_owned_partitions():
    out = json_of(*BASE, "--strategy", "sticky", "--owned", "C0=t0-0,t0-1,t0-2", "--owned", "C1=t1-0,t1-1,t1-2",
                  "--generation", "C0=3", "--generation", "C1=3")
    assert out == {"C0": ["t0-0", "t0-1", "t0-2"], "C1": ["t1-0", "t1-1", "t1-2"]}


def test_older_generation_loses_its_claims():
    out = json_of(*BASE, "--strategy", "sticky", "--owned", "C1=t0-0,t0-1,t0-2", "--generation", "C0=3",
                  "--generation", "C1=2")
    assert out == json_of(*BASE, "--strategy", "sticky")


def test_cooperative_first_round_and_rounds():
    args = ["assign", "--strategy", "cooperative-sticky", "--topic", "t0=4", "--member", "C0=t0", "--member", "C1=t0",
            "--owned", "C0=t0-0,t0-1,t0-2,t0-3", "--generation", "C0=5"]
    assert json_of(*args) == {"C0": ["t0-0", "t0-1"], "C1": []}
    assert json_of(*args, "--rounds") == {
        "rounds": [{"C0": ["t0-0", "t0-1"], "C1": []}, {"C0": ["t0-0", "t0-1"], "C1": ["t0-2", "t0-3"]}]
    }


def test_legacy_strategies_key_by_member():
    out = json_of("assign", "--strategy", "legacy-range", "--topic", "t0=5", "--member", "g_a=t0", "--member",
                  "g_b=t0", "--streams", "g_a=2")
    assert out == {"g_a": ["t0-0", "t0-1", "t0-2", "t0-3"], "g_b": ["t0-4"]}


def test_optimal():
    assert json_of(*BASE, "--strategy", "optimal", "--owned", "C0=t0-0,t0-1,t0-2,t1-0,t1-1,t1-2") == {
        "C0": ["t0-0", "t0-1", "t0-2"], "C1": ["t1-0", "t1-1", "t1-2"]}


def test_human_output_has_a_table():
    result = run(*BASE, "--strategy", "range")
    assert result.exit_code == 0 and "C0" in result.stdout and "t0-0 t0-1 t1-0 t1-1" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--strategy", "bogus"], "unknown --strategy 'bogus'"),
        (["--topic", "t2=-1"], "negative partition count"),
        (["--topic", "t2=x"], "not an integer"),
        (["--member", "C2=t9"], "unknown topic 't9'"),
        (["--owned", "C0=t0-7"], "t0-7, which does not exist"),
        (["--owned", "C0=nonsense"], "not a topic-partition"),
        (["--owned", "C9=t0-0"], "not a --member"),
        (["--member", "C0=t0"], "given twice"),
        (["--rounds"], "cooperative-sticky only"),
        (["--streams", "C0=2"], "legacy strategies only"),
        (["--strategy", "legacy-roundrobin", "--member", "C2=t0"], "same topics"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    result = run(*BASE, *args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_no_members_or_topics():
    assert run("assign", "--topic", "t0=1").exit_code == 2
    assert run("assign", "--member", "C0=t0").exit_code == 2


def test_movement_seed_002_scenario_1():
    result = run("movement", "--partitions", "10", "--from", "4", "--to", "5", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert {name: v["moved"] for name, v in out.items()} == {
        "range": 7, "roundrobin": 6, "sticky": 2, "cooperative-sticky": 2, "optimal": 2}
    assert len(out["cooperative-sticky"]["rounds"]) == 2
    assert out["sticky"]["changes"] == [{"partition": "t0-8", "from": "C1", "to": "C5"},
                                        {"partition": "t0-9", "from": "C2", "to": "C5"}]


def test_movement_picture():
    result = run("movement", "--partitions", "10", "--from", "4", "--to", "5")
    assert result.exit_code == 0
    for line in ("range: 7 moved", "roundrobin: 6 moved", "sticky: 2 moved", "cooperative-sticky: 2 moved over 2 rounds",
                 "optimal: 2 moved"):
        assert line in result.stdout


def test_movement_single_strategy_and_bad_input():
    out = json.loads(run("movement", "--strategy", "sticky", "--from", "5", "--to", "4", "--json").stdout)
    assert list(out) == ["sticky"] and out["sticky"]["moved"] == 2
    bad = run("movement", "--from", "0")
    assert bad.exit_code == 2 and "member counts" in bad.stderr
    bad = run("movement", "--strategy", "nope")
    assert bad.exit_code == 2 and "unknown --strategy" in bad.stderr


def test_installed_command_answers_the_issue_example():
    exe = Path(sys.executable).with_name("rebalance-lab")
    if not exe.exists():
        pytest.fail(f"{exe} missing: the project is not installed into this environment")
    proc = subprocess.run(
        [str(exe), *BASE, "--strategy", "range", "--json"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"C0": ["t0-0", "t0-1", "t1-0", "t1-1"], "C1": ["t0-2", "t1-2"]}


# ---------------------------------------------------------------- the KIP-848 coordinator's assignors

SERVER = ["assign", "--topic", "t0=5", "--member", "C0=t0", "--member", "C1=t0", "--member", "C2=t0"]


def test_uniform_keeps_the_previous_target_up_to_each_quota():
    # C0, C1, C2 is also Kafka's member-map order here: C0 and C1 may keep two, C2 one.
    out = json_of(*SERVER, "--strategy", "uniform", "--owned", "C0=t0-0,t0-1", "--owned", "C1=t0-2,t0-3")
    assert out == {"C0": ["t0-0", "t0-1"], "C1": ["t0-2", "t0-3"], "C2": ["t0-4"]}


def test_uniform_and_uniform_41_differ_on_who_keeps_the_extra_partition():
    owned = ["--owned", "C0=t0-0", "--owned", "C1=t0-1,t0-2", "--owned", "C2=t0-3,t0-4"]
    # Kafka 4.0: the extra partitions belong to C0 and C1, the first two of the walk, so C2 gives one up.
    assert json_of(*SERVER, "--strategy", "uniform", *owned) == {
        "C0": ["t0-0", "t0-4"], "C1": ["t0-1", "t0-2"], "C2": ["t0-3"]}
    # Kafka 4.1: C1 and C2 hold two each and keep them.
    assert json_of(*SERVER, "--strategy", "uniform-4.1", *owned) == {
        "C0": ["t0-0"], "C1": ["t0-1", "t0-2"], "C2": ["t0-3", "t0-4"]}


def test_server_range_recomputes_and_puts_static_members_first():
    owned = ["--owned", "C0=t0-4", "--owned", "C2=t0-0,t0-1"]
    assert json_of(*SERVER, "--strategy", "server-range", *owned) == {
        "C0": ["t0-0", "t0-1"], "C1": ["t0-2", "t0-3"], "C2": ["t0-4"]}
    assert json_of(*SERVER, "--strategy", "server-range", "--static", "C2=instance-a") == {
        "C0": ["t0-2", "t0-3"], "C1": ["t0-4"], "C2": ["t0-0", "t0-1"]}


def test_server_strategies_print_the_same_table():
    result = run(*SERVER, "--strategy", "uniform")
    assert result.exit_code == 0 and "uniform" in result.stdout and "t0-0 t0-1" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--strategy", "uniform", "--generation", "C0=1"], "--generation does not apply to server-side assignors"),
        (["--strategy", "uniform", "--owned", "C0=t0-1", "--owned", "C1=t0-1"],
         "t0-1 is in the previous target of both 'C0' and 'C1'"),
        (["--strategy", "uniform-4.1", "--owned", "C0=t0-5"], "t0-5, which does not exist"),
        (["--strategy", "server-range", "--owned", "C0=t7-0"], "unknown topic"),
        (["--strategy", "server-range", "--member", "C3=t9"], "unknown topic 't9'"),
        (["--strategy", "uniform", "--static", "C0=i", "--static", "C1=i"], "share instance id 'i'"),
        (["--strategy", "uniform", "--streams", "C0=2"], "legacy strategies only"),
        (["--strategy", "kip848-range"], "server-range"),
    ],
)
def test_bad_server_input_is_one_line_and_exit_2(args, message):
    result = run(*SERVER, *args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_movement_of_the_server_assignors():
    def moved(strategy):
        result = run("movement", "--strategy", strategy, "--partitions", "10", "--from", "4", "--to", "5", "--json")
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)[strategy]

    uniform = moved("uniform")
    # Kafka's walk is C3, C4, C1, C2: C3 and C4 held three, and each gives one to the newcomer.
    assert uniform["before"] == {"C1": ["t0-6", "t0-7"], "C2": ["t0-8", "t0-9"], "C3": ["t0-0", "t0-1", "t0-2"],
                                 "C4": ["t0-3", "t0-4", "t0-5"]}
    assert uniform["changes"] == [{"partition": "t0-2", "from": "C3", "to": "C5"},
                                  {"partition": "t0-5", "from": "C4", "to": "C5"}]
    assert moved("server-range")["moved"] == 7   # the same as the classic range: ranges are recomputed
    picture = run("movement", "--strategy", "uniform-4.1", "--partitions", "10", "--from", "4", "--to", "5")
    assert picture.exit_code == 0 and "uniform-4.1: 2 moved" in picture.stdout


def test_movement_scores_optimal_from_the_start_the_sticky_strategies_share():
    from rebalance.assignors.movement import scale_all

    sticky, cooperative, optimal = scale_all(("sticky", "cooperative-sticky", "optimal"), partitions=10, before=4, after=5)
    assert optimal.before == sticky.before == cooperative.before
    assert len(optimal.changes) <= len(sticky.changes) and len(optimal.changes) == 2
