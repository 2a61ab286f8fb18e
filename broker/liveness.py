"""The broker's own liveness, watched from a thread of its own.

The event loop counts the requests it receives and finishes (`RequestLedger`), and runs a tick
callback every `TICK_S`. A sampler thread (`LivenessSampler`: a thread, not a task, so that it keeps
running while the loop is blocked) looks every interval at those counts and at the loop's lag (the
time since the loop last ran its tick), and writes `broker_liveness` events:

- `sample`, at start and every `SAMPLE_EVERY_S`: requests received and answered so far, outstanding now,
  the longest loop lag and the longest lateness of the sampler's own ticks since the last sample, and the
  time spent in the garbage collector so far;
- `stalled`, once a window reaches `stall_s` in which the broker answered nothing while requests were
  held up, with the Python stack of the event-loop thread at that moment, the bytes clients have sent
  that the broker has not read yet and the connections it has not accepted yet;
- `resumed`, when that window ends (a request answered), with its length and the stack seen most often
  while it lasted (one stack a sampler tick: a coarse profile of the stall).

Every sample and every window also carries what the kernel's scheduler says of the event-loop thread
(`/proc/self/task/TID/schedstat`): its time on a CPU and its time runnable but waiting for one. A stall in
which the loop waited for a CPU is the machine starving the broker; one in which it ran is the broker's own
work (a long callback, or a collection holding the GIL, whose time is in `gc_ms`).

A request is held up when the loop could not serve it: the loop has not run its tick for `BLOCKED_S`
(a callback running that long, or the whole process starved of the CPU: then the sampler's own gap is as
long), or a request of an API that Kafka answers at once (not JoinGroup, SyncGroup or Fetch, which wait
for the group or for data by design) is outstanding. A JoinGroup parked for the group's initial delay,
with the loop free, is not a stall. A process that stood still as a whole (SIGSTOP, or no CPU for it) is
seen after the fact, from the sampler's own late tick: a window from the tick before, if requests were
outstanding then.

The same thread logs what asyncio's slow-callback warning would (the loop's `slow_callback_duration` is
set too, and asyncio's own warning appears when the loop runs in debug mode): a callback that keeps the
loop from turning for `slow_s`, named with the frames it was running.
"""

from __future__ import annotations

import asyncio
import fcntl
import gc
import logging
import sys
import termios
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kafka.protocol.api_key import ApiKey

from rebalance import events as ev
from rebalance.process_memory import rss_bytes

log = logging.getLogger(__name__)

TICK_S = 0.1                 # the loop's tick: a lag near this is a loop that turns
SAMPLE_EVERY_S = 5.0         # a `sample` event this often
BLOCKED_S = 1.0              # a loop that has not ticked for this long holds every request up
STACK_FRAMES = 20            # frames kept of the event-loop thread's stack, innermost first
# APIs whose requests wait by design (Kafka parks them: DelayedJoin, the leader's SyncGroup, DelayedFetch).
PARKED_APIS = frozenset({ApiKey.JoinGroup, ApiKey.SyncGroup, ApiKey.Fetch})


class RequestLedger:
    """What the event loop tells the sampler: requests received and finished (answered, or needing no
    answer), and since when nothing was finished. Written by the loop thread only; the sampler reads it."""

    def __init__(self, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self._clock = clock
        self.received = 0
        self.finished = 0
        self.prompt_outstanding = 0      # outstanding requests of APIs answered at once
        self.quiet_since_ns = clock()    # the last request finished, or the first arrival after none was left
        self.prompt_since_ns = 0         # when prompt_outstanding last left 0

    def arrived(self, api_key: int) -> None:
        now = self._clock()
        if self.received == self.finished:
            self.quiet_since_ns = now
        self.received += 1
        if api_key not in PARKED_APIS:
            if self.prompt_outstanding == 0:
                self.prompt_since_ns = now
            self.prompt_outstanding += 1

    def done(self, api_key: int) -> None:
        self.finished += 1
        self.quiet_since_ns = self._clock()
        if api_key not in PARKED_APIS:
            self.prompt_outstanding -= 1

    @property
    def outstanding(self) -> int:
        return self.received - self.finished


def loop_stack(thread_id: int | None) -> list[str]:
    """The Python stack of thread `thread_id` now, innermost frame first, as `file:line in function`."""
    frame = sys._current_frames().get(thread_id) if thread_id is not None else None
    if frame is None:
        return []
    frames = traceback.extract_stack(frame)[::-1][:STACK_FRAMES]
    return [f"{_short(entry.filename)}:{entry.lineno} in {entry.name}" for entry in frames]


def _short(path: str) -> str:
    """A path from its package on (`asyncio/events.py`, `broker/server.py`), not the whole prefix."""
    parts = path.split("/")
    return "/".join(parts[-2:])


def running_callback(stack: list[str]) -> str:
    """The callback the loop is running, from its stack (innermost first): the frame the loop's
    `Handle._run` called; for a task's step, the task's coroutine (the first frame inward that is not
    asyncio's own). Without a `Handle._run` on the stack, the innermost frame."""
    for index, entry in enumerate(stack):
        if entry.startswith("asyncio/events.py:") and entry.endswith(" in _run"):
            inward = stack[:index][::-1]
            return next((frame for frame in inward if not frame.startswith("asyncio/")), entry)
    return stack[0] if stack else "?"


def unaccepted_connections(port: int | None, tables: tuple[str, ...] = ("/proc/net/tcp", "/proc/net/tcp6")) -> int:
    """Connections the kernel has completed on a listening `port` that the broker has not accepted yet: for a
    socket in LISTEN state, Linux reports its accept queue's length as the rx_queue of /proc/net/tcp."""
    if port is None:
        return 0
    waiting = 0
    for table in tables:
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 4 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                waiting += int(fields[4].split(":")[1], 16)
    return waiting


@dataclass
class _Window:
    """A stall in progress: the broker answering nothing while requests are held up."""

    start_ns: int
    finished: int                  # the ledger's count when it began: any change ends it
    reported: bool = False
    outstanding: int = 0
    loop_lag_ns: int = 0
    sampler_gap_ns: int = 0
    gc_ns_at_start: int = 0
    sched_at_start: tuple[int, int] = (0, 0)   # the loop thread's (on CPU, waiting for a CPU) then
    stacks: Counter = field(default_factory=Counter)


def thread_schedstat(native_id: int | None) -> tuple[int, int]:
    """A thread's time on a CPU and time runnable but waiting for one, in ns, from the kernel's scheduler
    statistics; (0, 0) where the kernel keeps none."""
    if native_id is None:
        return 0, 0
    try:
        on_cpu, waiting, _slices = Path(f"/proc/self/task/{native_id}/schedstat").read_text().split()
        return int(on_cpu), int(waiting)
    except (OSError, ValueError):
        return 0, 0


class _GcClock:
    """Time spent in the garbage collector, from gc.callbacks (a collection holds the GIL: the sampler
    itself cannot run during one, so a long one shows as a sampler gap)."""

    def __init__(self) -> None:
        self.total_ns = 0
        self._started: int | None = None

    def __call__(self, phase: str, info: dict) -> None:
        now = time.monotonic_ns()
        if phase == "start":
            self._started = now
        elif self._started is not None:
            self.total_ns += now - self._started
            self._started = None


class LivenessSampler:
    """Watches one broker's event loop from a daemon thread; see the module's docstring."""

    def __init__(self, ledger: RequestLedger, *, node_id: int, recorder: ev.EventRecorder | None,
                 interval_s: float = 0.25, stall_s: float = 2.0, slow_s: float = 0.5,
                 connections: Callable[[], list[int]] = list, port: Callable[[], int | None] = lambda: None) -> None:
        self.ledger = ledger
        self.node_id = node_id
        self.recorder = recorder or ev.NullRecorder()
        self.interval_s = interval_s
        self.stall_s = stall_s
        self.slow_s = slow_s
        self._connections = connections   # the connections' file descriptors (for bytes not yet read)
        self._port = port                 # the listening port (for connections not yet accepted)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._loop_native_id: int | None = None   # the kernel's id of the loop thread, for its schedstat
        self._loop_ran_ns = time.monotonic_ns()
        self._tick_handle: asyncio.TimerHandle | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._gc = _GcClock()
        self._window: _Window | None = None
        self._slow_logged = False
        # The previous tick: its time, requests finished, outstanding, the loop thread's schedstat.
        self._before: tuple[int, int, int, tuple[int, int]] = (time.monotonic_ns(), 0, 0, (0, 0))
        self.stalls = 0                    # windows reported (for tests and the log)

    # -- lifecycle (called on the event loop) --------------------------------------------
    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.slow_callback_duration = self.slow_s   # asyncio's own warning, in debug mode
        self._loop_thread = threading.get_ident()
        self._loop_native_id = threading.get_native_id()
        self._before = (time.monotonic_ns(), 0, 0, thread_schedstat(self._loop_native_id))
        self._tick()
        gc.callbacks.append(self._gc)
        self._thread = threading.Thread(target=self._run, name=f"broker-{self.node_id}-liveness", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._tick_handle is not None:
            self._tick_handle.cancel()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        if self._gc in gc.callbacks:
            gc.callbacks.remove(self._gc)

    def _tick(self) -> None:
        self._loop_ran_ns = time.monotonic_ns()
        self._tick_handle = self._loop.call_later(TICK_S, self._tick)

    # -- the sampler thread ------------------------------------------------------------
    def _run(self) -> None:
        interval_ns = int(self.interval_s * 1e9)
        last_ns = time.monotonic_ns()
        next_sample_ns = last_ns   # the first sample at once: even a short run shows its sampler ran
        period = {"lag": 0, "gap": 0}
        try:
            while not self._stop.wait(self.interval_s):
                now = time.monotonic_ns()
                gap_ns = max(now - last_ns - interval_ns, 0)   # how late this tick came: the process starved
                last_ns = now
                lag_ns = now - self._loop_ran_ns
                period["lag"], period["gap"] = max(period["lag"], lag_ns), max(period["gap"], gap_ns)
                self._watch_slow(lag_ns)
                self._watch_stall(now, lag_ns, gap_ns)
                if now >= next_sample_ns:
                    on_cpu, waiting = thread_schedstat(self._loop_native_id)
                    self._emit("sample", rss_bytes=rss_bytes(), received=self.ledger.received,
                               loop_cpu_ms=on_cpu / 1e6, loop_waited_ms=waiting / 1e6,
                               answered=self.ledger.finished,
                               outstanding=self.ledger.outstanding, loop_lag_ms=period["lag"] / 1e6,
                               sampler_gap_ms=period["gap"] / 1e6, gc_ms=self._gc.total_ns / 1e6)
                    period = {"lag": 0, "gap": 0}
                    next_sample_ns = now + int(SAMPLE_EVERY_S * 1e9)
        except Exception:  # the broker goes on serving; the log says why its liveness is no longer recorded
            log.exception("broker %s: the liveness sampler failed", self.node_id)

    def _watch_slow(self, lag_ns: int) -> None:
        """asyncio's slow-callback warning, from outside: the callback that keeps the loop from turning."""
        if lag_ns < self.slow_s * 1e9:
            self._slow_logged = False
            return
        if not self._slow_logged:
            self._slow_logged = True
            stack = loop_stack(self._loop_thread)
            log.warning("broker %s: the event loop has not turned for %.3f s, running %s (innermost: %s)",
                        self.node_id, lag_ns / 1e9, running_callback(stack), " <- ".join(stack[:3]))

    def _held_up_since(self, now: int, lag_ns: int) -> int | None:
        """Since when outstanding requests are held up (see the module's docstring), or None."""
        ledger = self.ledger
        if ledger.outstanding <= 0:
            return None
        causes = []
        if lag_ns >= BLOCKED_S * 1e9:
            causes.append(self._loop_ran_ns)
        if ledger.prompt_outstanding > 0:
            causes.append(ledger.prompt_since_ns)
        if not causes:
            return None
        return max(ledger.quiet_since_ns, min(causes))

    def _watch_stall(self, now: int, lag_ns: int, gap_ns: int) -> None:
        ledger = self.ledger
        window = self._window
        if window is None and gap_ns >= self.stall_s * 1e9 and self._before[2] > 0:
            # The whole process stood still (SIGSTOP, or starved of the CPU) with requests outstanding: seen
            # after the fact, from this thread's own late tick, even if the loop already answered since.
            window = self._window = _Window(start_ns=self._before[0], finished=self._before[1],
                                            gc_ns_at_start=self._gc.total_ns, outstanding=self._before[2],
                                            loop_lag_ns=max(lag_ns, gap_ns), sampler_gap_ns=gap_ns,
                                            sched_at_start=self._before[3])
            self._report(window, now, max(lag_ns, gap_ns))
        self._before = (now, ledger.finished, ledger.outstanding, thread_schedstat(self._loop_native_id))
        if window is not None and ledger.finished != window.finished:
            self._end(window, now)
            window = None
        since = self._held_up_since(now, lag_ns)
        if since is None:
            if window is not None:
                self._end(window, now)
            return
        if window is None:
            window = self._window = _Window(start_ns=since, finished=ledger.finished,
                                            gc_ns_at_start=self._gc.total_ns, sched_at_start=self._before[3])
        window.outstanding = max(window.outstanding, ledger.outstanding)
        window.loop_lag_ns = max(window.loop_lag_ns, lag_ns)
        window.sampler_gap_ns = max(window.sampler_gap_ns, gap_ns)
        if now - window.start_ns >= self.stall_s * 1e9:
            self._report(window, now, lag_ns)

    def _report(self, window: _Window, now: int, lag_ns: int) -> None:
        """A stall tick: its stack is counted; the first one writes the `stalled` event."""
        stack = loop_stack(self._loop_thread)
        window.stacks["\n".join(stack)] += 1
        if window.reported:
            return
        window.reported = True
        self.stalls += 1
        log.warning("broker %s: no request answered for %.1f s with %s outstanding (loop lag %.1f s), running %s",
                    self.node_id, (now - window.start_ns) / 1e9, window.outstanding, lag_ns / 1e9,
                    running_callback(stack))
        self._emit("stalled", start_ns=window.start_ns, stalled_ms=(now - window.start_ns) / 1e6,
                   outstanding=window.outstanding, loop_lag_ms=lag_ns / 1e6,
                   sampler_gap_ms=window.sampler_gap_ns / 1e6, unread_bytes=self._unread_bytes(),
                   unaccepted=unaccepted_connections(self._port()),
                   stack="\n".join(stack))

    def _end(self, window: _Window, now: int) -> None:
        self._window = None
        if not window.reported:
            return
        top, seen = window.stacks.most_common(1)[0]
        length_s = (now - window.start_ns) / 1e9
        log.warning("broker %s: answering again after %.1f s (longest loop lag %.1f s)", self.node_id, length_s,
                    window.loop_lag_ns / 1e9)
        on_cpu, waiting = thread_schedstat(self._loop_native_id)
        self._emit("resumed", start_ns=window.start_ns, stalled_ms=length_s * 1e3, outstanding=window.outstanding,
                   loop_lag_ms=window.loop_lag_ns / 1e6, sampler_gap_ms=window.sampler_gap_ns / 1e6,
                   gc_ms=(self._gc.total_ns - window.gc_ns_at_start) / 1e6,
                   loop_cpu_ms=(on_cpu - window.sched_at_start[0]) / 1e6,
                   loop_waited_ms=(waiting - window.sched_at_start[1]) / 1e6, stack=top, stack_seen=seen,
                   stack_samples=sum(window.stacks.values()))

    def _unread_bytes(self) -> int:
        """Bytes the clients sent that the broker has not read yet, over its connections."""
        total = 0
        buffer = bytearray(4)
        for descriptor in self._connections():
            try:
                fcntl.ioctl(descriptor, termios.FIONREAD, buffer)
            except OSError:
                continue   # closed meanwhile
            total += int.from_bytes(buffer, sys.byteorder)
        return total

    def _emit(self, state: str, **fields: object) -> None:
        self.recorder.emit(ev.BROKER_LIVENESS, state=state, node=self.node_id, **fields)
