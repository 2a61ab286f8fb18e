"""Every command's --help renders (rich markup in help texts is easy to break)."""

import pytest
from typer.testing import CliRunner

from experiments.cli.app import app

COMMANDS = ["version", "assign", "movement", "broker", "produce", "topic", "member", "run", "compare",
            "scenarios", "summarize", "report", "events", "zk", "demo"]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_renders(command):
    result = CliRunner().invoke(app, [command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output
