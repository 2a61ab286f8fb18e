"""Server faults: ZooKeeper nodes and brokers, through the ensemble and the broker cluster they came from.

The ensemble and cluster calls block (they wait for a node to stop or to serve again), so they run
in a worker thread; each returns the monotonic time at which the effect was observed, where one can
be observed from outside (a killed broker's port refusing connections, a ZooKeeper node no longer
serving), else None.
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any


def _refuses(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return False
    except OSError:
        return True


def _wait(condition, timeout_s: float) -> int | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return time.monotonic_ns()
        time.sleep(0.05)
    return None


class ServerFaults:
    """Kill, pause, restart and isolate the servers of a run; remembers what it left broken, so
    that `heal_all` can undo exactly that before the run ends."""

    def __init__(self, ensemble: Any | None, cluster: Any | None) -> None:
        self.ensemble = ensemble
        self.cluster = cluster
        self.zk_killed: set[int] = set()
        self.zk_paused: set[int] = set()
        self.zk_isolated: set[int] = set()
        self.brokers_killed: set[int] = set()

    # ---- ZooKeeper

    async def zk_kill(self, index: int) -> int | None:
        await asyncio.to_thread(self.ensemble.kill, index)
        self.zk_killed.add(index)
        node = self.ensemble.nodes[index]
        return await asyncio.to_thread(_wait, lambda: _refuses(node.client_address), 10.0)

    async def zk_restart(self, index: int) -> int | None:
        await asyncio.to_thread(self.ensemble.restart, index, True)
        self.zk_killed.discard(index)
        self.zk_paused.discard(index)
        return time.monotonic_ns()

    async def zk_pause(self, index: int) -> int | None:
        await asyncio.to_thread(self.ensemble.pause, index)
        self.zk_paused.add(index)
        return time.monotonic_ns()

    async def zk_resume(self, index: int) -> int | None:
        await asyncio.to_thread(self.ensemble.resume, index)
        self.zk_paused.discard(index)
        return time.monotonic_ns()

    async def zk_isolate(self, index: int) -> int | None:
        await asyncio.to_thread(self.ensemble.isolate, index)
        self.zk_isolated.add(index)
        node = self.ensemble.nodes[index]
        # Confirmed when the cut-off node stops serving (it loses its quorum).
        return await asyncio.to_thread(_wait, lambda: not node.serving(timeout_s=0.5), 30.0)

    async def zk_heal(self, index: int) -> int | None:
        await asyncio.to_thread(self.ensemble.heal, index)
        self.zk_isolated.discard(index)
        node = self.ensemble.nodes[index]
        return await asyncio.to_thread(_wait, lambda: node.serving(timeout_s=0.5), 60.0)

    # ---- brokers

    async def broker_kill(self, index: int) -> int | None:
        address = self.broker_address(index)
        await asyncio.to_thread(self.cluster.kill, index)
        self.brokers_killed.add(index)
        return await asyncio.to_thread(_wait, lambda: _refuses(address), 10.0) if address else None

    async def broker_restart(self, index: int) -> int | None:
        await asyncio.to_thread(self.cluster.restart, index)
        self.brokers_killed.discard(index)
        address = self.broker_address(index)
        return await asyncio.to_thread(_wait, lambda: not _refuses(address), 30.0) if address else None

    def broker_address(self, index: int) -> str | None:
        broker = self.cluster.brokers[index]
        address = getattr(broker, "address", None) or getattr(broker, "bootstrap", None)
        if address is None and hasattr(broker, "host") and hasattr(broker, "port"):
            address = f"{broker.host}:{broker.port}"
        return address

    # ---- the final heal

    async def heal_all(self) -> list[tuple[str, int | None]]:
        """Undo every server fault still in force; (target, observed_ns) for each."""
        healed = []
        for index in sorted(self.zk_isolated):
            healed.append((f"zk-{index}", await self.zk_heal(index)))
        for index in sorted(self.zk_paused):
            healed.append((f"zk-{index}", await self.zk_resume(index)))
        for index in sorted(self.zk_killed):
            healed.append((f"zk-{index}", await self.zk_restart(index)))
        for index in sorted(self.brokers_killed):
            healed.append((f"broker-{index}", await self.broker_restart(index)))
        return healed
