"""The simulation's ZooKeeper (experiments.sim.zookeeper) against a real one, on one script of requests from two
sessions: every answer, error and watch notification the same."""

from __future__ import annotations

import time

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from experiments.sim.kernel import Simulation
from experiments.sim.zookeeper import NodeExists, NoNode, ZooKeeper


class _Real:
    """Two kazoo sessions in one chroot; each notification kept as (session, path, event type)."""

    def __init__(self, connect: str) -> None:
        self.clients = {name: KazooClient(hosts=connect, timeout=10.0) for name in ("a", "b")}
        for client in self.clients.values():
            client.start(timeout=30)
        self.clients["a"].ensure_path("/")
        self.seen: list[tuple[str, str, str]] = []
        # One callable a session, as the lab's client keeps one per handler and path: kazoo calls each distinct
        # callable set on a path, the same one once.
        self._watchers = {name: (lambda event, name=name: self.seen.append((name, event.path, event.type)))
                          for name in self.clients}

    def watch(self, session: str):
        return self._watchers[session]

    def run(self, session: str, op: str, path: str, **options):
        client, watch = self.clients[session], self.watch(session) if options.get("watch") else None
        try:
            if op == "create":
                return client.create(path, options.get("data", b""), ephemeral=options.get("ephemeral", False))
            if op == "get":
                return client.get(path, watch=watch)[0]
            if op == "get_children":
                return sorted(client.get_children(path, watch=watch))
            if op == "exists":
                return client.exists(path, watch=watch) is not None
            if op == "set":
                client.set(path, options["data"])
                return True
            if op == "delete":
                client.delete(path)
                return True
            if op == "close":
                client.stop()
                client.close()
                return True
        except NoNodeError:
            return "NoNode"
        except NodeExistsError:
            return "NodeExists"
        raise ValueError(op)

    def settle(self, expected: int) -> None:
        deadline = time.monotonic() + 10
        while len(self.seen) < expected and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)   # and nothing more comes


class _Model:
    def __init__(self) -> None:
        self.zk = ZooKeeper(Simulation(1))
        self.sessions = {name: self.zk.open_session() for name in ("a", "b")}
        self.seen: list[tuple[str, str, str]] = []
        self._watchers = {name: (lambda path, event, name=name: self.seen.append((name, path, event)))
                          for name in self.sessions}

    def run(self, session: str, op: str, path: str, **options):
        if op == "close":
            self.zk.close_session(self.sessions[session])
            return True
        try:
            return self.zk.request(op, path, data=options.get("data", b""),
                                   session=self.sessions[session] if options.get("ephemeral") else None,
                                   watch=self._watchers[session] if options.get("watch") else None)
        except NoNode:
            return "NoNode"
        except NodeExists:
            return "NodeExists"

    def settle(self, expected: int) -> None:
        pass


# (session, op, path, options): what 0.8's members do to a group, and what a session's end does.
SCRIPT = [
    ("a", "create", "/g", {}), ("a", "create", "/g/ids", {}),
    ("b", "get_children", "/g/ids", {"watch": True}), ("b", "exists", "/g/ids/m1", {"watch": True}),
    ("a", "create", "/g/ids/m1", {"data": b"one", "ephemeral": True}),
    ("b", "get", "/g/ids/m1", {"watch": True}), ("b", "get", "/g/ids/m1", {"watch": True}),
    ("a", "set", "/g/ids/m1", {"data": b"two"}),
    ("b", "get_children", "/g/ids", {"watch": True}), ("b", "exists", "/g/ids/m1", {"watch": True}),
    ("b", "create", "/g/ids/m1", {"data": b"mine", "ephemeral": True}),
    ("a", "close", "", {}),
    ("b", "get_children", "/g/ids", {}), ("b", "get", "/g/ids/m1", {}),
    ("b", "create", "/g/ids/m2", {"ephemeral": True}), ("b", "delete", "/g/ids/m2", {}),
    ("b", "delete", "/g/ids/m2", {}), ("b", "set", "/g/nowhere", {"data": b"x"}),
]


def _play(side) -> list[tuple[object, list]]:
    results = []
    for session, op, path, options in SCRIPT:
        before = len(side.seen)
        answer = side.run(session, op, path, **options)
        side.settle(before + (1 if op in ("create", "set", "close") else 0))
        results.append(((session, op, path), answer if not isinstance(answer, bytes) else answer.decode(),
                        sorted(side.seen[before:])))
    return results


def test_the_model_answers_and_notifies_as_a_real_zookeeper(zk):
    real = _Real(zk.chroot())
    try:
        expected = _play(real)
    finally:
        real.clients["b"].stop()
        real.clients["b"].close()
    assert _play(_Model()) == expected
    notified = [seen for _, _, seen in expected if seen]
    assert len(notified) >= 3   # the script exercises child, created, changed and deleted notifications
