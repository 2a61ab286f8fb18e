"""Every command's --help renders (rich markup in help texts is easy to break)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from experiments.cli.app import app
from experiments.folders.run_folder import RunFolder

COMMANDS = ["version", "assign", "movement", "broker", "produce", "topic", "member", "run", "compare",
            "scenarios", "summarize", "report", "events", "zk", "demo", "sim", "sim-validate"]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_renders(command):
    result = CliRunner().invoke(app, [command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


# A run starts tens of member hosts and a producer: each imports its own command alone, not the whole
# command line (whose imports, the runner, Spark's helpers and networkx among them, cost seconds of CPU).
LEAN_ENTRIES = {
    "member host": ["-m", "experiments.run.member_cli", "--help"],
    "producer": ["-m", "broker.cli", "produce", "--help"],
}
NOT_NEEDED = ("networkx", "experiments.run.runner", "experiments.cli.app", "pyspark", "pandas")


@pytest.mark.parametrize("process", LEAN_ENTRIES)
def test_the_processes_a_run_starts_import_only_their_own_command(process):
    done = subprocess.run([sys.executable, "-X", "importtime", *LEAN_ENTRIES[process]], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "Usage" in done.stdout, done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert not [name for name in NOT_NEEDED if name in imported], process


def test_the_runner_starts_hosts_and_the_producer_through_the_lean_entries(tmp_path):
    import inspect

    from experiments.run.client_processes import ClientProcesses
    from experiments.run.member_configs import host_argv
    from experiments.scenario import load
    from rebalance.backends import profile

    scenario = load(Path(__file__).parents[1] / "experiments" / "scenarios" / "herd.toml")
    argv = host_argv(scenario, profile("classic"), ("m000",), config_path=tmp_path / "hosts.json",
                     address_of=lambda name: "127.0.0.1:9092", events=RunFolder(tmp_path).events, run_id="r")
    assert argv[1:3] == ["-m", "experiments.run.member_cli"] and argv[3] == "--backend"
    assert '"-m", "broker.cli", "produce"' in inspect.getsource(ClientProcesses.start_producer)


def test_help_lists_the_labs_commands_under_the_name_the_user_typed():
    """`./lab --help` shows the lab's commands, and every message names `./lab`, the command the README teaches
    (the wrapper exports LAB_COMMAND=./lab; `rebalance-lab` is not on a fresh clone's PATH)."""
    entry = Path(sys.executable).with_name("rebalance-lab")
    env = {**os.environ, "LAB_COMMAND": "./lab", "COLUMNS": "100"}
    shown = subprocess.run([str(entry), "--help"], capture_output=True, text=True, env=env, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "Usage: ./lab " in shown.stdout
    for command in ("run", "compare", "scenarios", "summarize", "campaign", "demo", "events"):
        assert f" {command} " in shown.stdout, command
    wrong = subprocess.run([str(entry), "no-such-command"], capture_output=True, text=True, env=env, timeout=120)
    assert "Try './lab --help'" in wrong.stderr and "rebalance-lab" not in wrong.stderr


def test_the_wrapper_shows_the_labs_help_and_its_own_lines():
    script = (Path(__file__).parents[1] / "lab").read_text(encoding="utf-8")
    help_branch = script.split('"" | -h | --help | help)', 1)[1].split(";;", 1)[0]
    assert "rebalance-lab --help" in help_branch and "usage" in help_branch
    assert 'export LAB_COMMAND="${LAB_COMMAND:-./lab}"' in script


# Every `./lab` command and every cell of a campaign (a `run` in a process of its own) starts the whole command
# line: what only some commands use (the statistics' scipy, Spark, pandas, plotting) is imported by them, not at start.
HEAVY_LIBRARIES = ("scipy", "pyspark", "pandas", "matplotlib", "networkx")


def test_the_command_line_starts_without_the_heavy_libraries():
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "experiments.cli.app", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Usage" in done.stdout, done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert not [name for name in HEAVY_LIBRARIES if name in imported]
