"""Child processes of a run (member hosts, the producer), so that SIGKILL and SIGSTOP mean what they say.

Every child starts in its own session (its own process group: a Ctrl-C in the terminal reaches only
the runner, which then stops the children in order) and with a parent-death signal, so that even
a runner killed with SIGKILL leaves nothing behind. Signals go to the whole process group, so a
child's own children are covered too.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1
RUN_MARKER_ENV = "REBALANCE_LAB_RUN"   # every child of a run carries the run directory in its environment


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class ChildProcess:
    """One child process (group) of the run, with the signals a fault needs."""

    def __init__(self, name: str, argv: Sequence[str], *, log_path: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
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
        with open(self.log_path, "ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                *self.argv, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=asyncio.subprocess.STDOUT,
                env=self.env, start_new_session=True, preexec_fn=_die_with_parent,
            )
        self.expected_exit = False
        self.started_ns = time.monotonic_ns()

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
        return self.process.returncode

    def kill_now(self) -> None:
        """Last resort during teardown: the whole group, at once."""
        self.expected_exit = True
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)


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
