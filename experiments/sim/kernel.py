"""Virtual time: a clock that jumps from one event to the next, and the queue of what happens when.

Nothing here sleeps or reads a real clock. Every action is a callback with the virtual time (milliseconds from
the start of the run) at which it is due; ties run in the order they were scheduled, so one seed gives one
order of events, whatever the machine. Randomness comes from the simulation's own generator, drawn in that
order, which is what makes a seed replay to the same events."""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(eq=False)
class Timer:
    due_ms: float
    action: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True

    def fire(self) -> None:
        self.action()


class Simulation:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.now_ms = 0.0
        self._queue: list[tuple[float, int, Timer]] = []   # (due, order scheduled, timer): ties run in order
        self._order = itertools.count()
        self.events_run = 0

    def at(self, due_ms: float, action: Callable[[], None]) -> Timer:
        """Run `action` at virtual time `due_ms` (never before now)."""
        return self.schedule(Timer(due_ms, action))

    def schedule(self, timer: Timer) -> Timer:
        """Queue a timer built elsewhere (a subclass that decides at its time whether to run its action)."""
        if timer.due_ms < self.now_ms:
            timer.due_ms = self.now_ms
        heapq.heappush(self._queue, (timer.due_ms, next(self._order), timer))
        return timer

    def after(self, delay_ms: float, action: Callable[[], None]) -> Timer:
        return self.at(self.now_ms + delay_ms, action)

    def run_until(self, end_ms: float) -> None:
        """Run every action due before `end_ms`, in time order, then stand the clock at `end_ms`."""
        while self._queue and self._queue[0][0] < end_ms:
            _, _, timer = heapq.heappop(self._queue)
            if timer.cancelled:
                continue
            self.now_ms = timer.due_ms
            self.events_run += 1
            timer.fire()
        self.now_ms = max(self.now_ms, end_ms)

    def discard(self) -> None:
        """Drop every timer still queued: the run is over. What they hold (the members' callbacks, and through them
        the members) is then freed as its last reference goes, not left for the cyclic collector to find."""
        self._queue.clear()

    @property
    def now_int_ms(self) -> int:
        """The time as the coordinator's state machines take it: whole milliseconds."""
        return int(self.now_ms)
