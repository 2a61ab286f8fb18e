"""`rebalance-lab member`: run one or more group members in the foreground.

Both backends, chosen by name: the command builds a `MemberConfig`, asks the backend
registry for a factory, starts the member(s), polls records, prints each member's
assignment whenever it changes, and writes events. Ctrl-C or SIGTERM leaves the group
cleanly (close), flushes the events and exits 0: the experiment runner relies on that.

With `--count K` the members run in one process (`experiments.member_host`): each is polled by a
thread of its own and may have its own ZooKeeper connect string or bootstrap list (`--zk`/`--bootstrap`
given K times, in member order), so that each member's links can pass fault proxies of its own.
`--control-fd` names a socket on which the runner sends commands for single members of the process
(the protocol is described in `experiments.member_host`).
"""

from __future__ import annotations

import signal
import socket
import threading
from pathlib import Path
from typing import Annotated

import typer

from experiments.member_host import Host
from rebalance.events import EventRecorder, NullRecorder
from rebalance.member import MemberConfig, backend_names, get_backend


def register(app: typer.Typer) -> None:
    app.command("member")(member)


def member(
    group: Annotated[str, typer.Option("--group", help="Consumer group id.")],
    topic: Annotated[list[str], typer.Option("--topic", help="Topic to subscribe to (repeatable).")],
    backend: Annotated[str, typer.Option(help="legacy (ZooKeeper, 0.8) or modern (coordinator).")] = "legacy",
    zk: Annotated[list[str] | None, typer.Option(
        help="ZooKeeper HOST:PORT or HOST:PORT/chroot (legacy); with --count K, once for all members "
             "or K times, one per member in order.")] = None,
    bootstrap: Annotated[list[str] | None, typer.Option(
        help="Broker HOST:PORT[,HOST:PORT] (modern; legacy finds brokers in ZooKeeper); with --count K, "
             "once for all members or K times, one per member in order.")] = None,
    strategy: Annotated[str, typer.Option(help="Assignment strategy (legacy: range, roundrobin).")] = "range",
    name: Annotated[str | None, typer.Option("--id", help="Member name (legacy consumer.id, modern client.id).")] = None,
    instance_id: Annotated[str | None, typer.Option(help="Static membership id (modern).")] = None,
    session_timeout_ms: Annotated[int, typer.Option(min=1, help="Session timeout in ms.")] = 6000,
    config: Annotated[
        list[str] | None, typer.Option(help="KEY=VALUE backend setting by its Kafka name (repeatable).")
    ] = None,
    events: Annotated[Path | None, typer.Option(help="Write events (JSON lines) to this file.")] = None,
    run_id: Annotated[str, typer.Option(help="Run id written into every event.")] = "",
    count: Annotated[int, typer.Option(min=1, help="Run this many members in this process (NAME-0..NAME-K-1).")] = 1,
    control_fd: Annotated[int | None, typer.Option(
        help="A connected socket (file descriptor) carrying per-member commands, one JSON per line "
             "(the experiment runner's).")] = None,
) -> None:
    """Run group member(s) in the foreground, printing assignments as they change."""
    if backend not in backend_names():
        _fail(f"--backend {backend!r}: choose one of {', '.join(backend_names())}")
    if backend == "legacy" and not zk:
        _fail("--zk HOST:PORT[/chroot] is required for the legacy backend")
    if backend == "modern" and not bootstrap:
        _fail("--bootstrap HOST:PORT is required for the modern backend")
    zk_list = _per_member("--zk", zk, count)
    bootstrap_list = _per_member("--bootstrap", bootstrap, count)
    extra = _parse_settings(config or [])
    names = [name] if count == 1 else [f"{name or 'member'}-{index}" for index in range(count)]
    configs = {
        member_name: MemberConfig(
            group=group,
            topics=tuple(topic),
            strategy=strategy,
            member_name=member_name,
            group_instance_id=f"{instance_id}-{index}" if instance_id and count > 1 else instance_id,
            zk_connect=zk_list[index],
            bootstrap=bootstrap_list[index],
            session_timeout_ms=session_timeout_ms,
            extra=extra,
        )
        for index, member_name in enumerate(names)
    }
    control = None
    if control_fd is not None:
        try:
            control = socket.socket(fileno=control_fd)
        except OSError as error:
            _fail(f"--control-fd {control_fd}: not a socket ({error.strerror})")
    recorder = EventRecorder(events, run_id=run_id, backend=backend) if events else NullRecorder()
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        factory = get_backend(backend)
        host = Host(factory, configs, recorder, stop)
        try:
            for member_name in names:
                host.make(member_name)
        except ValueError as error:
            _fail(str(error))
        if control is not None:
            threading.Thread(target=host.read_commands, args=(control,), daemon=True).start()
        code = host.run()
    finally:
        recorder.close()
    raise typer.Exit(code)


def _per_member(option: str, values: list[str] | None, count: int) -> list[str | None]:
    """One address list per member: given once (shared) or once per member."""
    if not values:
        return [None] * count
    if len(values) == 1:
        return list(values) * count
    if len(values) != count:
        _fail(f"{option} was given {len(values)} times: give it once (shared by all members) or once per member "
              f"(--count {count})")
    return list(values)


def _parse_settings(pairs: list[str]) -> dict[str, object]:
    settings: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            _fail(f"--config {pair!r}: expected KEY=VALUE, e.g. rebalance.max.retries=4")
        settings[key.strip()] = _typed(value.strip())
    return settings


def _typed(text: str) -> object:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return int(text)
    except ValueError:
        return text


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)
