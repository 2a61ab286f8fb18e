"""`rebalance-lab`: one command line for the whole lab.

Each area contributes its commands from its own module through `register(app)`,
so the areas stay independent and this file stays a table of contents.
"""

from __future__ import annotations

import importlib

import typer

from rebalance.command_line import command_name

app = typer.Typer(
    name=command_name(),
    help="Three generations of Kafka consumer-group rebalancing (0.8 on ZooKeeper, the classic protocol, "
         "KIP-848) under identical faults.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

COMMAND_MODULES = [
    "zkensemble.cli",          # zk up | status | down
    "experiments.cli.assign",  # assign, movement
    "broker.cli",              # broker
    "experiments.run.member_cli",  # member (of any backend)
    "experiments.cli.run",     # run, compare
    "experiments.cli.campaign",  # campaign, campaigns, results
    "experiments.cli.report",  # summarize, report
    "experiments.cli.events",  # events
    "experiments.cli.demo",        # demo
    "experiments.cli.doctor",      # doctor
    "experiments.cli.fuzz",        # fuzz wire | scenario | hostile
    "experiments.cli.sim",         # sim, sim-validate
    "experiments.cli.advise",      # advise
]

@app.callback()
def _root() -> None:
    """Three generations of Kafka consumer-group rebalancing (0.8 on ZooKeeper, the classic protocol, KIP-848)
    under identical faults."""


@app.command()
def version() -> None:
    """Print the lab's version and the versions of the systems it stands on."""
    from importlib.metadata import version as dist_version

    for dist in ("rebalance-lab", "kazoo", "kafka-python", "pyspark"):
        typer.echo(f"{dist} {dist_version(dist)}")


for _name in COMMAND_MODULES:
    try:
        _module = importlib.import_module(_name)
    except ModuleNotFoundError as error:
        if error.name != _name:
            raise
        continue
    _module.register(app)


def main() -> None:
    app(prog_name=command_name())


if __name__ == "__main__":
    main()
