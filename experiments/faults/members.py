"""Member faults: crash, pause, leave and restart, the same for every backend.

A step whose targets are every member of their host process gets real signals on that process
(SIGKILL, SIGSTOP/SIGCONT, SIGTERM). A step on part of a shared host process goes, one member at a
time, through the host's control channel (experiments/run/member_host.py): an emulated crash
black-holes both of the member's links, then the host drops it without a word; an emulated pause
black-holes them and the host stops polling it until the heal; a leave is the host closing just that
member; a restart heals a crashed member's links and has the host start a fresh instance under the
same name. Which of these an action is, and whether it is emulated: experiments/scenario/actions.py.

Each call returns the monotonic time its effect was observed (the process reaped or in state T, the
host's acknowledgment), or None when it was not seen in time.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable

from experiments.faults.process import ChildProcess
from experiments.faults.proxy import ProxyHub, Toxic
from experiments.scenario.actions import LinkFault
from experiments.scenario.model import Schedule

STOP_TIMEOUT_S = 20.0
COMMAND_TIMEOUT_S = 30.0
HOLD = Toxic(kind=LinkFault.PARTITION)   # the black hole an emulated crash or pause puts on both links


class MemberFaults:
    """The member faults of one run. `hosts` is the run's live map of started host processes;
    `start_hosts` starts the host processes of the given members (the runner knows how)."""

    def __init__(self, *, schedule: Schedule, hosts: dict[str, ChildProcess], proxies: ProxyHub,
                 start_hosts: Callable[[Iterable[str]], Awaitable[None]]) -> None:
        self.schedule = schedule
        self.hosts = hosts
        self.proxies = proxies
        self.start_hosts = start_hosts
        self.state: dict[str, str] = {}   # armed | paused | crashed | left; members of started hosts default to running

    def state_of(self, member: str) -> str:
        return self.state.get(member, "running")

    def started(self, member: str) -> bool:
        host = self.hosts.get(self.schedule.host_of(member).name)
        return host is not None and host.running and self.state_of(member) != "armed"

    def arm(self, members: Iterable[str]) -> None:
        """Members whose host process runs armed: they join on their start command."""
        self._set_state(members, "armed")

    def split(self, members: Iterable[str]) -> tuple[list[ChildProcess], list[str]]:
        """Host processes that `members` cover whole (for real signals), and the members of hosts
        they cover in part (for per-member commands). The rule the resolver uses for `emulated`."""
        members = list(members)
        whole = [host.name for host in self.schedule.hosts if host.members and set(host.members) <= set(members)]
        partial = [member for member in members if self.schedule.host_of(member).name not in whole]
        return [self.hosts[name] for name in whole if name in self.hosts], partial

    async def command(self, member: str, op: str) -> int:
        process = self.hosts[self.schedule.host_of(member).name]
        return await process.command(op, member, COMMAND_TIMEOUT_S)

    def _set_state(self, members: Iterable[str], state: str) -> None:
        for member in members:
            self.state[member] = state

    # ---- the faults

    async def start(self, members: Iterable[str], *, due_ns: Iterable[int] | None = None) -> None:
        """Start `members` (a join, a scale up, a host restarted whole): armed ones by a start command each, at
        its `due_ns` (monotonic; default at once), the others by starting their host processes."""
        members = list(members)
        due = list(due_ns) if due_ns is not None else [time.monotonic_ns()] * len(members)
        armed = [(member, at) for member, at in zip(members, due, strict=True) if self.state_of(member) == "armed"]
        others = [member for member in members if self.state_of(member) != "armed"]
        if others:
            await self.start_hosts(others)
            for host in {self.schedule.host_of(member) for member in others}:
                self._set_state(host.members, "running")

        async def start_when_due(member: str, at: int) -> None:
            await asyncio.sleep(max(0.0, (at - time.monotonic_ns()) / 1e9))
            await self.command(member, "start")
            self.state[member] = "running"

        await asyncio.gather(*(start_when_due(member, at) for member, at in armed))

    async def leave(self, members: Iterable[str]) -> int | None:
        members = list(members)
        processes, partial = self.split(members)
        await asyncio.gather(*(process.stop(STOP_TIMEOUT_S) for process in processes))
        seen = [time.monotonic_ns()]
        seen += await asyncio.gather(*(self.command(member, "leave") for member in partial))
        self._set_state(members, "left")
        return max(seen)

    async def crash(self, members: Iterable[str]) -> int | None:
        """SIGKILL; emulated: the links black-holed first (nothing in flight gets out), then dropped."""
        return await self._signal_or_command(members, ChildProcess.crash, lambda process: process.wait_exit(10.0),
                                             links=HOLD, op="crash", state="crashed")

    async def pause(self, members: Iterable[str]) -> int | None:
        """SIGSTOP (seen when the kernel says T); emulated: the links black-holed, then no more polls."""
        return await self._signal_or_command(members, ChildProcess.pause, lambda process: process.wait_state("T"),
                                             links=HOLD, op="pause", state="paused")

    async def resume(self, members: Iterable[str]) -> int | None:
        """SIGCONT; emulated: the links healed first, then polled again."""
        return await self._signal_or_command(members, ChildProcess.resume,
                                             lambda process: process.wait_state("RSD"),
                                             links=None, op="resume", state="running")

    async def _signal_or_command(self, members: Iterable[str], signal: Callable[[ChildProcess], None],
                                 observe: Callable[[ChildProcess], Awaitable[int | None]], *, links: Toxic | None,
                                 op: str, state: str) -> int | None:
        """Signal the host processes covered whole; for members of hosts covered in part, set their
        links first, then send `op` through the control channel. Seen when every effect was."""
        members = list(members)
        processes, partial = self.split(members)
        for process in processes:
            signal(process)
        for member in partial:
            self.proxies.set_toxic(member, "both", links)
        acked = await asyncio.gather(*(self.command(member, op) for member in partial))
        seen = [await observe(process) for process in processes] + list(acked)
        self._set_state(members, state)
        return None if None in seen else max(seen)

    async def restart(self, members: Iterable[str]) -> int | None:
        members = list(members)
        processes, partial = self.split(members)
        for process in processes:
            await process.stop(STOP_TIMEOUT_S)
        if processes:
            await self.start([member for member in members if member not in partial])
        seen = [time.monotonic_ns()]
        for member in partial:
            state = self.state_of(member)
            if state in ("running", "paused"):
                await self.command(member, "leave")      # a restart of a running member: clean stop first
            elif state == "crashed" and self.proxies.proxies(member, "both"):
                self.proxies.set_toxic(member, "both", None)   # a crashed member's links are healed first
            seen.append(await self.command(member, "start"))
            self.state[member] = "running"
        return max(seen)

    # ---- the final heal

    async def heal_all(self) -> None:
        """Resume every stopped host process and every paused member (a pause normally ends at its
        own heal; this is the safety net). Crashed or departed members stay gone."""
        for process in self.hosts.values():
            process.resume()
        for member, state in list(self.state.items()):
            if state == "paused":
                with contextlib.suppress(Exception):
                    await self.command(member, "resume")
                self.state[member] = "running"
