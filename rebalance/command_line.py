"""The name a user types to reach the lab's commands, for help pages and messages.

`./lab` exports LAB_COMMAND=./lab before it hands over to `rebalance-lab`, so the messages show the
command the README teaches; called directly (an installed entry point), the lab names itself.
"""

from __future__ import annotations

import os

COMMAND_ENV = "LAB_COMMAND"
INSTALLED_NAME = "rebalance-lab"


def command_name() -> str:
    """`./lab` when run through the wrapper, else the installed entry point's name."""
    return os.environ.get(COMMAND_ENV, "").strip() or INSTALLED_NAME


def command(arguments: str) -> str:
    """A command line to suggest, e.g. command("summarize runs/x") -> "./lab summarize runs/x"."""
    return f"{command_name()} {arguments}"
