"""`rebalance-lab member`: run one or more group members in the foreground.

Both backends, chosen by name: the command builds a `MemberConfig`, asks the backend
registry for a factory, starts the member(s), polls records, prints each member's
assignment whenever it changes, and writes events. Ctrl-C or SIGTERM leaves the group
cleanly (close), flushes the events and exits 0: the experiment runner relies on that.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from rebalance.events import EventRecorder, NullRecorder
from rebalance.member import MemberConfig, backend_names, get_backend

console = Console(highlight=False)
_IDLE_SLEEP_S = 0.05


def register(app: typer.Typer) -> None:
    app.command("member")(member)


def member(
    group: Annotated[str, typer.Option("--group", help="Consumer group id.")],
    topic: Annotated[list[str], typer.Option("--topic", help="Topic to subscribe to (repeatable).")],
    backend: Annotated[str, typer.Option(help="legacy (ZooKeeper, 0.8) or modern (coordinator).")] = "legacy",
    zk: Annotated[str | None, typer.Option(help="ZooKeeper HOST:PORT or HOST:PORT/chroot (legacy).")] = None,
    bootstrap: Annotated[
        str | None, typer.Option(help="Broker HOST:PORT (modern; legacy finds brokers in ZooKeeper).")
    ] = None,
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
) -> None:
    """Run group member(s) in the foreground, printing assignments as they change."""
    if backend not in backend_names():
        _fail(f"--backend {backend!r}: choose one of {', '.join(backend_names())}")
    if backend == "legacy" and not zk:
        _fail("--zk HOST:PORT[/chroot] is required for the legacy backend")
    if backend == "modern" and not bootstrap:
        _fail("--bootstrap HOST:PORT is required for the modern backend")
    extra = _parse_settings(config or [])
    names = [name] if count == 1 else [f"{name or 'member'}-{index}" for index in range(count)]
    configs = [
        MemberConfig(
            group=group,
            topics=tuple(topic),
            strategy=strategy,
            member_name=member_name,
            group_instance_id=f"{instance_id}-{index}" if instance_id and count > 1 else instance_id,
            zk_connect=zk,
            bootstrap=bootstrap,
            session_timeout_ms=session_timeout_ms,
            extra=extra,
        )
        for index, member_name in enumerate(names)
    ]
    recorder = EventRecorder(events, run_id=run_id, backend=backend) if events else NullRecorder()
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        factory = get_backend(backend)
        members = []
        try:
            for member_config in configs:
                members.append(factory(member_config, recorder=recorder))
        except ValueError as error:
            _fail(str(error))
        code = _run(members, stop)
    finally:
        recorder.close()
    raise typer.Exit(code)


def _run(members: list, stop: threading.Event) -> int:
    started = []
    try:
        for group_member in members:
            if stop.is_set():
                break
            try:
                group_member.start()
            except Exception as error:
                console.print(f"[red]could not start {group_member.member_id}: {type(error).__name__}: {error}[/red]")
                _close_one(group_member, quiet=True)
                return 1
            started.append(group_member)
            console.print(f"[bold]{group_member.member_id}[/bold] started")
        _consume(started, stop)
    finally:
        _close_all(started)
    return 0


def _consume(members: list, stop: threading.Event) -> None:
    shown: dict[str, tuple | None] = {m.member_id: None for m in members}
    consumed = {m.member_id: 0 for m in members}
    while not stop.is_set():
        got_any = False
        for group_member in members:
            records = group_member.poll(0.0 if len(members) > 1 else 0.1)
            consumed[group_member.member_id] += len(records)
            got_any = got_any or bool(records)
            owned = tuple(sorted(map(str, group_member.assignment())))
            note = getattr(group_member, "status", "")  # a backend may say why it owns nothing
            if (owned, note) != shown[group_member.member_id]:
                shown[group_member.member_id] = (owned, note)
                stamp = time.strftime("%H:%M:%S")
                text = ", ".join(owned) if owned else "[yellow]nothing[/yellow]"
                note_text = f" [red]({escape(note)})[/red]" if note else ""
                console.print(
                    f"{stamp} [bold]{group_member.member_id}[/bold] owns {text}{note_text}"
                    f"  [dim](consumed so far: {consumed[group_member.member_id]})[/dim]"
                )
        if not got_any and len(members) > 1:
            stop.wait(_IDLE_SLEEP_S)


def _close_all(members: list) -> None:
    """Leave in parallel: a large group in one process should not leave one by one."""
    threads = [threading.Thread(target=_close_one, args=(m,), daemon=True) for m in members]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)


def _close_one(group_member, quiet: bool = False) -> None:
    try:
        group_member.close()
        if not quiet:
            console.print(f"[bold]{group_member.member_id}[/bold] left the group")
    except Exception as error:
        console.print(f"[red]{group_member.member_id}: close failed: {type(error).__name__}: {error}[/red]")


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
