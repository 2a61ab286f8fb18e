"""Ephemeral nodes live exactly as long as their owner's session, on a real ZooKeeper.

The owner is a separate process holding a kazoo session with a 2 s timeout. A crash (SIGKILL)
or a stall (SIGSTOP) of that process stops its heartbeats; the server expires the session and
deletes the ephemeral node, which a second client sees through a watch.
"""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time

import pytest
from kazoo.client import KazooClient

from tests.fixtures.zk import PROVIDERS

pytestmark = [pytest.mark.zk]

SESSION_TIMEOUT_S = 2.0

OWNER = """
import sys, threading
from kazoo.client import KazooClient
hosts, path, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
client = KazooClient(hosts=hosts, timeout=timeout)
client.add_listener(lambda state: print("state", state, flush=True))
client.start(timeout=30)
client.create(path, b"owner", ephemeral=True, makepath=True)
print("created", client.client_id[0], flush=True)
threading.Event().wait()  # hold the session until killed or paused
"""


class Owner:
    """A child process owning an ephemeral node; its stdout lines arrive on a queue."""

    def __init__(self, hosts: str, path: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", OWNER, hosts, path, str(SESSION_TIMEOUT_S)],
                                        stdout=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line.strip())

    def expect(self, prefix: str, timeout_s: float = 30.0) -> str:
        deadline = time.monotonic() + timeout_s
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=remaining)
            except queue.Empty:
                break
            if line.startswith(prefix):
                return line
        raise AssertionError(f"owner never printed {prefix!r} within {timeout_s} s")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
        self.process.wait(timeout=10)


def watch_deletion(client: KazooClient, path: str) -> threading.Event:
    deleted = threading.Event()

    @client.DataWatch(path)
    def _changed(data, stat, event=None):
        if stat is None and event is not None:
            deleted.set()
            return False
        return True

    return deleted


@pytest.fixture(params=PROVIDERS)
def zk_one(request, zk_factory):
    """A fresh single node per provider, so both providers are proven, not just the default."""
    return zk_factory(nodes=1, provider=request.param)


def connect(hosts: str) -> KazooClient:
    client = KazooClient(hosts=hosts, timeout=10.0)
    client.start(timeout=30)
    client.ensure_path("/")
    return client


def test_ephemeral_node_disappears_when_its_owner_is_killed(zk_one):
    hosts = zk_one.chroot()
    observer = connect(hosts)
    owner = Owner(hosts, "/members/a")
    try:
        owner.expect("created")
        assert observer.exists("/members/a") is not None
        deleted = watch_deletion(observer, "/members/a")

        killed_at = time.monotonic()
        owner.process.kill()
        owner.process.wait(timeout=10)
        assert deleted.wait(timeout=SESSION_TIMEOUT_S + 15), "the ephemeral node outlived its owner's session"
        waited = time.monotonic() - killed_at
        # The server keeps the node until the session times out: a closed socket alone deletes nothing.
        assert waited >= SESSION_TIMEOUT_S * 0.5, f"deleted after {waited:.2f} s, before the session could expire"
        assert observer.exists("/members/a") is None
    finally:
        owner.close()
        observer.stop()
        observer.close()


def test_ephemeral_node_disappears_when_its_owner_stalls_past_the_session_timeout(zk_one):
    hosts = zk_one.chroot()
    observer = connect(hosts)
    owner = Owner(hosts, "/members/b")
    try:
        owner.expect("created")
        deleted = watch_deletion(observer, "/members/b")

        owner.process.send_signal(signal.SIGSTOP)  # a GC-like stall: the socket stays open
        assert deleted.wait(timeout=SESSION_TIMEOUT_S + 15), "the ephemeral node outlived a stalled owner"
        owner.process.send_signal(signal.SIGCONT)
        # Only after it reconnects does the owner learn its session is gone.
        owner.expect("state LOST", timeout_s=30)
        assert observer.exists("/members/b") is None
    finally:
        owner.close()
        observer.stop()
        observer.close()


def test_chroots_keep_tests_apart(zk):
    first, second = connect(zk.chroot()), connect(zk.chroot())
    try:
        first.create("/only-here", b"1")
        assert second.exists("/only-here") is None
        assert first.get("/only-here")[0] == b"1"
    finally:
        for client in (first, second):
            client.stop()
            client.close()


def test_mntr_counts_requests_and_watches(zk, zk_client):
    node = zk.nodes[0]
    before = node.mntr()
    for i in range(20):
        zk_client.create(f"/n{i}", b"")
        zk_client.get_children("/", watch=lambda event: None)
    after = node.mntr()
    assert after["zk_packets_received"] - before["zk_packets_received"] >= 40
    assert after["zk_watch_count"] >= 1
    assert after["zk_server_state"] in ("standalone", "leader", "follower")
    assert zk.mntr()[0]["zk_packets_received"] >= after["zk_packets_received"]
