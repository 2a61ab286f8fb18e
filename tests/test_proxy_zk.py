"""A black-holed ZooKeeper link through the fault proxy: the server expires the session."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from kazoo.client import KazooClient, KazooState

from experiments.faults.proxy import Proxy, Toxic
from experiments.scenario import LinkFault

pytestmark = pytest.mark.zk


class ProxyThread:
    """A proxy on its own event loop, for tests whose clients are synchronous (kazoo)."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.proxy = self.call(Proxy("zk", (host, int(port))).start())

    def call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(10)

    def set_toxic(self, toxic) -> None:
        async def apply() -> None:
            self.proxy.set_toxic(toxic)

        self.call(apply())

    def close(self) -> None:
        self.call(self.proxy.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def wait_for(condition, timeout_s: float, what: str) -> float:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic()


def test_black_holed_zookeeper_client_is_expired_by_the_server(zk):
    chroot = zk.chroot()
    path = chroot[chroot.index("/"):]
    proxied = ProxyThread(zk.nodes[0].client_address)
    states: list[KazooState] = []
    victim = KazooClient(hosts=proxied.proxy.address + path, timeout=4.0)
    observer = KazooClient(hosts=chroot, timeout=10.0)
    try:
        victim.add_listener(states.append)
        victim.start(timeout=30)
        victim.ensure_path("/")
        victim.create("/owner", b"victim", ephemeral=True)
        observer.start(timeout=30)
        gone = threading.Event()
        observer.DataWatch("/owner", lambda data, stat, event=None: gone.set() if stat is None else None)
        assert not gone.is_set()

        cut = time.monotonic()
        proxied.set_toxic(Toxic(kind=LinkFault.PARTITION))
        wait_for(gone.is_set, 30, "the server to expire the black-holed session")
        expired_after = time.monotonic() - cut
        assert expired_after >= 3.0, f"expired after {expired_after:.1f} s, before the 4 s session timeout"
        assert proxied.proxy.observed_ns is not None, "the black hole held the client's traffic"
        assert KazooState.SUSPENDED in states and KazooState.LOST not in states, \
            "cut off, the client only knows it is disconnected: ZooKeeper reports expiry on reconnect"

        proxied.set_toxic(None)
        wait_for(lambda: KazooState.LOST in states, 30, "the client to learn of its expiry after the heal")
    finally:
        for client in (victim, observer):
            client.stop()
            client.close()
        proxied.close()
