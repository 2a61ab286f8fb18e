"""`rebalance-lab zk up | status | down`: a ZooKeeper that outlives the command that started it.

What `zk up` started is written to the state file (.lab/zk.json, or $LAB_STATE_DIR/zk.json)
so that later invocations find it; `zk down` removes every process, container, network and
directory of it.
"""

from __future__ import annotations

import uuid

import typer
from rich.console import Console
from rich.table import Table

from rebalance.command_line import command

from . import start, state
from .config import Provider, state_dir
from .ensemble import Ensemble
from .errors import AlreadyUp, NotUp, ZkEnsembleError

zk_app = typer.Typer(help="A real ZooKeeper for the lab: zk up, zk status, zk down.", no_args_is_help=True)
console = Console()


def register(app: typer.Typer) -> None:
    app.add_typer(zk_app, name="zk")


def _fail(error: Exception) -> None:
    typer.echo(f"error: {error}", err=True)
    raise typer.Exit(1)


@zk_app.command()
def up(
    nodes: int = typer.Option(1, "--nodes", "-n", help="1 (standalone) or 3 (an ensemble with a leader)."),
    provider: str = typer.Option("auto", help="auto, docker or local."),
    client_port: int | None = typer.Option(None, help="Client port of node 1 (node k gets +k-1); default: free ports."),
    name: str | None = typer.Option(None, help="Ensemble name (containers are named lab-NAME-zkN)."),
) -> None:
    """Start ZooKeeper and return once every node serves a real client."""
    try:
        Provider.parse(provider)
        previous = state.load()
        if previous is not None:
            if previous.running():
                raise AlreadyUp(f"ensemble {previous.name} is already up at {previous.connect_string}: "
                                f"run `{command('zk down')}` first")
            previous.stop()
            state.forget()
        name = name or f"zk-{uuid.uuid4().hex[:8]}"
        with console.status(f"starting {nodes} ZooKeeper node(s)..."):
            # Peer links stay direct: cuttable links live in the process that starts them, and
            # this one exits now. Partitions are for ensembles started through the Python API.
            ensemble = start(nodes=nodes, provider=provider, name=name, first_client_port=client_port,
                             peer_links=False, workdir=state_dir() / name)
        state.save(ensemble)
    except ZkEnsembleError as error:
        _fail(error)
    _print_status(ensemble)
    typer.echo(f"connect string: {ensemble.connect_string}")


@zk_app.command()
def status() -> None:
    """Show each node of the running ensemble: address, serving or not, leader or follower."""
    try:
        ensemble = state.load()
        if ensemble is None:
            raise NotUp(f"no ZooKeeper is up: start one with `{command('zk up')}`")
    except ZkEnsembleError as error:
        _fail(error)
    _print_status(ensemble)
    typer.echo(f"connect string: {ensemble.connect_string}")


@zk_app.command()
def down() -> None:
    """Stop the ensemble `zk up` started and remove all it left (processes, containers, data)."""
    try:
        ensemble = state.load()
        if ensemble is None:
            typer.echo("no ZooKeeper is up")
            return
        ensemble.stop()
        if ensemble.running():
            raise ZkEnsembleError(f"ensemble {ensemble.name} is still partly running after stop")
        state.forget()
    except ZkEnsembleError as error:
        _fail(error)
    typer.echo(f"stopped {ensemble.provider.value} ensemble {ensemble.name}")


def _print_status(ensemble: Ensemble) -> None:
    table = Table(title=f"ZooKeeper {ensemble.name} ({ensemble.provider.value})")
    for column in ("node", "address", "serving", "mode"):
        table.add_column(column)
    for node in ensemble.nodes:
        mode = node.mode()
        table.add_row(str(node.myid), node.client_address, "yes" if mode.serving else "no", mode.value)
    console.print(table)
