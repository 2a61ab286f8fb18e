"""Child processes of a run (member hosts, the producer), so that SIGKILL and SIGSTOP mean what they say.

A member host process may also have a control channel (`control=True`): a socket pair, the child's
end passed as `--control-fd N`, carrying per-member commands one JSON object per line and a reply
per command (see experiments/run/member_host.py); `command()` sends one and waits for its reply.

Every child starts in its own session (its own process group: a Ctrl-C in the terminal reaches only
the runner, which then stops the children in order) and with a parent-death signal, so that even
a runner killed with SIGKILL leaves nothing behind. Signals go to the whole process group, so a
child's own children are covered too.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import itertools
import json
import os
import signal
import socket
import time
from collections.abc import Sequence
from pathlib import Path

from experiments.faults import cpu_group

_PR_SET_PDEATHSIG = 1
RUN_MARKER_ENV = "REBALANCE_LAB_RUN"   # every child of a run carries the run directory in its environment


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _yield_and_die_with_parent(group: Path | None) -> None:  # runs in the child between fork and exec
    _die_with_parent()
    cpu_group.join(group)
    with contextlib.suppress(OSError):
        os.nice(19)


class ChildProcess:
    """One child process (group) of the run, with the signals a fault needs."""

    def __init__(self, name: str, argv: Sequence[str], *, log_path: Path, env: dict[str, str] | None = None,
                 control: bool = False, yields_cpu: bool = False) -> None:
        self.name = name
        self.control = control
        # Member hosts yield the CPU to the servers, as clients on machines of their own would: forty hosts
        # of 25 members have thousands of threads, and at equal priority the scheduler gave the one broker
        # thread 6 ms of every 2 s (N = 1,000). A yielding child runs at nice 19 and, where the machine
        # allows it, in a CPU group of small weight (experiments.faults.cpu_group): nice alone counts only
        # inside the runner's session's group. Either way the child leads a process group of its own, which
        # the faults signal.
        self.yields_cpu = yields_cpu
        self._writer: asyncio.StreamWriter | None = None
        self._replies: asyncio.Future | None = None
        self._pending: dict[int, asyncio.Future] = {}
        self._ids = itertools.count(1)
        self.argv = list(argv)
        self.log_path = log_path
        self.env = env
        self.process: asyncio.subprocess.Process | None = None
        self.expected_exit = False     # set before any exit the runner causes on purpose
        self.started_ns: int | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv, passed, ours = list(self.argv), (), None
        if self.control:
            ours, theirs = socket.socketpair()
            argv += ["--control-fd", str(theirs.fileno())]
            passed = (theirs.fileno(),)
        try:
            with open(self.log_path, "ab") as log:
                self.process = await asyncio.create_subprocess_exec(
                    *argv, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=asyncio.subprocess.STDOUT,
                    env=self.env, preexec_fn=functools.partial(_yield_and_die_with_parent, cpu_group.yielding_group())
                    if self.yields_cpu else _die_with_parent,
                    pass_fds=passed, **({"process_group": 0} if self.yields_cpu else {"start_new_session": True}),
                )
        finally:
            if self.control:
                theirs.close()
        self.expected_exit = False
        self.started_ns = time.monotonic_ns()
        if ours is not None:
            reader, self._writer = await asyncio.open_unix_connection(sock=ours)
            self._replies = asyncio.ensure_future(self._read_replies(reader))

    async def _read_replies(self, reader: asyncio.StreamReader) -> None:
        try:
            while line := await reader.readline():
                with contextlib.suppress(ValueError):
                    reply = json.loads(line)
                    waiter = self._pending.pop(reply.get("id"), None) if isinstance(reply, dict) else None
                    if waiter is not None and not waiter.done():
                        waiter.set_result(reply)
        finally:
            for waiter in self._pending.values():
                if not waiter.done():
                    waiter.set_exception(ConnectionError(f"{self.name} closed its control channel"))
            self._pending.clear()

    async def command(self, op: str, member: str, timeout_s: float = 30.0) -> int:
        """Send one member command; returns the host's CLOCK_MONOTONIC time of the effect. Raises
        RuntimeError when the host refuses it, TimeoutError or ConnectionError when it does not answer."""
        if self._writer is None or not self.running:
            raise ConnectionError(f"{self.name} has no control channel (not running, or started without one)")
        ident = next(self._ids)
        waiter = asyncio.get_running_loop().create_future()
        self._pending[ident] = waiter
        self._writer.write((json.dumps({"id": ident, "op": op, "member": member}) + "\n").encode())
        await self._writer.drain()
        reply = await asyncio.wait_for(waiter, timeout_s)
        if not reply.get("ok"):
            raise RuntimeError(f"{self.name}: {op} {member}: {reply.get('error')}")
        return int(reply["ts_ns"])

    def close_control(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._replies is not None:
            self._replies.cancel()
            self._replies = None

    def signal(self, signum: int) -> None:
        if self.process is None or self.process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signum)

    def crash(self) -> None:
        """SIGKILL: no goodbye, no clean leave."""
        self.expected_exit = True
        self.signal(signal.SIGKILL)

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def state(self) -> str | None:
        """The kernel's state letter for the process (R, S, T = stopped, Z, ...), or None if gone."""
        if self.process is None:
            return None
        try:
            stat = Path(f"/proc/{self.process.pid}/stat").read_text()
        except OSError:
            return None
        return stat.rsplit(")", 1)[1].split()[0]

    async def wait_state(self, letters: str, timeout_s: float = 5.0) -> int | None:
        """Wait until the kernel reports one of `letters`; the monotonic time it was seen, or None."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.state() in tuple(letters):
                return time.monotonic_ns()
            await asyncio.sleep(0.01)
        return None

    async def wait_exit(self, timeout_s: float) -> int | None:
        """Wait for the exit; the monotonic time it was seen, or None on timeout."""
        if self.process is None:
            return time.monotonic_ns()
        try:
            await asyncio.wait_for(self.process.wait(), timeout_s)
        except TimeoutError:
            return None
        return time.monotonic_ns()

    async def stop(self, timeout_s: float = 15.0) -> int | None:
        """Clean stop: SIGTERM (plus SIGCONT, a stopped process cannot act on it), SIGKILL on timeout.
        Returns the exit code, or None if it never ran."""
        if self.process is None:
            return None
        self.expected_exit = True
        if self.process.returncode is None:
            self.signal(signal.SIGTERM)
            self.signal(signal.SIGCONT)
            if await self.wait_exit(timeout_s) is None:
                self.signal(signal.SIGKILL)
                await self.wait_exit(10.0)
        # Whatever the group leader left behind in its group goes too.
        self.signal(signal.SIGKILL)
        self.close_control()
        return self.process.returncode

    def kill_now(self) -> None:
        """Last resort during teardown: the whole group, at once."""
        self.expected_exit = True
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        self.close_control()


def processes_with_marker(marker: str) -> list[int]:
    """Pids of processes whose environment names this run (for tests and for the final sweep)."""
    needle = f"{RUN_MARKER_ENV}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found
