"""ZooKeeper as a model in virtual time: znodes, ephemeral nodes owned by sessions, one-shot watches, and one
server that applies requests in the order they reach it.

What a herd experiment exercises, as ZooKeeper does it: a create, delete or set fires the data watches on the
node and the child watches on its parent, each once (a fired watch is gone until it is set again); a closed or
expired session deletes its ephemeral nodes, firing the same watches; each write is numbered (its zxid), so a
session that reconnects can tell what changed since. Versions, ACLs, sequential nodes and the
ensemble's own replication are not modelled. Each request waits for the server (a service time per request, in
arrival order), so a burst of requests from many members queues as it does on a real server."""

from __future__ import annotations

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


class ZooKeeper:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
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

    def serve(self, apply: Callable[[], object], answer: Callable[[object, Exception | None], None]) -> None:
        """A request reached the server now: it is applied in turn, and `answer` gets its result or error."""
        self.free_at_ms = max(self.free_at_ms, self.sim.now_ms) + SERVICE_MS

        def run() -> None:
            self.served += 1
            try:
                result, error = apply(), None
            except (NoNode, NodeExists) as caught:
                result, error = None, caught
            answer(result, error)

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
                watch: Watcher | None = None) -> object:
        """One request by its name: exists, get, get_children (these may set `watch`), create (ephemeral when a
        `session` is given), set, delete; raises NoNode or NodeExists as ZooKeeper answers them."""
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
        return sorted(node.children)

    def create(self, path: str, data: bytes = b"", *, session: int | None = None) -> str:
        if path in self.nodes:
            raise NodeExists(path)
        parent, _, name = path.rpartition("/")
        parent = parent or "/"
        self.zxid += 1
        self._node(parent).children.add(name)
        self._node(parent).pzxid = self.zxid
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
        self.nodes[parent].children.discard(name)
        self.nodes[parent].pzxid = self.zxid
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
