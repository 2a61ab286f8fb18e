"""Several group members in one process, each polled by a thread of its own, steered per member.

The host behind `rebalance-lab member --count K` (or `--member-configs FILE`, the runner's way: one JSON
list of the members' `MemberConfig`s). The experiment runner sends it commands for single members on a
control socket, one JSON object per line:

    {"id": 1, "op": "crash" | "pause" | "resume" | "leave" | "start", "member": "h000-1"}

and reads one reply per command: {"id": 1, "ok": true, "ts_ns": ...} (`ts_ns`: CLOCK_MONOTONIC
when the command took effect) or {"id": 1, "ok": false, "error": "..."}. `crash` drops the member
at once as SIGKILL would (no commit, no leave, no session close, no more events for it); `pause`
stops polling it until `resume` (acknowledged once a poll under way has returned); `leave` closes it
cleanly; `start` starts a fresh instance of a crashed or departed member under its name, or starts an armed one.

An armed host (`--armed`, the runner's way for members that join at a timeline step) comes up, makes its
members' clients and opens their connections (a member's `prepare()`, where it has one), and then waits: each
member joins its group only on its `start` command. So a join wave starts at the moment the runner chose, not
when two busy cores have finished starting ten Python processes.

With a workload (experiments.run.handling) each member's polling thread handles the records a poll returned,
each for its service time, before it polls again: a crash ends the handling at once, a pause stops it where it
is (and is acknowledged without waiting for the batch), a leave lets the member finish its batch first.
"""

from __future__ import annotations

import json
import queue
import socket
import threading
import time
from collections.abc import Callable

from rich.console import Console
from rich.markup import escape

from experiments.run.handling import Handler
from experiments.scenario.model import WorkloadSpec
from rebalance import events as ev
from rebalance.events import EventRecorder
from rebalance.member import Member, MemberConfig
from rebalance.process_memory import SAMPLE_EVERY_S, rss_bytes

console = Console(highlight=False)
_IDLE_SLEEP_S = 0.05
# How long one poll of a member may wait for records. An idle Java consumer's poll returns once per
# fetch.max.wait.ms (500 ms, the broker's long-poll answer) and only then acts on a rebalance its heartbeat
# thread heard of; a member here polls on the same rhythm. Shorter waits only spend CPU: at 0.1 s, 25
# members' client threads woke 7,000 times a second and a host of 25 used a quarter of a core (kafka-python's
# consumer on the data path; see benchmarks/bench_fetch_idle.py for the lab's own).
POLL_WAIT_S = 0.5
PAUSE_WAIT_S = 10.0
# On a stop, how long the members' batches may take before the host gives up on their clean leave: below the
# runner's 20 s before it kills the process (experiments.faults.members.STOP_TIMEOUT_S), leaving room to leave.
STOP_WAIT_S = 15.0
# A member's client may fail to reach the brokers when a thousand start at once on two cores (kafka-python
# bootstraps in its constructor; Java's client would only connect later): the warm-up starts it again.
START_ATTEMPTS = 3
COMMANDS = ("crash", "pause", "resume", "leave", "start")


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
        self.state = "new"       # new | armed | running | paused | crashed | leaving | left | starting
        self.lock = threading.Lock()   # held while its member acts: inside poll(), a commit, an event of handling
        self.batch = threading.Lock()  # held from a poll until its records are handled (a leave waits for it)
        self.wake = threading.Event()  # set on every change of state: ends a service time's sleep
        self.consumed = 0
        self.shown: tuple | None = None


class Host:
    """The members of one process, each polled by a thread of its own (a member blocked in a call,
    e.g. a commit on a cut-off link, holds up only itself). Commands from the control socket are
    applied on the main thread, or handed to a worker when they may block."""

    def __init__(self, factory: Callable[..., Member], configs: dict[str, MemberConfig], recorder: EventRecorder,
                 stop: threading.Event, *, workload: WorkloadSpec | None = None, seed: int = 0,
                 armed: bool = False) -> None:
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
        self.armed = armed
        workload = workload or WorkloadSpec()
        self.handler = Handler(workload, seed, stop, log=console.print) if workload.handles else None

    def make(self, name: str) -> None:
        slot = self.slots[name]
        slot.gate = _Gate(self.recorder)
        slot.member = self.factory(self.configs[name], recorder=slot.gate)

    def arm(self) -> None:
        """Every member made and, where its client can, connected; none joins until its `start` command."""
        for slot in self.slots.values():
            prepare = getattr(slot.member, "prepare", None)
            if prepare is not None:
                prepare()
            slot.state = "armed"
        console.print(f"armed: {', '.join(self.slots)} (each joins on its start command)")

    # ---- the main thread

    def run(self) -> int:
        try:
            for slot in self.slots.values():
                if self.stop.is_set() or self.armed:
                    break
                if not self._first_start(slot):
                    return 1
            next_sample = 0.0
            while not self.stop.is_set():
                self._apply_commands()
                if time.monotonic() >= next_sample:   # a soak's memory check reads these
                    self.recorder.emit(ev.PROCESS_MEMORY, rss_bytes=rss_bytes())
                    next_sample = time.monotonic() + SAMPLE_EVERY_S
                self.stop.wait(_IDLE_SLEEP_S)
        finally:
            self.stop.set()
            for slot in self.slots.values():
                slot.wake.set()
            self._wait_for_leaves()
            _close_all([slot.member for slot in self.slots.values() if slot.state in ("running", "paused")])
        if self.failure:
            console.print(f"[red]{escape(self.failure)}[/red]")
            return 1
        return 0

    def _first_start(self, slot: _Slot) -> bool:
        """Start a member of the warm-up, a fresh instance per attempt, up to START_ATTEMPTS."""
        for attempt in range(1, START_ATTEMPTS + 1):
            if attempt > 1:
                self.make(slot.name)
            if self._start(slot):
                return True
            close_one(slot.member, quiet=True)
            slot.state = "left"
            if attempt < START_ATTEMPTS and not self.stop.wait(attempt):
                console.print(f"starting {slot.name} again (attempt {attempt + 1} of {START_ATTEMPTS})")
        return False

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
        """Poll one member instance until the process stops or the instance is crashed, left or replaced. When
        the process stops, the member leaves as soon as its own batch is handled, as a pod's container stops
        its one consumer: its neighbours' batches do not hold it up."""
        while not self.stop.is_set() and slot.member is group_member and slot.state in ("running", "paused"):
            if slot.state == "paused":
                self.stop.wait(_IDLE_SLEEP_S)
                continue
            with slot.batch:
                if not self._poll_once(slot, group_member):
                    return
        if self.stop.is_set() and slot.member is group_member and slot.state == "running":
            with slot.lock:
                slot.state = "leaving"
                close_one(group_member)
                slot.state = "left"

    def _wait_for_leaves(self) -> None:
        """Give every polling thread until STOP_WAIT_S to finish its batch and leave; a member still handling
        its batch then is named: the runner kills the process soon after, so it never leaves cleanly."""
        deadline = time.monotonic() + STOP_WAIT_S
        for poller in self._pollers:
            poller.join(max(0.0, deadline - time.monotonic()))
        for slot in self.slots.values():
            if slot.state == "running" and slot.batch.locked():
                self.recorder.emit(ev.MEMBER_STOPPED, slot.member.member_id,
                                   reason=f"stop: still handling its batch after {STOP_WAIT_S:.0f} s; killed "
                                          "before it could leave")
                console.print(f"[red]{slot.name}: still handling its batch {STOP_WAIT_S:.0f} s after the stop: "
                              "it will be killed, not leave[/red]")

    def _poll_once(self, slot: _Slot, group_member) -> bool:
        """One poll, then the application's handling of its records; False when the thread should end."""
        with slot.lock:
            if slot.state != "running" or slot.member is not group_member:
                return True
            try:
                records = group_member.poll(POLL_WAIT_S)
                owned = tuple(sorted(map(str, group_member.assignment())))
            except Exception as error:
                if slot.state == "running" and slot.member is group_member:
                    self.failure = f"{group_member.member_id}: poll failed: {type(error).__name__}: {error}"
                    self.stop.set()
                return False   # a crashed member may fail on its way out: it is gone either way
        self._show(slot, group_member, records, owned)
        return self.handler is None or self.handler.handle(slot, group_member, records)

    def _show(self, slot: _Slot, group_member, records: list, owned: tuple[str, ...]) -> None:
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
                    "leave": ("running", "paused"), "start": ("crashed", "left", "armed")}[op]
        if slot.state not in expected:
            return self.reply(ident, error=f"cannot {op} {name}: it is {slot.state}")
        if op == "crash":
            slot.gate.close()      # nothing more from it, from this instant
            slot.state = "crashed"
            slot.wake.set()        # after each change of state: a service time's sleep looks at it again
            console.print(f"[bold]{name}[/bold] crashed (emulated: dropped without leaving)")
            self.reply(ident)
            threading.Thread(target=_abandon, args=(slot.member,), daemon=True).start()
        elif op == "pause":
            slot.state = "paused"  # its polling thread polls no more
            slot.wake.set()

            def pause() -> None:
                # Acknowledged once a poll under way has returned: from then on nothing is polled. A poll held
                # up in a call longer than that (a commit on a cut-off link) is not waited for.
                if slot.lock.acquire(timeout=PAUSE_WAIT_S):
                    slot.lock.release()
                console.print(f"[bold]{name}[/bold] paused (not polled)")
                self.reply(ident)

            threading.Thread(target=pause, daemon=True).start()
        elif op == "resume":
            resumed_ns = time.monotonic_ns()   # the effect's moment: its thread may poll before the reply is sent
            slot.state = "running"
            slot.wake.set()
            console.print(f"[bold]{name}[/bold] resumed")
            self.reply(ident, at_ns=resumed_ns)
        elif op == "leave":
            slot.state = "leaving"
            slot.wake.set()

            def leave() -> None:
                with slot.batch, slot.lock:    # after a poll under way and the handling of its records
                    close_one(slot.member)
                slot.state = "left"
                self.reply(ident)

            threading.Thread(target=leave, daemon=True).start()
        else:  # start
            fresh = slot.state != "armed"    # an armed member's client is made already
            slot.state = "starting"

            def start() -> None:
                try:
                    if fresh:
                        self.make(name)
                except ValueError as error:
                    slot.state = "crashed"
                    self.reply(ident, error=str(error))
                    return
                if self._start(slot):
                    self.reply(ident)
                else:
                    close_one(slot.member, quiet=True)
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

    def reply(self, ident: object, *, error: str | None = None, at_ns: int | None = None) -> None:
        """Answer a command; `ts_ns` is when its effect took place (`at_ns`), by default now."""
        answer = {"id": ident, "ok": error is None, "ts_ns": time.monotonic_ns() if at_ns is None else at_ns}
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
    threads = [threading.Thread(target=close_one, args=(m,), daemon=True) for m in members]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)


def close_one(group_member, quiet: bool = False) -> None:
    try:
        group_member.close()
        if not quiet:
            console.print(f"[bold]{group_member.member_id}[/bold] left the group")
    except Exception as error:
        console.print(f"[red]{group_member.member_id}: close failed: {type(error).__name__}: {error}[/red]")
