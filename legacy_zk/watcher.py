"""Watch callbacks record a reason and nothing else; one executor thread does the work.

This is 0.8's watcher executor: a flag set under a lock by every ZooKeeper callback, and
a single thread that waits on it for at most a second at a time, takes every reason that
piled up meanwhile, and runs one synced rebalance for the whole batch (the coalescing
that keeps a burst of joins from costing a burst of rebalances). Auto-commit is not its
job: it has a scheduler thread of its own (`legacy_zk.offsets.AutoCommitter`), as in 0.8.
An exception in the work is reported, never lost, and the thread goes on, as 0.8's did.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from enum import Enum


class Reason(Enum):
    STARTUP = "startup"
    IDS_CHANGED = "ids-changed"               # child watch on /consumers/<group>/ids
    TOPIC_CHANGED = "topic-changed"           # data watch on /brokers/topics/<topic>
    BROKERS_CHANGED = "brokers-changed"       # child watch on /brokers/ids (set only when none were found)
    NEW_SESSION = "new-session"               # the session expired and a new one is up: re-register
    RECONNECTED = "reconnected"               # same session back after a disconnect: re-arm watches


REBALANCE_REASONS = frozenset({Reason.STARTUP, Reason.IDS_CHANGED, Reason.TOPIC_CHANGED, Reason.BROKERS_CHANGED})


class RebalanceTrigger:
    """The flag the watches set. Never blocks the caller."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._reasons: set[Reason] = set()
        self._working = False  # reasons taken and not yet acted upon

    def fire(self, reason: Reason) -> None:
        with self._cond:
            self._reasons.add(reason)
            self._cond.notify_all()

    def take(self, timeout_s: float) -> frozenset[Reason]:
        """Wait up to timeout_s for a reason; return (and clear) all that piled up."""
        with self._cond:
            if not self._reasons:
                self._cond.wait(timeout_s)
            taken = frozenset(self._reasons)
            self._reasons.clear()
            self._working = bool(taken)
            return taken

    def finished(self) -> None:
        """The executor acted on what it took."""
        with self._cond:
            self._working = False

    @property
    def pending(self) -> bool:
        """Reasons waiting, or taken and still being acted upon."""
        with self._cond:
            return bool(self._reasons) or self._working

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()


class WatcherExecutor:
    """The one thread that acts on watch events; `work(reasons)` runs on it, even with no reasons."""

    WAKE_EVERY_S = 1.0

    def __init__(
        self,
        name: str,
        trigger: RebalanceTrigger,
        work: Callable[[frozenset[Reason]], None],
        on_error: Callable[[BaseException], None],
    ) -> None:
        self._trigger = trigger
        self._work = work
        self._on_error = on_error
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"{name}_watcher_executor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stopping.set()
        self._trigger.wake()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)

    @property
    def stopping(self) -> threading.Event:
        return self._stopping

    def _run(self) -> None:
        while not self._stopping.is_set():
            reasons = self._trigger.take(self.WAKE_EVERY_S)
            if self._stopping.is_set():
                return
            try:
                self._work(reasons)
            except Exception as error:  # reported, then the loop goes on (0.8 logged and continued)
                self._on_error(error)
            finally:
                self._trigger.finished()
