"""`rebalance-lab broker`, `rebalance-lab topic create` and `rebalance-lab produce`."""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated

import typer

from broker.advertise import parse_host_port

COORDINATOR = "modern.coordinator.service:CoordinatorExtension"
READY_LINE = "READY"  # printed on stdout once the broker listens: "READY <node id> <host>:<port>"

log = logging.getLogger("broker")


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def parse_peers(text: str) -> dict[int, str]:
    """"0=127.0.0.1:9092,1=127.0.0.1:9093" -> {0: "127.0.0.1:9092", 1: "127.0.0.1:9093"}."""
    peers = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        node, sep, address = item.partition("=")
        if not sep or not node.strip().isdigit():
            raise ValueError(f"peer {item!r} is not ID=HOST:PORT")
        parse_host_port(address.strip())
        peers[int(node)] = address.strip()
    return peers


def load_extensions(with_coordinator: bool, *, load_delay_ms: int | None = None) -> list:
    """The group coordinator, configured from the environment (and `load_delay_ms` when given)."""
    if not with_coordinator:
        return []
    module_name, _, class_name = COORDINATOR.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        log.info("no group coordinator (%s): serving without the group APIs", error)
        return []
    return [getattr(module, class_name)(module.CoordinatorConfig.from_env(load_delay_ms=load_delay_ms))]


def broker_command(
    node_id: int = typer.Option(0, "--id", help="Broker id (node id)."),
    port: int = typer.Option(9092, help="Port to listen on (0: any free port)."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    zk: str | None = typer.Option(None, help="Legacy mode: register in ZooKeeper, HOST:PORT or HOST:PORT/CHROOT."),
    data_dir: Annotated[Path | None, typer.Option(help="Keep partitions in segment files here (may be shared).")] = None,
    advertise: str | None = typer.Option(None, help="HOST:PORT given to clients (default: where it listens)."),
    advertise_map: Annotated[Path | None, typer.Option(help='JSON {"client_id": {"broker_id": "host:port"}}.')] = None,
    peers: str = typer.Option("", help="The other brokers: ID=HOST:PORT,ID=HOST:PORT."),
    default_partitions: int = typer.Option(1, help="Partitions of auto-created topics."),
    no_coordinator: bool = typer.Option(False, "--no-coordinator", help="Do not load the group coordinator."),
    broker_session_timeout_ms: int = typer.Option(
        0, help="Declare a peer dead after it has not answered for this long (0: at the first failed probe; "
                "Kafka: 9000)."),
    fail_back_delay_ms: int = typer.Option(
        0, help="A returning broker leads its preferred partitions again only after this long (0: at once; "
                "Kafka: up to 300000, the preferred-leader election)."),
    coordinator_load_delay_ms: int | None = typer.Option(
        None, help="After taking a __consumer_offsets partition, answer COORDINATOR_LOAD_IN_PROGRESS this long "
                   "(default: REBALANCE_LAB_COORDINATOR_LOAD_DELAY_MS, else 0)."),
    exit_with: int = typer.Option(0, help="Stop when the process with this pid is gone (0: never)."),
    events: Annotated[Path | None, typer.Option(help="JSONL file for the broker's broker_liveness events.")] = None,
    run_id: str = typer.Option("", help="run_id written into the events."),
    liveness_interval_ms: int = typer.Option(
        250, help="How often the broker's liveness sampler looks at its event loop (0: no sampler)."),
    asyncio_debug: bool = typer.Option(
        False, "--asyncio-debug", help="asyncio's debug mode, with its slow-callback warning (callbacks over 0.5 s) "
                                       "in the log; it doubles the broker's CPU a request (also PYTHONASYNCIODEBUG=1)."),
    log_level: str = typer.Option("INFO", help="Python log level."),
) -> None:
    """Run one broker of the lab's Kafka-protocol cluster until SIGTERM/SIGINT."""
    from broker.server import Broker, BrokerConfig

    try:
        peer_map = parse_peers(peers)
        if advertise:
            parse_host_port(advertise)
    except ValueError as error:
        _fail(str(error))
    if not 0 <= port < 65536:
        _fail(f"port {port} is outside 0-65535")
    if default_partitions < 1:
        _fail("--default-partitions must be at least 1")
    for name, value in (("--broker-session-timeout-ms", broker_session_timeout_ms),
                        ("--fail-back-delay-ms", fail_back_delay_ms),
                        ("--coordinator-load-delay-ms", coordinator_load_delay_ms or 0),
                        ("--liveness-interval-ms", liveness_interval_ms)):
        if value < 0:
            _fail(f"{name} must not be negative")
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format=f"%(asctime)s broker-{node_id} %(levelname)s %(name)s: %(message)s")
    config = BrokerConfig(node_id=node_id, host=host, port=port, advertise=advertise, advertise_map=advertise_map,
                          data_dir=data_dir, peers=peer_map, zk=zk, default_partitions=default_partitions,
                          broker_session_timeout_s=broker_session_timeout_ms / 1000,
                          fail_back_delay_s=fail_back_delay_ms / 1000,
                          liveness_interval_s=liveness_interval_ms / 1000, events_path=events, run_id=run_id)
    broker = Broker(config, extensions=load_extensions(not no_coordinator, load_delay_ms=coordinator_load_delay_ms))

    async def main() -> None:
        loop = asyncio.get_running_loop()
        current = asyncio.current_task()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, current.cancel)
        await broker.start()
        print(f"{READY_LINE} {node_id} {broker.address[0]}:{broker.address[1]}", flush=True)
        watcher = loop.create_task(_cancel_when_gone(exit_with, current)) if exit_with else None
        try:
            await broker.serve_until_failure()
        finally:
            if watcher is not None:
                watcher.cancel()
            await broker.stop()

    try:
        asyncio.run(main(), debug=True if asyncio_debug else None)   # None: PYTHONASYNCIODEBUG decides
    except asyncio.CancelledError:
        pass
    except OSError as error:
        _fail(f"broker {node_id} cannot listen on {host}:{port}: {error}")


async def _cancel_when_gone(pid: int, task: asyncio.Task) -> None:
    """Cancel `task` once process `pid` no longer exists (a test run that died must not leave brokers)."""
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            log.warning("process %s is gone: stopping", pid)
            task.cancel()
            return
        except PermissionError:
            pass  # exists, owned by someone else
        await asyncio.sleep(1.0)  # a liveness check period, not a wait for state


topic_app = typer.Typer(help="Topics on the lab's brokers.", no_args_is_help=True)


@topic_app.command("create")
def topic_create(
    name: str = typer.Argument(..., help="Topic name."),
    bootstrap: str = typer.Option("127.0.0.1:9092", help="Any broker, HOST:PORT."),
    partitions: int = typer.Option(1, help="Number of partitions."),
    compact: bool = typer.Option(False, help="cleanup.policy=compact."),
) -> None:
    """Create a topic through the CreateTopics API."""
    from broker.admin import TopicError, create_topic

    try:
        create_topic(bootstrap, name, partitions, compacted=compact)
    except (TopicError, ValueError, OSError) as error:
        _fail(str(error))
    typer.echo(f"created {name} ({partitions} partitions)")


def produce_command(
    bootstrap: str = typer.Option(..., help="Broker address(es), HOST:PORT[,HOST:PORT]."),
    topic: str = typer.Option(..., help="Topic to produce to (created if missing)."),
    partitions: int = typer.Option(50, help="Partitions of the topic; records are spread over them."),
    rate: float = typer.Option(600.0, help="Records per second."),
    duration: float = typer.Option(60.0, help="Seconds to produce for."),
    events: Annotated[Path | None, typer.Option(help="JSONL file for record_produced events.")] = None,
    keyed: bool = typer.Option(False, help="Key records by sequence number instead of round-robin."),
    run_id: str = typer.Option("", help="run_id written into the events."),
) -> None:
    """Produce records at a steady rate: values {"seq": N, "ts_ms": wall ms}."""
    from broker.workload import ProducerWorkload, WorkloadConfig

    try:
        config = WorkloadConfig(bootstrap=bootstrap, topic=topic, partitions=partitions, rate=rate,
                                duration_s=duration, keyed=keyed)
    except ValueError as error:
        _fail(str(error))
    from kafka.errors import KafkaError

    from broker.admin import TopicError

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # stop early, but still flush and report
    try:
        summary = ProducerWorkload(config, events_path=events, run_id=run_id).run(stop)
    except (TopicError, KafkaError) as error:
        _fail(f"cannot produce to {topic} at {bootstrap}: {error}")
    typer.echo(f"produced {summary.acknowledged} records ({summary.failed} failed) in {summary.elapsed_s:.1f} s")
    if summary.failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("broker")(broker_command)
    app.command("produce")(produce_command)
    app.add_typer(topic_app, name="topic")


if __name__ == "__main__":    # python -m broker.cli produce ...: the broker's commands without the rest of the lab's
    commands = typer.Typer(add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True)
    register(commands)
    commands()
