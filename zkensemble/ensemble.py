"""The one API both providers implement: an `Ensemble` of `Node`s and the faults it can suffer.

Node indices are 0-based positions in `ensemble.nodes`; ZooKeeper's own server id is
`node.myid` (index + 1). Readiness is always a real client call (kazoo), never a sleep.
"""

from __future__ import annotations

import atexit
import logging
import time
import uuid
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from kazoo.client import KazooClient

from . import fourlw, reaper
from .config import EnsembleConfig, Provider
from .errors import NotReady, NotSupported
from .fourlw import Mode

HOST = "127.0.0.1"

# A peer that is not up yet makes leader election back off, doubling up to 60 s by default;
# capping the wait at 2 s lets an ensemble form (and re-form after a fault) in seconds.
ELECTION_OPTIONS = ["-Dzookeeper.fastleader.maxNotificationInterval=2000"]

# kazoo warns on every refused connection; readiness probes expect those, so they stay quiet.
_quiet = logging.getLogger("zkensemble.probe")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


@dataclass(frozen=True, kw_only=True)
class Node:
    index: int
    client_port: int
    host: str = HOST

    @property
    def myid(self) -> int:
        return self.index + 1

    @property
    def client_address(self) -> str:
        return f"{self.host}:{self.client_port}"

    def mode(self, timeout_s: float = 2.0) -> Mode:
        return fourlw.mode(self.host, self.client_port, timeout_s)

    def serving(self, timeout_s: float = 2.0) -> bool:
        return self.mode(timeout_s).serving

    def mntr(self, timeout_s: float = 2.0) -> dict[str, int | float | str]:
        return fourlw.mntr(self.host, self.client_port, timeout_s)


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str, interval_s: float = 0.1) -> None:
    """Poll `condition` until it holds; NotReady naming `what` when `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            raise NotReady(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(interval_s)


class Ensemble(ABC):
    """A running ZooKeeper ensemble. Use as a context manager, or call `stop()`."""

    provider: Provider

    def __init__(self, *, name: str, config: EnsembleConfig, nodes: list[Node]) -> None:
        self.name = name
        self.config = config
        self.nodes = nodes
        self.detached = False  # True once handed to the CLI's state file: outlives this process
        self._reaper = None  # the reaper process when started with an owner (see reaper.py)
        _running.add(self)

    # -- addresses ---------------------------------------------------------------------------

    @property
    def connect_string(self) -> str:
        return ",".join(node.client_address for node in self.nodes)

    def chroot(self, prefix: str = "lab") -> str:
        """A connect string with a fresh chroot, e.g. "127.0.0.1:2181/lab-1f3a...": one per test or run.

        kazoo creates nothing for a chroot; call `client.ensure_path("/")` after connecting.
        """
        return f"{self.connect_string}/{prefix}-{uuid.uuid4().hex[:12]}"

    # -- observation -------------------------------------------------------------------------

    def modes(self) -> list[Mode]:
        return [node.mode() for node in self.nodes]

    def leader(self) -> int | None:
        """Index of the node that says it leads (or runs standalone), if exactly one does."""
        leaders = [n.index for n in self.nodes if n.mode() in (Mode.LEADER, Mode.STANDALONE)]
        return leaders[0] if len(leaders) == 1 else None

    def mntr(self) -> list[dict[str, int | float | str]]:
        """Each node's counters (an empty dict for a node that does not answer).

        The server-side witness of a herd: add up `zk_packets_received` before and after.
        """
        counters = []
        for node in self.nodes:
            try:
                counters.append(node.mntr(timeout_s=1.0))
            except OSError:
                counters.append({})
        return counters

    def wait_serving(self, index: int, timeout_s: float | None = None) -> None:
        """Wait until node `index` serves a real client: a kazoo session on it alone reads "/"."""
        timeout_s = timeout_s or self.config.start_timeout_s
        node = self.nodes[index]
        deadline = time.monotonic() + timeout_s
        while True:
            self._check_running(index)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise NotReady(
                    f"ZooKeeper node {node.myid} at {node.client_address} did not serve within "
                    f"{timeout_s:.0f} s{self._log_hint(index)}"
                )
            client = KazooClient(hosts=node.client_address, timeout=2.0, logger=_quiet)
            try:
                client.start(timeout=min(remaining, 3.0))
                client.get("/")
                if node.mode().serving:
                    return
            except Exception:  # refused, timed out, not serving yet: all mean "try again"
                pass
            finally:
                client.stop()
                client.close()

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Every node serves and exactly one of them leads."""
        timeout_s = timeout_s or self.config.start_timeout_s
        started = time.monotonic()
        for node in self.nodes:
            self.wait_serving(node.index, timeout_s - (time.monotonic() - started))
        wait_until(lambda: self.leader() is not None, max(1.0, timeout_s - (time.monotonic() - started)),
                   f"a leader in ensemble {self.name}")

    def wait_mode(self, index: int, accept: Callable[[Mode], bool], timeout_s: float, what: str) -> Mode:
        seen: list[Mode] = []

        def check() -> bool:
            seen.append(self.nodes[index].mode(timeout_s=1.0))
            return accept(seen[-1])

        wait_until(check, timeout_s, f"node {self.nodes[index].myid} {what} (last seen: {seen[-1].value if seen else '-'})")
        return seen[-1]

    # -- faults ------------------------------------------------------------------------------

    @abstractmethod
    def kill(self, index: int) -> None:
        """SIGKILL the node's server (a crash: no goodbye to peers or clients)."""

    @abstractmethod
    def pause(self, index: int) -> None:
        """Freeze the node (SIGSTOP / docker pause): sockets stay open, nothing answers."""

    @abstractmethod
    def resume(self, index: int) -> None:
        ...

    @abstractmethod
    def restart(self, index: int, wait: bool = True) -> None:
        """Stop (if running) and start the node again with the same data and client address."""

    def isolate(self, index: int) -> None:
        """Cut the node off from its peers (not from its clients): the ensemble sees a partition."""
        raise NotSupported(f"{self.provider.value} ensemble {self.name} cannot be partitioned from this process")

    def heal(self, index: int | None = None) -> None:
        """Undo `isolate` for one node, or for all when `index` is None."""
        raise NotSupported(f"{self.provider.value} ensemble {self.name} cannot be partitioned from this process")

    # -- lifetime ----------------------------------------------------------------------------

    @abstractmethod
    def running(self) -> bool:
        """True while any part of the ensemble (process, container, network) still exists."""

    @abstractmethod
    def stop(self) -> None:
        """Remove everything the ensemble started. Safe to call twice."""

    @abstractmethod
    def to_state(self) -> dict:
        """What another process needs to find and drive this ensemble (the CLI's state file)."""

    @abstractmethod
    def _check_running(self, index: int) -> None:
        """Raise at once (with the node's log) when the node's process or container has exited."""

    def _log_hint(self, index: int) -> str:
        return ""

    def _start_reaper(self, owner_pid: int, workdir=None) -> None:
        """Have a detached reaper remove this ensemble once process `owner_pid` is gone."""
        self._reaper = reaper.spawn(self.provider, self.name, owner_pid, workdir)

    def _stop_reaper(self) -> None:
        """The ensemble is stopped: its reaper has nothing left to do (called at the end of stop())."""
        popen, self._reaper = self._reaper, None
        reaper.stop(popen)

    def __enter__(self) -> Ensemble:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self.connect_string}>"


_running: weakref.WeakSet[Ensemble] = weakref.WeakSet()


@atexit.register
def _stop_forgotten_ensembles() -> None:
    """An ensemble this process started and did not hand to the CLI dies with the process."""
    for ensemble in list(_running):
        if not ensemble.detached:
            try:
                ensemble.stop()
            except Exception as error:  # at exit there is nobody left to raise to
                logging.getLogger(__name__).warning("stopping %s at exit failed: %s", ensemble.name, error)
