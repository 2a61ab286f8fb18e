"""`rebalance-lab member`: run one or more group members in the foreground.

Both backends, chosen by name: the command builds a `MemberConfig`, asks the backend
registry for a factory, starts the member(s), polls records, prints each member's
assignment whenever it changes, and writes events. Ctrl-C or SIGTERM leaves the group
cleanly (close), flushes the events and exits 0: the experiment runner relies on that.

With `--count K` each member is polled by a thread of its own (one member blocked in a call holds
up only itself) and may have its own ZooKeeper connect string or bootstrap list (`--zk`/`--bootstrap`
given K times, in member order), so that each member's links can pass fault proxies of its own. `--control-fd` names a socket on which the runner
sends commands for single members of the process, one JSON object per line:

    {"id": 1, "op": "crash" | "pause" | "resume" | "leave" | "start", "member": "h000-1"}

and reads one reply per command: {"id": 1, "ok": true, "ts_ns": ...} (`ts_ns`: CLOCK_MONOTONIC
when the command took effect) or {"id": 1, "ok": false, "error": "..."}. `crash` drops the member
at once as SIGKILL would (no commit, no leave, no session close, no more events for it); `pause`
stops polling it until `resume`; `leave` closes it cleanly; `start` starts a fresh instance
of a crashed or departed member under its name.
"""

from __future__ import annotations

import json
import queue
import signal
import socket
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
COMMANDS = ("crash", "pause", "resume", "leave", "start")


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


class _Gate:
    """A member's view of the process's event recorder, closed for good when the member is crashed:
    a killed member writes nothing more."""

    def __init__(self, recorder: EventRecorder) -> None:
        self._recorder = recorder
        self._lock = threading.Lock()
        self.open = True

    def emit(self, type: str, member: str = "", **fields: object) -> dict:
        with self._lock:   # an event is written before close() returns, or not at all
            if not self.open:
                return {}
            return self._recorder.emit(type, member, **fields)

    def close(self) -> None:
        with self._lock:
            self.open = False

    def __getattr__(self, name: str):
        return getattr(self._recorder, name)


class _Slot:
    """One member of the process: its current instance and what the host does with it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.member = None
        self.gate: _Gate | None = None
        self.state = "new"       # new | running | paused | crashed | leaving | left | starting
        self.lock = threading.Lock()   # held while its polling thread is inside poll()
        self.consumed = 0
        self.shown: tuple | None = None


class Host:
    """The members of one process, each polled by a thread of its own (a member blocked in a call,
    e.g. a commit on a cut-off link, holds up only itself). Commands from the control socket are
    applied on the main thread, or handed to a worker when they may block."""

    def __init__(self, factory, configs: dict[str, MemberConfig], recorder: EventRecorder,
                 stop: threading.Event) -> None:
        self.factory = factory
        self.configs = configs
        self.recorder = recorder
        self.stop = stop
        self.slots = {name: _Slot(name) for name in configs}
        self.commands: queue.Queue = queue.Queue()
        self.failure: str | None = None
        self._pollers: list[threading.Thread] = []
        self._reply_lock = threading.Lock()
        self._control: socket.socket | None = None

    def make(self, name: str) -> None:
        slot = self.slots[name]
        slot.gate = _Gate(self.recorder)
        slot.member = self.factory(self.configs[name], recorder=slot.gate)

    # ---- the main thread

    def run(self) -> int:
        try:
            for slot in self.slots.values():
                if self.stop.is_set():
                    break
                if not self._start(slot):
                    _close_one(slot.member, quiet=True)
                    slot.state = "left"
                    return 1
            while not self.stop.is_set():
                self._apply_commands()
                self.stop.wait(_IDLE_SLEEP_S)
        finally:
            self.stop.set()
            for poller in self._pollers:
                poller.join(15)
            _close_all([slot.member for slot in self.slots.values() if slot.state in ("running", "paused")])
        if self.failure:
            console.print(f"[red]{escape(self.failure)}[/red]")
            return 1
        return 0

    def _start(self, slot: _Slot) -> bool:
        try:
            slot.member.start()
        except Exception as error:
            console.print(f"[red]could not start {slot.member.member_id}: {type(error).__name__}: {error}[/red]")
            return False
        slot.shown = None
        slot.state = "running"
        poller = threading.Thread(target=self._poll, args=(slot, slot.member), name=f"poll-{slot.name}", daemon=True)
        self._pollers.append(poller)
        poller.start()
        console.print(f"[bold]{slot.member.member_id}[/bold] started")
        return True

    def _poll(self, slot: _Slot, group_member) -> None:
        """Poll one member instance until the process stops or the instance is crashed, left or replaced."""
        while not self.stop.is_set() and slot.member is group_member and slot.state in ("running", "paused"):
            if slot.state == "paused":
                self.stop.wait(_IDLE_SLEEP_S)
                continue
            with slot.lock:
                if slot.state != "running" or slot.member is not group_member:
                    continue
                try:
                    records = group_member.poll(0.1)
                    owned = tuple(sorted(map(str, group_member.assignment())))
                except Exception as error:
                    if slot.state == "running" and slot.member is group_member:
                        self.failure = f"{group_member.member_id}: poll failed: {type(error).__name__}: {error}"
                        self.stop.set()
                    return   # a crashed member may fail on its way out: it is gone either way
            slot.consumed += len(records)
            note = getattr(group_member, "status", "")  # a backend may say why it owns nothing
            if (owned, note) != slot.shown:
                slot.shown = (owned, note)
                stamp = time.strftime("%H:%M:%S")
                text = ", ".join(owned) if owned else "[yellow]nothing[/yellow]"
                note_text = f" [red]({escape(note)})[/red]" if note else ""
                console.print(
                    f"{stamp} [bold]{group_member.member_id}[/bold] owns {text}{note_text}"
                    f"  [dim](consumed so far: {slot.consumed})[/dim]"
                )

    def _apply_commands(self) -> None:
        while True:
            try:
                command = self.commands.get_nowait()
            except queue.Empty:
                return
            self._apply(command)

    def _apply(self, command: dict) -> None:
        op, name, ident = command.get("op"), command.get("member"), command.get("id")
        slot = self.slots.get(name)
        if op not in COMMANDS:
            return self.reply(ident, error=f"unknown op {op!r} (expected one of: {', '.join(COMMANDS)})")
        if slot is None:
            return self.reply(ident, error=f"no member {name!r} in this process "
                                           f"(it runs {', '.join(self.slots)})")
        expected = {"crash": ("running", "paused"), "pause": ("running",), "resume": ("paused",),
                    "leave": ("running", "paused"), "start": ("crashed", "left")}[op]
        if slot.state not in expected:
            return self.reply(ident, error=f"cannot {op} {name}: it is {slot.state}")
        if op == "crash":
            slot.gate.close()      # nothing more from it, from this instant
            slot.state = "crashed"
            console.print(f"[bold]{name}[/bold] crashed (emulated: dropped without leaving)")
            self.reply(ident)
            threading.Thread(target=_abandon, args=(slot.member,), daemon=True).start()
        elif op == "pause":
            slot.state = "paused"  # its polling thread polls no more (a poll under way finishes)
            console.print(f"[bold]{name}[/bold] paused (not polled)")
            self.reply(ident)
        elif op == "resume":
            slot.state = "running"
            console.print(f"[bold]{name}[/bold] resumed")
            self.reply(ident)
        elif op == "leave":
            slot.state = "leaving"

            def leave() -> None:
                with slot.lock:    # after a poll under way
                    _close_one(slot.member)
                slot.state = "left"
                self.reply(ident)

            threading.Thread(target=leave, daemon=True).start()
        else:  # start
            slot.state = "starting"

            def start() -> None:
                try:
                    self.make(name)
                except ValueError as error:
                    slot.state = "crashed"
                    self.reply(ident, error=str(error))
                    return
                if self._start(slot):
                    self.reply(ident)
                else:
                    _close_one(slot.member, quiet=True)
                    slot.state = "left"
                    self.reply(ident, error=f"{name} could not start")

            threading.Thread(target=start, daemon=True).start()

    # ---- the control socket

    def read_commands(self, control: socket.socket) -> None:
        self._control = control
        with control.makefile("rb") as lines:
            for raw in lines:
                try:
                    command = json.loads(raw)
                    if not isinstance(command, dict):
                        raise ValueError("not an object")
                except ValueError as error:
                    self.reply(None, error=f"bad command {raw[:200]!r}: {error}")
                    continue
                self.commands.put(command)

    def reply(self, ident: object, *, error: str | None = None) -> None:
        answer = {"id": ident, "ok": error is None, "ts_ns": time.monotonic_ns()}
        if error is not None:
            answer["error"] = error
            console.print(f"[red]control: {escape(error)}[/red]")
        if self._control is None:
            return
        with self._reply_lock:
            try:
                self._control.sendall((json.dumps(answer) + "\n").encode())
            except OSError:
                pass   # the runner is gone; the parent-death signal ends this process


def _abandon(group_member) -> None:
    try:
        group_member.abandon()
    except Exception as error:  # the member is gone either way
        console.print(f"[red]{group_member.member_id}: abandon: {type(error).__name__}: {error}[/red]")


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
