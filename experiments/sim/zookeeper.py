"""ZooKeeper as a model in virtual time: znodes, ephemeral nodes owned by sessions, one-shot watches, and one
server that applies requests in the order they reach it.

What a herd experiment exercises, as ZooKeeper does it: a create, delete or set fires the data watches on the
node and the child watches on its parent, each once (a fired watch is gone until it is set again); a closed or
expired session deletes its ephemeral nodes, firing the same watches; each write is numbered (its zxid), so a
session that reconnects can tell what changed since. Versions, ACLs, sequential nodes and the
ensemble's own replication are not modelled. Each request waits for the server (a service time per request, in
arrival order), so a burst of requests from many members queues as it does on a real server."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from experiments.sim.kernel import Simulation

# The time one request holds the machine, in arrival order: a dedicated server answers tens of thousands a second,
# but the lab's runs share two cores among ZooKeeper and ten member hosts of kazoo clients. Fitted to one real run
# of seed002 on 0.8 (2026-12-07, machine index python 0.62 s, load 0.1): its requests answered in 29.3, 11.7 and
# 14.5 ms at the median in the growth, the 100 -> 50 and the restart of 10, simulated seed 2 30.0, 15.0 and 14.9 ms
# at 0.3 ms (2.5-5.0 ms at 0.05 ms, the value before). One run on one host (n = 1): a fit, not a law.
SERVICE_MS = 0.3

Watcher = Callable[[str, str], None]    # (path, event type) -> None


class NoNode(Exception):
    pass


class NodeExists(Exception):
    pass


@dataclass
class Znode:
    data: bytes
    owner: int | None = None                        # the session of an ephemeral node
    children: set[str] = field(default_factory=set)
    mzxid: int = 0                                  # the write that last changed its data
    pzxid: int = 0                                  # ... and its children
    sorted_children: list[str] | None = None        # `children` in order, until they change


class SharedServer:
    """The server's time shared equally among the requests in it (processor sharing), for `ZooKeeper(shared=True)`.

    With many members each reading one node after another, a FIFO server answers them in turn: each read waits
    for one read of every other member reading, which is what sharing the server equally among them gives. A
    request that stands for K reads (`get_many`) then takes K reads' share, as K requests in turn would, and is
    one timer instead of K times three. Kept as the usual trick: `virtual` is the work every request in service has
    received so far, so a request is done when it reaches its own start plus its work."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.virtual = 0.0
        self.virtual_at_ms = 0.0
        self._jobs: list[tuple[float, int, Callable[[], None]]] = []   # (virtual finish, order, run)
        self._order = itertools.count()
        self._next = None

    def add(self, work_ms: float, run: Callable[[], None]) -> None:
        self._catch_up()
        heapq.heappush(self._jobs, (self.virtual + work_ms, next(self._order), run))
        self._wake()

    def _catch_up(self) -> None:
        if self._jobs:
            self.virtual += (self.sim.now_ms - self.virtual_at_ms) / len(self._jobs)
        self.virtual_at_ms = self.sim.now_ms

    def _wake(self) -> None:
        if self._next is not None:
            self._next.cancel()
        self._next = None
        if self._jobs:
            due = self.sim.now_ms + max(self._jobs[0][0] - self.virtual, 0.0) * len(self._jobs)
            self._next = self.sim.at(due, self._finish)

    def _finish(self) -> None:
        self._next = None
        self._catch_up()
        done = []
        while self._jobs and self._jobs[0][0] <= self.virtual + 1e-9:
            done.append(heapq.heappop(self._jobs)[2])
        self._wake()
        for run in done:
            run()


class ZooKeeper:
    def __init__(self, sim: Simulation, *, shared: bool = False) -> None:
        self.sim = sim
        self.shared = SharedServer(sim) if shared else None   # else one request after another, in arrival order
        self.nodes: dict[str, Znode] = {"/": Znode(b"")}
        # A client's watch on a path is one watch however often it is set (ZooKeeper keeps them per client):
        # a dict keyed by the watcher keeps each once, in the order set.
        self.data_watches: dict[str, dict[Watcher, None]] = {}
        self.child_watches: dict[str, dict[Watcher, None]] = {}
        self.ephemerals: dict[int, set[str]] = {}
        self._sessions = 0
        self.free_at_ms = 0.0
        self.served = 0
        self.zxid = 0                               # every write's number, in order (a client's re-sent watches use it)

    # -- the server's queue ---------------------------------------------------------------------------

    def serve(self, apply: Callable[[], object], answer: Callable[[object, Exception | None], None],
              reads: int = 1) -> None:
        """A request reached the server now: it is applied in turn, and `answer` gets its result or error.
        `reads`: how many requests it stands for (a shared server's `get_many`)."""

        def run() -> None:
            self.served += reads
            try:
                result, error = apply(), None
            except (NoNode, NodeExists) as caught:
                result, error = None, caught
            answer(result, error)

        if self.shared is not None:
            self.shared.add(SERVICE_MS * reads, run)
            return
        self.free_at_ms = max(self.free_at_ms, self.sim.now_ms) + SERVICE_MS
        self.sim.at(self.free_at_ms, run)

    # -- sessions -------------------------------------------------------------------------------------

    def open_session(self) -> int:
        self._sessions += 1
        self.ephemerals[self._sessions] = set()
        return self._sessions

    def close_session(self, session: int) -> None:
        """A closed or expired session: its ephemeral nodes go, and their watches fire."""
        for path in sorted(self.ephemerals.pop(session, set())):
            if path in self.nodes:
                self.delete(path)

    # -- requests, as the server applies them ---------------------------------------------------------

    def request(self, op: str, path: str, *, data: bytes = b"", session: int | None = None,
                watch: Watcher | None = None, paths: tuple[str, ...] = ()) -> object:
        """One request by its name: exists, get, get_children (these may set `watch`), create (ephemeral when a
        `session` is given), set, delete, and a shared server's get_many of `paths`; raises NoNode or NodeExists as
        ZooKeeper answers them."""
        if op == "exists":
            return self.exists(path, watch)
        if op == "get":
            return self.get(path, watch)
        if op == "get_children":
            return self.get_children(path, watch)
        if op == "create":
            return self.create(path, data, session=session)
        if op == "set":
            self.set(path, data)
            return True
        if op == "delete":
            self.delete(path)
            return True
        if op == "get_many":   # a shared server's reads of `paths` as one request; a missing node reads as None
            return [self.nodes[read].data if read in self.nodes else None for read in paths]
        raise ValueError(f"unknown request {op!r}")

    def exists(self, path: str, watch: Watcher | None = None) -> bool:
        if watch is not None:
            self.data_watches.setdefault(path, {})[watch] = None   # an exists-watch fires on creation too
        return path in self.nodes

    def get(self, path: str, watch: Watcher | None = None) -> bytes:
        node = self._node(path)
        if watch is not None:
            self.data_watches.setdefault(path, {})[watch] = None
        return node.data

    def get_children(self, path: str, watch: Watcher | None = None) -> list[str]:
        node = self._node(path)
        if watch is not None:
            self.child_watches.setdefault(path, {})[watch] = None
        if node.sorted_children is None:   # every member reads the group's ids on every attempt: sorted once a change
            node.sorted_children = sorted(node.children)
        return list(node.sorted_children)

    def create(self, path: str, data: bytes = b"", *, session: int | None = None) -> str:
        if path in self.nodes:
            raise NodeExists(path)
        parent, _, name = path.rpartition("/")
        parent = parent or "/"
        self.zxid += 1
        parent_node = self._node(parent)
        parent_node.children.add(name)
        parent_node.pzxid, parent_node.sorted_children = self.zxid, None
        self.nodes[path] = Znode(data, owner=session, mzxid=self.zxid, pzxid=self.zxid)
        if session is not None:
            self.ephemerals.setdefault(session, set()).add(path)
        self._fire(self.data_watches, path, "CREATED")
        self._fire(self.child_watches, parent, "CHILD")
        return path

    def set(self, path: str, data: bytes) -> None:
        node = self._node(path)
        self.zxid += 1
        node.data, node.mzxid = data, self.zxid
        self._fire(self.data_watches, path, "CHANGED")

    def delete(self, path: str) -> None:
        node = self._node(path)
        if node.owner is not None:
            self.ephemerals.get(node.owner, set()).discard(path)
        del self.nodes[path]
        parent, _, name = path.rpartition("/")
        parent = parent or "/"
        self.zxid += 1
        parent_node = self.nodes[parent]
        parent_node.children.discard(name)
        parent_node.pzxid, parent_node.sorted_children = self.zxid, None
        self._fire(self.data_watches, path, "DELETED")
        self._fire(self.child_watches, parent, "CHILD")

    def ensure(self, path: str, data: bytes = b"") -> None:
        """Set-up only (the brokers' registration, the topics): create a path and its parents, no request."""
        parts = path.strip("/").split("/")
        for depth in range(1, len(parts) + 1):
            here = "/" + "/".join(parts[:depth])
            if here not in self.nodes:
                self.create(here, data if depth == len(parts) else b"")

    def _node(self, path: str) -> Znode:
        node = self.nodes.get(path)
        if node is None:
            raise NoNode(path)
        return node

    def _fire(self, table: dict[str, dict[Watcher, None]], path: str, event: str) -> None:
        for watcher in table.pop(path, {}):   # one-shot: set again by the next read that asks for it
            watcher(path, event)
